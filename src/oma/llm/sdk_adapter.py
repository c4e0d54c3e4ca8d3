"""The base of the adapters built on an official SDK (``anthropic``, ``openai``).

Both SDKs are generated from one template, so all that surrounds the HTTP call is the same for
both: reading a client's settings back, SDK failures as one-line ``LLMError`` messages without the
credentials, saying whether the SDK's own retries were used up, the placeholder key for local
servers, and checking raw response bodies (the SDKs do not validate them). It lives here once so
that a fix to redaction or to an error's wording reaches both providers. A provider module keeps
only what differs: its credentials, its request and response shapes, and how its error bodies
explain themselves. This module imports neither SDK: naming one provider never loads the other.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar, cast
from urllib.parse import quote

from oma.llm import output_json
from oma.llm.adapter import LLMError, LLMResponseError
from oma.llm.types import (
    CALL_KEY_HEADER,
    ChatRequest,
    ChatResponse,
    ContentBlock,
    TokenUsage,
    ToolUseBlock,
)

# Sent when a base_url is configured but no key exists: local compatible servers usually ignore
# authentication, but the SDKs refuse to send a request without some credential.
LOCAL_PLACEHOLDER_KEY = "oma-no-key"

# Statuses the SDKs retry by themselves (their `_should_retry`), as is any status >= 500; an error
# with one of them means the retries are used up, which the message says so nobody adds another
# retry loop around it.
_RETRIED_STATUSES = frozenset({408, 409, 429})
# Statuses that refuse the request itself (its key, model or shape): sending it again fails
# the same way, so the error is not transient.
_REFUSED_AS_SUCH = frozenset({400, 401, 403, 404, 413, 422})


class SDKClient(Protocol):
    """What the base reads from ``anthropic.AsyncAnthropic`` and ``openai.AsyncOpenAI`` alike."""

    @property
    def base_url(self) -> object: ...
    @property
    def timeout(self) -> object: ...
    @property
    def max_retries(self) -> int: ...
    async def close(self) -> None: ...


class SDKError(Protocol):
    """Every exception an SDK raises for a failed call (its ``APIError``) carries a message."""

    @property
    def message(self) -> str: ...


class SDKStatusError(SDKError, Protocol):
    """The SDK's ``APIStatusError``: the server answered 4xx or 5xx."""

    @property
    def status_code(self) -> int: ...
    @property
    def body(self) -> object: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def response(self) -> Any: ...  # the httpx.Response


class SDKErrors(NamedTuple):
    """One SDK's exception classes; in both SDKs timeouts are connection errors, and all four
    derive from ``base``."""

    base: type[Exception]
    status: type[SDKStatusError]
    timeout: type[Exception]
    connection: type[SDKError]


ClientT = TypeVar("ClientT", bound=SDKClient)


def configured_key(
    api_key: str | None, base_url: str | None, *, env: str, url_env: str, elsewhere: bool = False
) -> str | None:
    """``api_key``, else the ``env`` variable; the placeholder when only a base URL is set.

    ``elsewhere`` says the SDK will find another credential by itself, which the placeholder
    would shadow.
    """
    key = api_key or os.environ.get(env) or None
    if key is None and (base_url or os.environ.get(url_env)) and not elsewhere:
        key = LOCAL_PLACEHOLDER_KEY
    return key


