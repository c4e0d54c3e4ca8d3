"""The cyclic garbage collector held off while a restore builds a large document.

Loading a long run's checkpoint allocates some 50,000 containers of parsed JSON and then as
many model instances: each 700 allocations start a collection that walks the young objects,
and every tenth a larger one, although none of these objects can form a cycle (JSON values and
models over them are trees). Held off over such a build, the collector runs once afterwards:
a 1,000-turn run's restore spends a millisecond or more less (issue 45's restore cost).
Only synchronous code runs inside: no other coroutine allocates while it is held off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off inside, back on after if it was on (nested uses leave it to the
    outermost). Not for code that awaits or runs long: garbage in cycles waits meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
