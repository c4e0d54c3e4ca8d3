"""The journal capability: a key held as a base record plus appended records, versioned.

A store that offers it keeps, beside its plain entries, any number of journals: per key a list
of string records, numbered from 0 in the order written, a version string and metadata. A write
either appends records or replaces the whole list, atomically, and only if the journal's version
is still the one the writer expects (``expected=None``: no journal yet), so one round trip of a
few bytes fences a writer, whatever the size of what it holds. Versions are chosen by writers
and must never repeat (``new_version``), which is what makes a stale writer's expectation fail
even after a delete and re-create.

One record is the journal's base: the first one a plain read returns (record 0 after a replace).
An append may ``rebase``: its first record becomes the base, and the records before it are kept
(a history) until a rebase drops them (``drop_before``). Numbers never shift: after a drop the
first record kept is still numbered as it was written (``JournalEntry.start``).

Journals are not entries: ``get`` and ``list`` do not see them; ``delete(key)`` and ``clear()``
remove them with the entries. What the records mean is the writer's business (checkpoints
keep a snapshot and its deltas, ``oma.checkpoint.journal``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, TypeGuard, runtime_checkable

from pydantic import BaseModel, ConfigDict

from oma.store.base import MemoryStore, Metadata
from oma.store.capabilities import capabilities_of


class JournalEntry(BaseModel):
    """One journal: ``records[0]`` is the base (or, read with ``history``, the first record
    kept), the rest were appended in order; ``start`` is the number of ``records[0]``."""

    model_config = ConfigDict(frozen=True)

    key: str
    records: list[str]
    version: str
    metadata: Metadata | None = None
    created_at: datetime
    start: int = 0


JournalKeys = list[str]  # an alias: a method named list hides the builtin in store classes


class JournalHead(BaseModel):
    """A journal without its records: what a progress poll reads."""

    model_config = ConfigDict(frozen=True)

    key: str
    records: int  # what a plain read returns: the base and the records after it
    version: str
    metadata: Metadata | None = None
    created_at: datetime
    base: int = 0  # the base's number
    start: int = 0  # the number of the first record kept (base - start records of history)


@runtime_checkable
class JournalStore(MemoryStore, Protocol):
    """A store that keeps journals beside its entries; ``supports_journal`` tells which do."""

    async def journal_get(self, key: str, *, history: bool = False) -> JournalEntry | None:
        """The base and the records after it; with ``history``, every record kept."""
        ...

    async def journal_version(self, key: str) -> str | None: ...

    async def journal_head(self, key: str) -> JournalHead | None: ...

    async def journal_write(
        self,
        key: str,
        records: Sequence[str],
        *,
        version: str,
        expected: str | None,
        replace: bool,
        force: bool = False,
        metadata: Metadata | None = None,
        rebase: bool = False,
        drop_before: int | None = None,
    ) -> bool:
        """Append ``records`` (``replace=False``) or make them the whole journal, if its
        version is ``expected``; then its version is ``version`` and its metadata
        ``metadata``. ``force`` (replace only) skips the comparison. ``rebase`` (append
        only): the first record appended becomes the base; ``drop_before`` (with ``rebase``)
        removes the records numbered below it (at most up to the new base). ``False`` when the
        comparison failed (or an append found no journal); it never raises for that."""
        ...

    async def journal_keys(self) -> JournalKeys: ...


def supports_journal(store: MemoryStore) -> TypeGuard[JournalStore]:
    """True when ``store`` declares journals (``oma.store.capabilities.capabilities_of``)."""
    return capabilities_of(store).journal


def new_version() -> str:
    """A journal version no writer has used: 128 random bits."""
    return uuid.uuid4().hex


def check_write(
    records: Sequence[str],
    *,
    replace: bool,
    force: bool,
    rebase: bool = False,
    drop_before: int | None = None,
) -> None:
    """The arguments every store refuses alike."""
    if not records:
        raise ValueError("a journal write needs at least one record")
    if force and not replace:
        raise ValueError("force applies to a replacing write only: appends are always compared")
    if rebase and replace:
        raise ValueError(
            "rebase applies to an append: a replacing write's first record is the base"
        )
    if drop_before is not None and (not rebase or drop_before < 0):
        raise ValueError("drop_before is a record number >= 0 and applies to a rebasing append")