class SDKAdapter(ABC, Generic[ClientT]):
    """An ``LLMAdapter`` around an SDK client; subclasses send the request and parse the reply."""

    name: str
    errors: ClassVar[SDKErrors]

    def __init__(self, model: str, client: ClientT, *, owns_client: bool, timeout: float) -> None:
        self.model = model
        self._client = client
        self._owns_client = owns_client
        # A passed-in client brings its own settings; error messages should report those.
        self.max_retries = client.max_retries
        self.timeout = float(client.timeout) if isinstance(client.timeout, int | float) else timeout

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    @property
    def _attempts(self) -> str:
        return "1 attempt" if self.max_retries == 0 else f"{self.max_retries + 1} attempts"

    async def aclose(self) -> None:
        """Close the HTTP connections, unless the client was passed in (its owner closes it)."""
        if self._owns_client:
            await self._client.close()

    async def chat(self, request: ChatRequest) -> ChatResponse:
        model = request.model or self.model
        try:
            payload = await self._send(request, model)
        except self.errors.base as err:
            # A status error's own text embeds the response body, which can echo the key;
            # chaining it would print it in tracebacks. Our message already carries what it says.
            cause = None if isinstance(err, self.errors.status) else err
            raise self._translate(err, model) from cause
        return self._parse(payload, model)

    @abstractmethod
    async def _send(self, request: ChatRequest, model: str) -> bytes:
        """Send ``request`` through the SDK (which retries) and return the raw response body."""

    @abstractmethod
    def _parse(self, payload: bytes, model: str) -> ChatResponse:
        """Check a response body and turn it into a ``ChatResponse``."""

    @abstractmethod
    def _secrets(self) -> Iterable[str | None]:
        """The client's credentials, to be kept out of error messages."""

    @staticmethod
    @abstractmethod
    def _explain(body: object) -> str:
        """The provider's own explanation from an error body."""

    def _translate(self, err: Exception, model: str) -> LLMError:
        where = f"{self.name} model {model!r} at {self.base_url}"
        secrets = [s for s in self._secrets() if s]
        if isinstance(err, self.errors.status):
            status = err.status_code
            retried = _sdk_retried(status, err.response)
            tries = self.max_retries
            said = f" after {tries} {'retry' if tries == 1 else 'retries'}"
            after = said if retried and tries else ""
            hint = " (check the API key)" if status in (401, 403) else ""
            # Redacted before it is cut: a key across the cut would leave its first part.
            detail = one_line(redact(self._explain(err.body), secrets))
            rid = f" [request-id {err.request_id}]" if err.request_id else ""
            error = LLMError(
                f"{where} answered HTTP {status}{after}{hint}: {detail}{rid}",
                transient=status not in _REFUSED_AS_SUCH,
            )
            error.status = status
            return error
        if isinstance(err, self.errors.timeout):
            return LLMError(f"{where} timed out after {self.timeout}s ({self._attempts})")
        if isinstance(err, self.errors.connection):
            cause = redact(str(err.__cause__ or err.message), secrets)
            return LLMError(f"{where} unreachable ({self._attempts}): {cause}")
        # Caught as `errors.base`, so an SDK error with its message.
        return LLMError(f"{where} failed: {redact(cast(SDKError, err).message, secrets)}")


def _sdk_retried(status: int, response: Any) -> bool:
    """Whether the SDKs retried a call that ended with ``status``: the server's
    ``x-should-retry`` header decides when it is there, as in both SDKs' ``_should_retry``."""
    headers = getattr(response, "headers", None) or {}
    said = str(headers.get("x-should-retry"))
    if said in ("true", "false"):
        return said == "true"
    return status in _RETRIED_STATUSES or status >= 500


def one_line(text: str) -> str:
    """An error explanation fit for one log line."""
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def load_object(payload: bytes, where: str) -> dict[str, Any]:
    """A response body as a JSON object, or ``LLMResponseError``."""
    try:
        body = output_json.loads(payload)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(f"{where} is not JSON ({err}): {payload[:120]!r}") from err
    if not isinstance(body, dict):
        raise LLMResponseError(f"{where} is not a JSON object")
    return body


def tool_use(call_id: str, name: str, args: dict[str, Any], what: str) -> ToolUseBlock:
    """A checked tool call; ``what`` names it in the error."""
    try:
        output_json.check_tool_input_depth(args)
    except output_json.OutputJSONError as err:
        raise LLMResponseError(f"{what}: {err}") from None
    return ToolUseBlock(id=call_id, name=name, input=args)


def chat_response(
    body: dict[str, Any],
    blocks: list[ContentBlock],
    stop: object,
    model: str,
    *,
    usage: tuple[str, str],
    where: str,
) -> ChatResponse:
    """The turn made of ``blocks``; ``usage`` names the body's input and output token fields."""
    return ChatResponse(
        content=blocks,
        usage=token_usage(body.get("usage"), usage, where),
        usage_reported=body.get("usage") is not None,
        stop_reason=stop if isinstance(stop, str) else None,
        model=body["model"] if isinstance(body.get("model"), str) else model,
    )


def token_usage(usage: object, fields: tuple[str, str], where: str) -> TokenUsage:
    # Local servers often omit usage; zero is the honest count of what we know.
    if usage is None:
        return TokenUsage()
    if not isinstance(usage, dict):
        raise LLMResponseError(f"{where}: 'usage' is {kind(usage)}, expected an object")
    counts: list[int] = []
    for field in fields:
        value = usage.get(field) or 0
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LLMResponseError(f"{where}: usage.{field} is {value!r}, expected a count")
        counts.append(value)
    return TokenUsage(input_tokens=counts[0], output_tokens=counts[1])


def kind(value: object) -> str:
    """What a JSON value is, for error messages."""
    return "missing" if value is None else f"a {type(value).__name__}"


def call_headers(request: ChatRequest) -> dict[str, str] | None:
    """The request's own headers: its call key, when it has one, percent-encoded: run and task
    ids may hold any character, and a header value only visible ASCII (a newline in one would
    end the header, a non-ASCII letter fails the request)."""
    if not request.call_key:
        return None
    return {CALL_KEY_HEADER: quote(request.call_key, safe=":-._~")}
