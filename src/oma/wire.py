"""Base class for models that mirror the reference's JSON shapes (camelCase on the wire)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from oma import jsonutil


class WireModel(BaseModel):
    """Strict on types, camelCase aliases, unknown fields kept so a round trip loses nothing.

    Optional fields are omitted from the JSON when they are ``None``, as the reference omits
    ``undefined``; values inside free-form dicts (tool inputs, metadata) are left untouched.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        extra="allow",
        allow_inf_nan=False,
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_json(self) -> str:
        return jsonutil.dumps(self.to_wire())

    def to_data(self) -> dict[str, Any]:
        """The wire shape in Python mode: what this model becomes inside a snapshot's dump
        (which keeps lone surrogates in keys for ``jsonutil.dumps`` to escape)."""
        return self.model_dump(mode="python", by_alias=True, exclude_none=True)
