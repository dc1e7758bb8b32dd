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

import importlib
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from agentkit._structured import Completion, StructuredRequest
from agentkit._usage import Usage
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, UsageError
from agentkit.providers._wire import transient_status

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

    Usage: the tokens are instructor's total over the request and its re-asks; `requests` counts 1 per call,
    since instructor does not report how many re-asks it made.

    Errors: an HTTP 429 anywhere in the failure's causes -> `Throttled`; another status -> `ProviderError`
    (`transient` for 5xx, 408, 409); a timeout or a lost connection -> transient `ProviderError`; a reply
    still invalid after the re-asks -> `StructuredOutputError`.

    Args:
        client: An async instructor client, e.g. `instructor.from_openai(openai.AsyncOpenAI(...))`.
        max_reasks: Schema-invalid replies re-asked within one attempt.
        max_tokens_field: The request field that carries `StructuredRequest.max_tokens`.
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
        options: dict[str, Any] = {"model": request.model}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.max_tokens is not None:
            options[self._max_tokens_field] = request.max_tokens
        if request.seed is not None:
            options["seed"] = request.seed
        try:
            value, raw = await self._client.create_with_completion(
                messages=messages, response_model=schema, max_retries=self.max_reasks, **options
            )
        except Exception as error:
            raise self._failure(request.model, schema, error) from error
        return Completion(
            value=value,
            usage=_usage(raw),
            model=str(getattr(raw, "model", None) or request.model),
            response_id=getattr(raw, "id", None),
            finish_reasons=tuple(_finish_reasons(raw)),
        )

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


def _usage(raw: Any) -> Usage:
    usage = getattr(raw, "usage", None)
    given = getattr(usage, "prompt_tokens", None)
    taken = getattr(usage, "completion_tokens", None)
    if given is None:  # Anthropic-shaped usage
        given, taken = getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None)
    return Usage(requests=1, input_tokens=int(given or 0), output_tokens=int(taken or 0))


def _finish_reasons(raw: Any) -> Iterator[str]:
    for choice in getattr(raw, "choices", None) or ():
        reason = getattr(choice, "finish_reason", None)
        if reason:
            yield str(reason)
    stop = getattr(raw, "stop_reason", None)
    if stop:
        yield str(stop)
