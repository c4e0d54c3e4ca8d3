"""``RedactingStore``: a decorator that redacts credentials from values before they are stored.

Keys and metadata pass through unchanged; reads return what was stored (already redacted).
It offers ``set_with_expiry`` only when the wrapped store declares expiry, and it never offers
``compare_and_set`` (nor journals): redaction rewrites values, so an atomic swap on the redacted
text would compare something other than what the caller wrote. Its ``capabilities`` say so
(the inner store's expiry, nothing else), and durable approvals therefore fail closed on it, as
in the reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Self

from oma.redaction import compile_patterns, redact_value
from oma.store.base import (
    Entries,
    MemoryEntry,
    MemoryStore,
    Metadata,
    close_store,
    supports_expiry,
)
from oma.store.capabilities import StoreCapabilities, capabilities_of

_EXPIRY_ONLY, _NOTHING = StoreCapabilities(expiry=True), StoreCapabilities()


class RedactingStore:
    """``RedactingStore(inner, patterns=[...])``; extra ``patterns`` replace every match.

    Constructing it over a store that declares expiry returns an ``ExpiringRedactingStore`` (a
    subclass that has ``set_with_expiry``); over any other store, this class (which has not).
    """

    def __new__(cls, inner: MemoryStore, *, patterns: Iterable[re.Pattern[str] | str] = ()) -> Self:
        if cls is RedactingStore and supports_expiry(inner):
            return super().__new__(ExpiringRedactingStore)  # type: ignore[return-value]
        return super().__new__(cls)

    def __init__(
        self, inner: MemoryStore, *, patterns: Iterable[re.Pattern[str] | str] = ()
    ) -> None:
        self.inner = inner
        self.patterns = compile_patterns(patterns)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, patterns={len(self.patterns)})"

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's expiry; never compare-and-set or journals (see the module)."""
        expiry = capabilities_of(self.inner).expiry and isinstance(self, ExpiringRedactingStore)
        return _EXPIRY_ONLY if expiry else _NOTHING

    def redact(self, value: str) -> str:
        return redact_value(value, self.patterns)

    async def get(self, key: str) -> MemoryEntry | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: str, metadata: Metadata | None = None) -> None:
        await self.inner.set(key, self.redact(value), metadata)

    async def list(self) -> Entries:
        return await self.inner.list()

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def clear(self) -> None:
        await self.inner.clear()

    async def aclose(self) -> None:
        """Close the wrapped store's connections, if it has any."""
        await close_store(self.inner)


class ExpiringRedactingStore(RedactingStore):
    """A ``RedactingStore`` over a store that records turn expiry; redacts those writes too."""

    async def set_with_expiry(
        self, key: str, value: str, expires_at_turn: int, metadata: Metadata | None = None
    ) -> None:
        inner = self.inner
        # Checked at construction; re-checked so a swapped ``inner`` fails loudly, not oddly.
        if not supports_expiry(inner):
            raise TypeError(f"{inner!r} has no set_with_expiry")
        await inner.set_with_expiry(key, self.redact(value), expires_at_turn, metadata)
