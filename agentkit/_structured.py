"""The structured-call seam and `generate_structured`, the atom every loop is built from.

`generate_structured` owns retry, fallback and the throttle contract, so no loop does:

* the primary model is tried `RetryPolicy.primary_attempts` times (2), then the fallback
  model `RetryPolicy.fallback_attempts` times (1);
* only transient `ProviderError`s and `StructuredOutputError`s are retried; a schema failure
  is re-asked with the validation error text (`StructuredRequest.reask`);
* `Throttled` (HTTP 429) is never retried and never failed over: it propagates at once;
* `Truncated` (a reply cut off at `max_tokens`) is never retried on the same model, since the
  same request would be cut again: it fails over to the fallback model only when the fallback's
  limit (`RoleSpec.fallback_max_tokens`) differs, and propagates otherwise.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from agentkit._agent import RoleSpec
from agentkit._media import PromptPart, split_parts
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, ProviderError, StructuredOutputError, Throttled, Truncated, UsageError

__all__ = [
    "Attempt",
    "Completion",
    "RetryPolicy",
    "StructuredCaller",
    "StructuredRequest",
    "generate_structured",
    "usage_of",
]

M = TypeVar("M", bound=BaseModel)
M_co = TypeVar("M_co", bound=BaseModel, covariant=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class StructuredRequest(RoleSpec):
    """One structured call: the prompt, and the model settings of the role asking (every `RoleSpec`
    field: `model`, `fallback_model`, `temperature`, `max_tokens` (a reply cut off by it is
    an error, never parsed), `prompt_type`, `seed`, `reasoning`, `extra_body`)."""

    system: str
    """Stable instructions (kept byte-identical across rounds so provider prompt caching works)."""
    dynamic: str = ""
    """This run's data: the request, prior results, the round's position in the budget. When the prompt holds
    images or documents, its text view: each shown as a bracketed placeholder with its digest (filled in from
    `parts` when left empty), for callers that send text only."""
    parts: tuple[PromptPart, ...] = ()
    """The dynamic part in full, in reading order, when it holds images or documents (`ImagePart`,
    `DocumentPart`): what a caller that sends them sends in place of `dynamic`. Empty for a prompt of text
    only (parts of text only are joined into `dynamic`)."""
    reask: str | None = None
    """The validation error of the previous attempt, to be shown to the model."""

    def __post_init__(self) -> None:
        RoleSpec.__post_init__(self)  # a request built directly is checked as its role would be
        if self.parts:
            dynamic, parts = split_parts(self.dynamic, self.parts)
            object.__setattr__(self, "dynamic", dynamic)
            object.__setattr__(self, "parts", parts)


# The field's type as the object it is: the class reports `agentkit` as its module, where pydantic (a Temporal
# payload) would look the annotation's names up and not find them.
StructuredRequest.__dataclass_fields__["parts"].type = tuple[PromptPart, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion(Generic[M_co]):
    """A validated reply."""

    value: M_co
    """The reply, validated against the requested schema."""
    usage: Usage
    """Usage of this call (for `generate_structured`: of every attempt)."""
    model: str
    """The model that answered."""
    response_id: str | None = None
    """The server's id of the reply (`chatcmpl-...`), when it gives one."""
    finish_reasons: tuple[str, ...] = ()
    """Why the model stopped, per choice (`("stop",)`), when the server says."""
    reasoning: str | None = None
    """The reasoning the model wrote before its reply, when the server returns it (`reasoning_content`,
    `reasoning`, thinking blocks); kept on the round's record, never sent back to the model."""


