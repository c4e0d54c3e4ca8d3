"""What a store says it can do, beyond the required ``MemoryStore`` methods.

A store declares its optional capabilities in a class attribute ``capabilities`` (a
``StoreCapabilities``), as LangGraph's stores declare ``supports_ttl``: the engine reads that
declaration instead of guessing from which attributes happen to exist. A declaration is a
promise, not only a list of methods: ``compare_and_set=True`` says the swap is atomic across
every writer the store can have, so a store with a ``compare_and_set`` method that cannot keep
that promise declares ``compare_and_set=False`` and is treated as having none.

Wrappers (``PrefixedStore``, ``RedactingStore``, ``FaultInjectingStore``) declare through a
property what their inner store declares, less what the wrapper itself cannot pass on.

A store class without the attribute (written before it existed) is not refused: its
capabilities are inferred from its methods, at every check, exactly as before (a callable
``compare_and_set``, ``set_with_expiry``, ``journal_write``). Whatever is declared or inferred
is checked against the methods, the first time a store is asked about and again whenever what
it declares changes: a store that claims a capability without a method it needs is refused
with a ``StoreCapabilityError`` naming the store, the capability and the method.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, fields

from oma.errors import StoreCapabilityError

# Each capability and the methods a store needs for it (the first one is what inference of
# an undeclared store looks for, as ``supports_*`` always did).
CAPABILITY_METHODS: dict[str, tuple[str, ...]] = {
    "compare_and_set": ("compare_and_set",),
    "expiry": ("set_with_expiry",),
    "journal": ("journal_write", "journal_get", "journal_version", "journal_head", "journal_keys"),
    "value_size": ("value_size",),
}


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """The optional capabilities of a store; each is off unless declared.

    - ``compare_and_set``: an atomic ``compare_and_set`` over every writer the store can have
      (fencing, durable approvals).
    - ``expiry``: ``set_with_expiry`` records a turn-count expiry (shared memory enforces it).
    - ``journal``: journals (``oma.store.journal``), the checkpoint journal layout.
    - ``value_size``: ``value_size(key)`` says how many bytes a value holds without reading it
      (the operator's progress poll reads no snapshot larger than it would parse).
    """

    compare_and_set: bool = False
    expiry: bool = False
    journal: bool = False
    value_size: bool = False

    def __post_init__(self) -> None:
        for field in fields(self):
            if not isinstance(getattr(self, field.name), bool):
                raise TypeError(
                    f"StoreCapabilities.{field.name} must be True or False, "
                    f"got {getattr(self, field.name)!r}"
                )

    def declared(self) -> tuple[str, ...]:
        """The names of the capabilities that are on, in declaration order."""
        return tuple(field.name for field in fields(self) if getattr(self, field.name))


# The capabilities each store was last found to back with its methods: a store is checked the
# first time it is asked about and again whenever what it declares changes (a wrapper whose
# inner store was swapped), not at every boundary of a run.
_checked: weakref.WeakKeyDictionary[object, StoreCapabilities] = weakref.WeakKeyDictionary()


def capabilities_of(store: object) -> StoreCapabilities:
    """What ``store`` can do: its declaration, or (no ``capabilities`` attribute) what its
    methods show; either way checked against its methods (``StoreCapabilityError`` if a claimed
    capability lacks one)."""
    declared = getattr(store, "capabilities", None)
    if declared is None:
        found = _inferred(store)
    elif isinstance(declared, StoreCapabilities):
        found = declared
    else:
        raise StoreCapabilityError(
            f"{_name(store)}.capabilities is {declared!r}, not a StoreCapabilities: declare "
            "e.g. capabilities = StoreCapabilities(compare_and_set=True) "
            "(from oma.store import StoreCapabilities), or remove the attribute to have the "
            "capabilities inferred from the store's methods"
        )
    try:
        if _checked.get(store) == found:
            return found
    except TypeError:  # unhashable, or no weak references: checked every time instead
        pass
    _check_methods(store, found, inferred=declared is None)
    with contextlib.suppress(TypeError):
        _checked[store] = found
    return found


def _check_methods(store: object, found: StoreCapabilities, *, inferred: bool) -> None:
    for capability in found.declared():
        for method in CAPABILITY_METHODS[capability]:
            if callable(getattr(store, method, None)):
                continue
            if inferred:
                claim = (
                    f"has {CAPABILITY_METHODS[capability][0]}(), so it is taken to have the "
                    f"{capability!r} capability,"
                )
                fix = "implement it, or declare the store's capabilities (StoreCapabilities)"
            else:
                claim = f"declares the {capability!r} capability"
                fix = f"implement it, or declare {capability}=False in its capabilities"
            raise StoreCapabilityError(
                f"{_name(store)} {claim} but has no callable {method}(): {fix}"
            )


def _inferred(store: object) -> StoreCapabilities:
    return StoreCapabilities(
        **{
            name: callable(getattr(store, methods[0], None))
            for name, methods in CAPABILITY_METHODS.items()
        }
    )


def _name(store: object) -> str:
    return type(store).__name__
