"""The sha256 of values a store wrote last, so a compare-and-set from that value (a fenced
save's expected value is the previous save) does not hash it a second time."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

_KEPT = 64  # keys remembered (a store's writers compare-and-set a few checkpoint keys)


class DigestMemo:
    def __init__(self) -> None:
        self._last: OrderedDict[str, tuple[str, bytes]] = OrderedDict()

    def digest(self, key: str, value: str, encoded: bytes | None = None) -> bytes:
        """sha256 of ``value`` (UTF-8, surrogates passed), reused when ``value`` is the very
        string last recorded for ``key``."""
        known = self._last.get(key)
        if known is not None and known[0] is value:
            return known[1]
        data = encoded if encoded is not None else value.encode("utf-8", "surrogatepass")
        return hashlib.sha256(data).digest()

    def record(self, key: str, value: str, digest: bytes) -> None:
        self._last[key] = (value, digest)
        self._last.move_to_end(key)
        while len(self._last) > _KEPT:
            self._last.popitem(last=False)

    def forget(self, key: str | None = None) -> None:
        if key is None:
            self._last.clear()
        else:
            self._last.pop(key, None)
