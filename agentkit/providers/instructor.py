"""`InstructorCaller`: agentkit's `StructuredCaller` over any instructor client (the `instructor` extra).

instructor reaches Anthropic, Gemini, Mistral, Bedrock, Cohere and more through one API
(`instructor.from_provider(...)`, `instructor.from_openai(...)`, ...). `InstructorCaller` asks such a
client for one reply that validates against the schema, with instructor's own re-asks, and maps its
failures to agentkit's errors, so `run_tool_loop` and `generate_structured` run on any of them.

`pip install 'agentkit[instructor]'`. instructor 1.17 pins `jiter<0.15`, and every `openai` after
3.3.0 needs `jiter>=0.16`: with this extra, pip holds `openai` at 3.3.0 (and may move an `openai` you
had). agentkit's own `OpenAICaller` needs no instructor. See docs/providers.md.

This module imports instructor only when a caller is made; `import agentkit` imports neither it nor
`openai`.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from agentkit._structured import Completion, StructuredRequest
from agentkit._usage import Usage
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, UsageError
from agentkit.providers._wire import detail_count, token_count, transient_status
from agentkit.providers.openai import limit_and_reasoning

__all__ = ["InstructorCaller", "InstructorClient"]

M = TypeVar("M", bound=BaseModel)


class InstructorClient(Protocol):
    """What `InstructorCaller` needs of an instructor client: its async `create_with_completion`."""

    async def create_with_completion(
        self, messages: list[Any], response_model: type[M], max_retries: int = ..., **kwargs: Any
    ) -> tuple[M, Any]: ...


class InstructorCaller:
    """`StructuredCaller` over an async instructor client (`instructor.AsyncInstructor`).

    Each `complete` is one attempt: instructor's request plus up to `max_reasks` re-asks of a reply that
    does not validate. Retry, fallback and backoff stay `generate_structured`'s.

    Settings: `RoleSpec.reasoning` and `RoleSpec.extra_body` go to the client's provider the way agentkit's
    own callers send them, when the instructor client wraps an `openai` or an `anthropic` client. Over
    `openai` (chat completions): `reasoning_effort` (`"none"` for `effort="off"`), and the token limit as
    `max_completion_tokens` whenever a reasoning setting is given (as `OpenAICaller` sends it; else as
    `max_tokens_field`). Over `anthropic` (Messages API): `thinking` with its `budget_tokens` (an effort's
    budget from `THINKING_BUDGETS`), below `RoleSpec.max_tokens`, which it then needs, and no temperature
    beside it. `extra_body` goes as the client's `extra_body` (merged into the request body; it may not name
    `tools`, `tool_choice`, `response_format`, `functions` or `function_call`, the schema's part, which
    instructor writes). Any other client (Gemini, Mistral, Bedrock, ...), or OpenAI's Responses modes for
    `reasoning`, has no field agentkit can fill: such a request is refused with a `UsageError` before it is sent.

    Usage: the tokens are instructor's total over the request and its re-asks; `requests` counts 1 per call,
    since instructor does not report how many re-asks it made. The detail counts are read as agentkit's own
    callers read them: OpenAI's `prompt_tokens_details.cached_tokens` and
    `completion_tokens_details.reasoning_tokens`; Anthropic's cache reads and writes, which are part of the
    input tokens (`input_tokens` plus both), as `AnthropicCaller` counts them.

    Errors: an HTTP 429 anywhere in the failure's causes -> `Throttled`; another status -> `ProviderError`
    (`transient` for 5xx, 408, 409); a timeout or a lost connection -> transient `ProviderError`; a reply
    still invalid after the re-asks -> `StructuredOutputError`; a setting the client's provider cannot be
    sent (above) -> `UsageError`, before any request.

    Args:
        client: An async instructor client, e.g. `instructor.from_openai(openai.AsyncOpenAI(...))`.
        max_reasks: Schema-invalid replies re-asked within one attempt.
        max_tokens_field: The request field that carries `StructuredRequest.max_tokens` (over `openai`,
            `max_completion_tokens` whenever `RoleSpec.reasoning` is set, as reasoning models require).
    """

    def __init__(self, client: InstructorClient, *, max_reasks: int = 1, max_tokens_field: str = "max_tokens") -> None:
        if isinstance(max_reasks, bool) or not isinstance(max_reasks, int) or max_reasks < 0:
            raise UsageError(f"max_reasks must be an int >= 0; got {max_reasks!r}")
        if not callable(getattr(client, "create_with_completion", None)):
            raise UsageError(
                f"client must be an async instructor client (instructor.from_openai(openai.AsyncOpenAI(...)), "
                f"instructor.from_provider(..., async_client=True)); got {type(client).__name__}"
            )
        self._client = client
        self._errors = importlib.import_module("instructor.core.exceptions")
        self.max_reasks = max_reasks
        self._max_tokens_field = max_tokens_field
        self._wire = _wire_of(client)

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Ask `request.model` for one reply that validates against `schema`."""
        if request.parts:
            raise UsageError(
                "InstructorCaller sends prompts of text only, and this prompt holds an image or a document; "
                "use OpenAICaller (or AnthropicCaller), which send them in the provider's wire format"
            )
        messages: list[dict[str, str]] = [{"role": "system", "content": request.system}] if request.system else []
        messages.append({"role": "user", "content": request.dynamic})
        if request.reask:
            messages.append({"role": "user", "content": f"Your previous reply was rejected:\n{request.reask}"})
        options = self._options(request)
        try:
            value, raw = await self._client.create_with_completion(
                messages=messages, response_model=schema, max_retries=self.max_reasks, **options
            )
        except Exception as error:
            raise self._failure(request.model, schema, error) from error
        return Completion(
            value=value,
            usage=_usage(raw, request.model),
            model=str(getattr(raw, "model", None) or request.model),
            response_id=getattr(raw, "id", None),
            finish_reasons=tuple(_finish_reasons(raw)),
        )

    def _options(self, request: StructuredRequest) -> dict[str, Any]:
        """The create call's keyword arguments besides the messages: the role's settings, in the client's terms.

        Raises:
            UsageError: a setting this client's provider cannot be sent (see the class's docs).
        """
        options: dict[str, Any] = {"model": request.model}
        reasoning, limit = request.reasoning, request.max_tokens
        thinking = None
        if reasoning is not None and self._wire not in (_Wire.CHAT, _Wire.MESSAGES):
            raise UsageError(
                f"InstructorCaller sends RoleSpec.reasoning only through an instructor client over an openai client "
                f"(chat completions) or an anthropic client, and this one is {self._wire.value}; drop "
                "RoleSpec.reasoning and set the provider's own parameter on the client, or use OpenAICaller or "
                "AnthropicCaller"
            )
        if self._wire is _Wire.CHAT:
            options.update(limit_and_reasoning(reasoning, limit, self._max_tokens_field))  # as OpenAICaller sends them
        elif limit is not None:
            options[self._max_tokens_field] = limit
        if self._wire is _Wire.MESSAGES:
            thinking = _thinking(request)
            if thinking is not None:
                options["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        if request.temperature is not None and thinking is None:  # beside thinking, Anthropic takes its default only
            options["temperature"] = request.temperature
        if request.seed is not None:
            options["seed"] = request.seed
        if request.extra_body:
            options["extra_body"] = self._extra_body(request)
        return options

    def _extra_body(self, request: StructuredRequest) -> dict[str, Any]:
        """`RoleSpec.extra_body`, for the client's `extra_body` argument (merged into the request body)."""
        body = dict(request.extra_body or {})
        if self._wire not in (_Wire.CHAT, _Wire.RESPONSES, _Wire.MESSAGES):
            raise UsageError(
                f"InstructorCaller sends RoleSpec.extra_body only through an instructor client over an openai or an "
                f"anthropic client, which take it as extra_body, and this one is {self._wire.value}; drop "
                "RoleSpec.extra_body and set the provider's own parameters on the client"
            )
        named = sorted(_SCHEMA_KEYS & set(body))
        if named:
            raise UsageError(
                f"RoleSpec.extra_body may not name {', '.join(map(repr, named))}: instructor writes the schema's "
                "part of the request; choose it by the client's mode (instructor.from_openai(..., mode=...))"
            )
        return body

    def _failure(self, model: str, schema: type[BaseModel], error: Exception) -> Exception:
        for cause in _causes(error):
            status = getattr(cause, "status_code", None)
            if isinstance(status, int) and status == 429:
                return Throttled(f"model server throttled model {model!r} (HTTP 429): {cause}")
            if isinstance(status, int) and status >= 400:
                transient = transient_status(status)
                return ProviderError(
                    f"model server answered HTTP {status} for model {model!r}: {cause}",
                    transient=transient,
                    status=status,
                )
            name = type(cause).__name__
            if "Timeout" in name or "Connection" in name:
                return ProviderError(f"request to model {model!r} failed on the way ({name}: {cause})", transient=True)
        if isinstance(error, self._errors.InstructorError):
            return StructuredOutputError(
                f"the reply of model {model!r} does not match schema {schema.__name__!r}: {error}",
                schema_name=schema.__name__,
                raw=str(getattr(error, "last_completion", "") or ""),
            )
        return error


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend(part for part in (current.__cause__, current.__context__) if part is not None)


class _Wire(enum.Enum):
    """What the instructor client sends its requests through, which decides how a role's settings are sent."""

    CHAT = "over an openai client (chat completions)"
    RESPONSES = "over an openai client in a Responses mode"
    MESSAGES = "over an anthropic client (Messages API)"
    OTHER = "over another provider's client"


_RESPONSES_MODES = frozenset({"responses_tools", "responses_tools_with_inbuilt_tools"})
"""instructor's modes (their values) that send through OpenAI's Responses API."""

_SCHEMA_KEYS = frozenset({"tools", "tool_choice", "response_format", "functions", "function_call"})
"""The request's members that instructor writes from the schema: `RoleSpec.extra_body` may not name them."""


def _wire_of(client: object) -> _Wire:
    """The wire of an instructor client, by the package of the client it wraps (its public `client`)."""
    wrapped = getattr(client, "client", None)
    package = type(wrapped).__module__.partition(".")[0] if wrapped is not None else ""
    if package == "openai":
        mode = getattr(getattr(client, "mode", None), "value", None)
        return _Wire.RESPONSES if mode in _RESPONSES_MODES else _Wire.CHAT
    return _Wire.MESSAGES if package == "anthropic" else _Wire.OTHER


def _thinking(request: StructuredRequest) -> int | None:
    """The thinking budget of a request over an anthropic client, by `AnthropicCaller`'s rules; `None`: none."""
    from agentkit.providers.anthropic import thinking_budget

    budget = thinking_budget(request.reasoning)
    if budget is None:
        return None
    if request.max_tokens is None or budget >= request.max_tokens:
        raise UsageError(
            f"the thinking budget ({budget} tokens) must be below RoleSpec.max_tokens ({request.max_tokens}), which "
            "it is part of; set RoleSpec.max_tokens above it, or lower the budget"
        )
    return budget


def _usage(raw: Any, model: str) -> Usage:
    """The reply's usage, checked as agentkit's own callers check it (`token_count`): a broken count is a
    `ProviderError`, never summed."""
    usage = getattr(raw, "usage", None)
    if usage is None:
        return Usage(requests=1)
    if getattr(usage, "prompt_tokens", None) is not None:  # chat completions
        given = token_count(usage.prompt_tokens, "prompt_tokens", model)
        taken = token_count(getattr(usage, "completion_tokens", None), "completion_tokens", model)
        cached = detail_count(
            _counts(getattr(usage, "prompt_tokens_details", None)),
            "cached_tokens",
            "prompt_tokens_details",
            model,
            given,
        )
        reasoning = detail_count(
            _counts(getattr(usage, "completion_tokens_details", None)),
            "reasoning_tokens",
            "completion_tokens_details",
            model,
            taken,
        )
        return Usage(
            requests=1, input_tokens=given, output_tokens=taken, cached_input_tokens=cached, reasoning_tokens=reasoning
        )
    if hasattr(usage, "cache_read_input_tokens") and hasattr(usage, "cache_creation_input_tokens"):
        # the Messages API's: the cache's reads and writes are input tokens too; counted as AnthropicCaller does
        from agentkit.providers.anthropic import _Tally

        tally = _Tally()
        tally.requests = 1
        tally.add(raw, model)
        return tally.usage
    given = token_count(getattr(usage, "input_tokens", None), "input_tokens", model)
    taken = token_count(getattr(usage, "output_tokens", None), "output_tokens", model)
    return Usage(requests=1, input_tokens=given, output_tokens=taken)


def _counts(details: object) -> object:
    """A usage details block as the mapping `detail_count` reads: the `openai` client's is a model (or, from
    a double, any object with attributes); anything else is left for `detail_count` to refuse."""
    if isinstance(details, BaseModel):
        return details.model_dump()
    if details is None or isinstance(details, dict) or not hasattr(details, "__dict__"):
        return details
    return dict(vars(details))


def _finish_reasons(raw: Any) -> Iterator[str]:
    for choice in getattr(raw, "choices", None) or ():
        reason = getattr(choice, "finish_reason", None)
        if reason:
            yield str(reason)
    stop = getattr(raw, "stop_reason", None)
    if stop:
        yield str(stop)
