"""The names a store accepts, as patterns: the stores check them, and the run spec and the
TeamRun CRD use the same patterns, so the API server refuses what a store would refuse."""

from __future__ import annotations

# PostgreSQL identifiers are at most 63 bytes; the store derives index names from the table's
# name, which need the rest. Unquoted-identifier characters only: the SQL is composed with them.
POSTGRES_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,47}$"
# Every Redis key of a store is "{namespace}:...": braces would move it to another hash slot.
REDIS_NAMESPACE = r"^[^{}]+$"
