"""Base class for models that mirror the reference's JSON shapes (camelCase on the wire)."""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from oma import jsonutil


def _is_none(value: object) -> bool:
    return value is None


def _admits_none(annotation: object) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _admits_none(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_admits_none(arg) for arg in typing.get_args(annotation))
    return False


class WireModel(BaseModel):
    """Strict on types, camelCase aliases, unknown fields kept so a round trip loses nothing.

    A declared field is omitted from the JSON when it is ``None``, as the reference omits
    ``undefined``. Unknown fields are written as they were read, ``null`` included (the
    reference's ``JSON.stringify`` keeps them), and values inside free-form dicts (tool inputs,
    metadata) are left untouched.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        extra="allow",
        allow_inf_nan=False,
    )

    # A report (e.g. ``oma checkpoint show --json``) sets this False: every field, null included.
    omit_none: ClassVar[bool] = True

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Per declared field rather than ``exclude_none`` at dump time, which would also drop
        # unknown fields whose value is null.
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.omit_none:
            return
        changed = False
        for info in cls.model_fields.values():
            if info.exclude_if is None and _admits_none(info.annotation):
                info.exclude_if = _is_none
                changed = True
        if changed:
            cls.model_rebuild(force=True, raise_errors=False)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return jsonutil.dumps(self.to_wire())

    def to_data(self) -> dict[str, Any]:
        """The wire shape in Python mode: what this model becomes inside a snapshot's dump
        (which keeps lone surrogates in keys for ``jsonutil.dumps`` to escape)."""
        return self.model_dump(mode="python", by_alias=True)
