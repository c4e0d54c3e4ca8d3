"""What the networked stores (Redis, Postgres) share: connection errors and secret hygiene.

Connection strings carry passwords. Every message built from a URL, DSN or driver error goes
through ``redact_url`` / ``scrub`` so that a password can never reach a log line, a traceback
or a Kubernetes status condition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from oma.errors import StoreAuthError, StoreUnavailableError

__all__ = ["StoreAuthError", "StoreUnavailableError", "redact_url", "scrub", "sentence"]

_MASK = "***"
# key=value connection strings (libpq): password='it''s' or password=plain
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.|'')*'|\S+)", re.IGNORECASE)
# password=... in a URL query string (libpq accepts it there too)
_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)
# Any URL-ish user:password@ that slipped into a driver message.
_USERINFO = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")


def redact_url(url: str) -> str:
    """``url`` (or libpq ``key=value`` DSN) with any password replaced by ``***``."""
    if "://" not in url:
        return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + _MASK, url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # unparsable: mask the whole userinfo rather than guess
        return _USERINFO.sub(lambda m: m.group(1) + _MASK + "@", url)
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{_MASK}@{hostinfo}"
    query = _QUERY_PASSWORD.sub(lambda m: m.group(1) + _MASK, parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def sentence(message: str) -> str:
    """A driver message as one line ending in punctuation, to be followed by our advice."""
    text = " ".join(message.split())
    return text if text.endswith((".", "?", "!")) else text + "."


def scrub(message: str, secrets: Iterable[str | None]) -> str:
    """``message`` with every known secret (and any URL password) masked.

    Drivers do not print passwords today; this is the belt to that brace, because a future
    driver version (or a DSN echoed back in an error) must not turn into a leaked secret.
    """
    for secret in secrets:
        if secret:
            message = message.replace(secret, _MASK)
    message = _USERINFO.sub(lambda m: m.group(1) + _MASK + "@", message)
    return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + _MASK, message)
