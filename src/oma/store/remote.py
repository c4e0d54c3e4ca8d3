"""What the networked stores (Redis, Postgres) share: connection errors and secret hygiene.

Connection strings carry passwords, and some carry more secrets in their query (``sslpassword``,
tokens). Every message built from a URL, DSN or driver error goes through ``redact_url`` /
``scrub`` so that none of them can reach a log line, a traceback or a Kubernetes status
condition; ``mask_secret`` masks a whole secret value (e.g. what a Kubernetes Secret held) in
any text.

A query parameter is secret when its name (percent-decoded, any case) contains ``pass``,
``secret``, ``token``, ``auth`` or ``credential``: ``password``, ``sslpassword``,
``ssl_password``, ``passfile``, ``auth_token``, ``client_secret``... Paths of keys and
certificates (``sslkey``, ``sslcert``, ``ssl_keyfile``) are not secrets and stay shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import unquote

from oma.errors import StoreAuthError, StoreUnavailableError

__all__ = [
    "StoreAuthError",
    "StoreUnavailableError",
    "encode_password",
    "is_secret_parameter",
    "mask_secret",
    "redact_url",
    "scrub",
    "secret_forms",
    "sentence",
    "url_passwords",
]

_MASK = "***"
_SECRET_WORDS = "pass|secret|token|auth|credential"
_SECRET_PARAMETER = re.compile(_SECRET_WORDS, re.IGNORECASE)
# key=value connection strings (libpq): password='it''s', sslpassword=plain, ... The lookahead
# stays within the name and the name is taken possessively: linear in the text's length.
_CONNINFO_PASSWORD = re.compile(
    rf"((?<![\w.-])(?=[\w.-]*?(?:{_SECRET_WORDS}))[\w.-]++\s*=\s*)('(?:[^'\\]|\\.|'')*'|\S+)",
    re.IGNORECASE,
)
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


def is_secret_parameter(name: str) -> bool:
    """Whether a URL query or libpq parameter of this name holds a secret (its value masked)."""
    return _SECRET_PARAMETER.search(unquote(name)) is not None


def url_passwords(url: str) -> tuple[str, ...]:
    """The secrets written in ``url``, as written and percent-decoded (for masking: both
    forms): its password and the values of its secret query parameters; for a libpq
    ``key=value`` DSN, the values of its secret parameters."""
    found: list[str] = []
    if "://" not in url:
        for match in _CONNINFO_PASSWORD.finditer(url):
            value = match.group(2)
            if value.startswith("'") and value.endswith("'") and len(value) >= 2:
                found.append(value[1:-1].replace("''", "'").replace("\\'", "'"))
            found.append(value)
        return tuple(dict.fromkeys(s for s in found if s))
    parts = split_userinfo(url)
    if parts is not None and parts[2]:
        found.append(parts[2])
    _, question, query = (parts[3] if parts is not None else url).partition("?")
    if question:
        for pair in query.split("#", 1)[0].split("&"):
            name, equals, value = pair.partition("=")
            if equals and is_secret_parameter(name):
                found.append(value)
    decoded = [unquote(s.replace("+", " ")) for s in found] + [unquote(s) for s in found]
    return tuple(dict.fromkeys(s for s in (*found, *decoded) if s))


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
    """``url`` (or libpq ``key=value`` DSN) with every secret replaced by ``***``: the
    userinfo's password, however it is written, and the value of every secret query parameter
    (``password=``, ``sslpassword=``, ... see the module's docstring). When in doubt (an ``@``
    later in the URL) more is masked, never less."""
    if "://" not in url:
        return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + _MASK, url)
    parts = split_userinfo(url)
    if parts is not None and parts[2] is not None:
        start, user, _, hostpart = parts
        url = f"{start}{user}:{_MASK}@{hostpart}"
    head, question, query = url.partition("?")
    if question:
        pairs = []
        for pair in query.split("&"):
            name, equals, _ = pair.partition("=")
            pairs.append(f"{name}={_MASK}" if equals and is_secret_parameter(name) else pair)
        url = head + "?" + "&".join(pairs)
    return url


def sentence(message: str) -> str:
    """A driver message as one line ending in punctuation, to be followed by our advice."""
    text = " ".join(message.split())
    return text if text.endswith((".", "?", "!")) else text + "."


def secret_forms(secret: str) -> tuple[str, ...]:
    """The ways ``secret`` (a value read from a secret: a URL, a DSN, a bare password) may be
    written in a message, longest first: as it is, without surrounding whitespace,
    percent-decoded, each secret it holds (``url_passwords``), and each of those escaped as
    ``repr`` and JSON escape them."""
    stripped = secret.strip()
    forms = {secret, stripped, unquote(stripped), *url_passwords(stripped)}
    for form in list(forms):
        forms.add(repr(form)[1:-1])
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


def mask_secret(text: str, secret: str, *, min_length: int = 1) -> str:
    """``text`` with every form of ``secret`` (``secret_forms``) of at least ``min_length``
    characters, and anything shaped like a password (``scrub``), replaced by ``***``."""
    forms = [form for form in secret_forms(secret) if len(form) >= min_length]
    return scrub(text, forms)


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
