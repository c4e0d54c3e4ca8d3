"""What the networked stores (Redis, Postgres) share: connection errors and secret hygiene.

Connection strings carry passwords. Every message built from a URL, DSN or driver error goes
through ``redact_url`` / ``scrub`` so that a password can never reach a log line, a traceback
or a Kubernetes status condition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

from oma.errors import StoreAuthError, StoreUnavailableError

__all__ = [
    "StoreAuthError",
    "StoreUnavailableError",
    "encode_password",
    "redact_url",
    "scrub",
    "sentence",
    "url_passwords",
]

_MASK = "***"
# key=value connection strings (libpq): password='it''s' or password=plain
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.|'')*'|\S+)", re.IGNORECASE)
# password=... in a URL query string (libpq accepts it there too)
_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)
# Any URL-ish user:password@ that slipped into a driver message.
_USERINFO = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")


def split_userinfo(url: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme://, user, password, rest)`` of a URL with credentials, found by position
    rather than by URL grammar: a password may hold an unencoded ``/``, ``#``, ``?`` or ``@``
    that would end the authority for a URL parser (which then sees no password at all). The
    userinfo is everything between ``://`` and the last ``@`` before the host. None: no
    userinfo. ``password`` is None when the userinfo has no ``:``."""
    scheme, found, rest = url.partition("://")
    if not found:
        return None
    at = rest.rfind("@")
    if at < 0:
        return None
    userinfo, hostpart = rest[:at], rest[at + 1 :]
    user, colon, password = userinfo.partition(":")
    return f"{scheme}://", user, password if colon else None, hostpart


def url_passwords(url: str) -> tuple[str, ...]:
    """The password of ``url`` as written and percent-decoded (for masking: both forms)."""
    parts = split_userinfo(url)
    if parts is None:
        return ()
    password = parts[2]
    if not password:
        return ()
    return tuple(dict.fromkeys(s for s in (password, unquote(password)) if s))


_UNSAFE_IN_PASSWORD = {"/": "%2F", "#": "%23", "?": "%3F", "@": "%40"}


def encode_password(url: str) -> str:
    """``url`` with ``/``, ``#``, ``?`` and ``@`` in its password percent-encoded, so that the
    drivers' URL parsers read the password the user wrote (and not a host, path or fragment made
    of pieces of it, which would then show in their errors). Anything else is left as written
    (``%xx`` already encoded stays so)."""
    parts = split_userinfo(url)
    if parts is None:
        return url
    start, user, written, hostpart = parts
    if written is None:
        return url
    password = written
    for char, code in _UNSAFE_IN_PASSWORD.items():
        password = password.replace(char, code)
    return f"{start}{user}:{password}@{hostpart}"


def redact_url(url: str) -> str:
    """``url`` (or libpq ``key=value`` DSN) with any password replaced by ``***``: the
    userinfo's password, however it is written, and ``password=`` in the query. When in doubt
    (an ``@`` later in the URL) more is masked, never less."""
    if "://" not in url:
        return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + _MASK, url)
    parts = split_userinfo(url)
    if parts is not None and parts[2] is not None:
        start, user, _, hostpart = parts
        url = f"{start}{user}:{_MASK}@{hostpart}"
    head, question, query = url.partition("?")
    if question:
        url = head + "?" + _QUERY_PASSWORD.sub(lambda m: m.group(1) + _MASK, query)
    return url


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
