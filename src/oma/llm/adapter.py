"""One interface in front of every model provider."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from oma.errors import OmaError
from oma.llm.types import ChatRequest, ChatResponse


class LLMError(OmaError):
    """A model call failed after the adapter's own retries (network, HTTP status, auth).
    Transient unless the server refused the request as such (``transient=False``: a bad key,
    an unknown model, a malformed request), which the same call would meet again."""

    code = "LLM_ERROR"
    transient = True
    # The HTTP status the provider answered with, when it answered with an error status (it
    # generated, and billed, nothing); None when the request failed otherwise (timed out,
    # connection lost: it may have been billed) or the answer was unusable.
    status: int | None = None


class LLMResponseError(LLMError):
    """The provider answered, but not with something the engine can use (malformed output)."""

    code = "LLM_BAD_RESPONSE"


@runtime_checkable
class LLMAdapter(Protocol):
    """``chat`` answers one model turn; adapters retry transient failures themselves."""

    name: str

    async def chat(self, request: ChatRequest) -> ChatResponse: ...