class StructuredCaller(Protocol):
    """The one seam between agentkit and a model.

    Implementations make one call (their own re-asks on a schema failure are allowed) and either
    return a validated `Completion` or raise an `AgentkitError`: `Throttled` for HTTP 429,
    `ProviderError` (`transient` for 5xx, timeouts and lost connections) or
    `StructuredOutputError`. Usage of a failed call goes on the error's `usage` attribute.
    """

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Ask `request.model` for one reply that validates against `schema`."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How `generate_structured` retries and fails over."""

    primary_attempts: int = 2
    """Attempts on the primary model."""
    fallback_attempts: int = 1
    """Attempts on the fallback model, when the request names one."""
    wait_initial: float = 0.2
    """Seconds before the first retry; the wait doubles, with jitter, up to `wait_max`."""
    wait_max: float = 2.0
    """Longest wait between two attempts."""

    def __post_init__(self) -> None:
        for name, least in (("primary_attempts", 1), ("fallback_attempts", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UsageError(f"RetryPolicy.{name} must be a whole number >= {least}; got {value!r}")
        for name in ("wait_initial", "wait_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise UsageError(f"RetryPolicy.{name} must be a finite number of seconds >= 0; got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One attempt of `generate_structured`, reported to `on_attempt`."""

    model: str
    """The model asked."""
    attempt: int
    """1-based count over all attempts of this call, fallback included."""
    seconds: float
    """Latency of the attempt."""
    usage: Usage
    """Usage of the attempt."""
    error: AgentkitError | None
    """Why the attempt failed, if it did."""


def usage_of(error: BaseException) -> Usage:
    """The usage a failed call reported on its error (one request when it reported none)."""
    usage = error.usage if isinstance(error, AgentkitError) else None
    return usage if usage is not None else Usage(requests=1)


def _retryable(error: BaseException) -> bool:
    if isinstance(error, Throttled | Truncated):
        return False
    if isinstance(error, ProviderError):
        return error.transient
    return isinstance(error, StructuredOutputError)


def _as_agentkit_error(error: Exception) -> AgentkitError:
    if isinstance(error, AgentkitError):
        return error
    wrapped = ProviderError(f"model call failed: {type(error).__name__}: {error}")
    wrapped.__cause__ = error
    return wrapped


def fallback_limit(role: RoleSpec) -> int | None:
    """The token limit a request to the fallback model carries: `fallback_max_tokens`, else `max_tokens`."""
    return role.fallback_max_tokens if role.fallback_max_tokens is not None else role.max_tokens


class _Attempts(Generic[M]):
    """The attempts of one `generate_structured` call: the running usage, count and last error."""

    __slots__ = ("caller", "counter", "current", "last", "on_attempt", "schema", "total")

    def __init__(
        self,
        caller: StructuredCaller,
        request: StructuredRequest,
        schema: type[M],
        on_attempt: Callable[[Attempt], None] | None,
    ) -> None:
        self.caller = caller
        self.current = request
        self.schema = schema
        self.on_attempt = on_attempt
        self.total = Usage()
        self.counter = 0
        self.last: AgentkitError | None = None

    async def once(self, model: str, max_tokens: int | None) -> Completion[M]:
        """One attempt on `model` with `max_tokens`; a failure is raised as an `AgentkitError` and remembered."""
        self.counter += 1
        started = time.perf_counter()
        current = self.current
        same = current.model == model and current.max_tokens == max_tokens
        request = current if same else dataclasses.replace(current, model=model, max_tokens=max_tokens)
        try:
            completion = await self.caller.complete(request, self.schema)
        except Exception as raw:
            error = _as_agentkit_error(raw)
            used = usage_of(error)
            self.total += used
            self.last = error
            if isinstance(error, StructuredOutputError) and not isinstance(error, Truncated):
                # A cut-off reply is not re-asked: the same limit would cut it off again.
                self.current = dataclasses.replace(self.current, reask=str(error))
            self._report(model, started, used, error)
            if error is raw:
                raise
            raise error from raw
        self.total += completion.usage
        self._report(model, started, completion.usage, None)
        return completion

    def _report(self, model: str, started: float, usage: Usage, error: AgentkitError | None) -> None:
        if self.on_attempt is not None:
            seconds = time.perf_counter() - started
            self.on_attempt(Attempt(model=model, attempt=self.counter, seconds=seconds, usage=usage, error=error))


async def generate_structured(
    caller: StructuredCaller,
    request: StructuredRequest,
    schema: type[M],
    policy: RetryPolicy | None = None,
    *,
    on_attempt: Callable[[Attempt], None] | None = None,
) -> Completion[M]:
    """Ask for one validated reply, with retry, fallback and the throttle contract.

    Raises:
        Throttled: at the first HTTP 429, whatever attempt it came on.
        Truncated: a reply was cut off by the token limit and no fallback with another limit was left.
        AgentkitError: the last attempt's error once every attempt is spent; its `usage`
            attribute then holds the usage of all attempts.
    """
    policy = policy or RetryPolicy()
    attempts = _Attempts(caller, request, schema, on_attempt)
    # The first attempt is a plain call: a call that succeeds at once (nearly all of them) never
    # enters the retry machinery. Its failure is handed to tenacity as the primary's attempt 1.
    try:
        return await attempts.once(request.model, request.max_tokens)
    except AgentkitError as error:
        if not _retryable(error) and not _fails_over(error, request, policy):
            error.usage = attempts.total
            raise
        first_failure = error
    return await _retry(attempts, request, policy, first_failure)


def _fails_over(error: AgentkitError, request: StructuredRequest, policy: RetryPolicy) -> bool:
    """A cut-off reply goes on to the fallback model only when the fallback's token limit differs."""
    return (
        isinstance(error, Truncated)
        and bool(request.fallback_model)
        and policy.fallback_attempts > 0
        and fallback_limit(request) != request.max_tokens
    )


async def _retry(
    attempts: _Attempts[M], request: StructuredRequest, policy: RetryPolicy, first_failure: AgentkitError
) -> Completion[M]:
    """The attempts after a retryable first failure: the primary's rest, then the fallback's."""
    # tenacity (and the asyncio it loads) is imported on first use, keeping `import agentkit` light.
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

    plan = [(request.model, policy.primary_attempts, request.max_tokens)]
    if request.fallback_model and policy.fallback_attempts > 0:
        plan.append((request.fallback_model, policy.fallback_attempts, fallback_limit(request)))
    replay: list[AgentkitError] = [first_failure]

    async def attempt(model: str, max_tokens: int | None) -> Completion[M]:
        if replay:
            # tenacity sees the first attempt's failure as its own attempt 1, so its stop and wait
            # (the backoff before attempt 2 included) are exactly those of a call it made itself
            raise replay.pop()
        return await attempts.once(model, max_tokens)

    for stage, (model, count, max_tokens) in enumerate(plan):
        retrying = AsyncRetrying(
            stop=stop_after_attempt(count),
            retry=retry_if_exception(_retryable),
            wait=wait_exponential(multiplier=policy.wait_initial, max=policy.wait_max)
            + wait_random(0, policy.wait_initial),
            reraise=True,
        )
        try:
            completion: Completion[M] = await retrying(attempt, model, max_tokens)
        except AgentkitError as error:
            if isinstance(error, Truncated) and stage + 1 < len(plan) and plan[stage + 1][2] != max_tokens:
                continue  # the next model's limit differs, so its reply may fit
            if not _retryable(error):
                error.usage = attempts.total
                raise
            continue
        return dataclasses.replace(completion, usage=attempts.total)
    assert attempts.last is not None
    attempts.last.usage = attempts.total
    raise attempts.last
