"""One run session, shared by the tool loop, single shots and the pair.

A session owns what every run shape has in common: the run id, the request built from the role,
the model call (`generate_structured` with the attempt hook and an optional deadline), the
mapping of a failed call to its stop reason, and the start, finish and abort events. The run
shapes keep only what is theirs: rounds of tools, one verdict, drafts and reviews.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json.encoder
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from agentkit._agent import Prompt, RoleSpec
from agentkit._config import LoopConfig
from agentkit._deltas import Deltas, listening
from agentkit._events import Continued, Event, LLMCallFinished, RoundStarted, RunAborted, RunFinished, RunStarted
from agentkit._invoke import describe
from agentkit._media import media_digests, part_digest
from agentkit._observe import ModelCall, Observer, dispatch, logger, observed, settle, traces, wraps
from agentkit._outcome import StopReason
from agentkit._results import RunEnding
from agentkit._state import json_text
from agentkit._structured import (
    Attempt,
    Completion,
    RetryPolicy,
    StructuredCaller,
    StructuredRequest,
    generate_structured,
    usage_of,
)
from agentkit._timing import timeout_scope
from agentkit._usage import ByModel, Usage, check_counts, merged_by_model, run_spent
from agentkit.errors import AgentkitError, ExecutorError, Throttled, Truncated, UsageError

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

M = TypeVar("M", bound=BaseModel)
M_co = TypeVar("M_co", bound=BaseModel, covariant=True)
E = TypeVar("E", bound=RunEnding)

_ROLE_FIELDS = tuple(field.name for field in dataclasses.fields(RoleSpec))
_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()


def prompt_digest(prompt: Prompt) -> str:
    """SHA-256 of a rendered prompt's two parts (what a replay compares a request by): `json_text` of the
    pair, which for two strings is each one's ASCII JSON in brackets. An image or document counts by its
    own digest (`part_digest`: kind, media type, SHA-256), never by its bytes, so the same image gives the
    same digest and a changed one another; a prompt of text only digests as it always did."""
    system, dynamic = prompt.system, prompt.dynamic
    if prompt.parts:
        shown = [part if isinstance(part, str) else part_digest(part) for part in prompt.parts]
        text = json_text([system, shown])
    elif type(system) is str and type(dynamic) is str:
        text = f"[{_ascii(system)},{_ascii(dynamic)}]"
    else:
        text = json_text([system, dynamic])
    return hashlib.sha256(text.encode()).hexdigest()


_ascii = json.encoder.encode_basestring_ascii


def executor_failed(what: str, raised: BaseException) -> ExecutorError:
    """The error of a run whose executor code (`render`, the `same=` comparator) raised."""
    error = ExecutorError(f"the executor's {what} raised {describe(raised)}")
    error.__cause__ = raised
    return error


def failure_reason(error: AgentkitError) -> StopReason:
    """The stop reason of a run whose model call failed with `error`."""
    if isinstance(error, Throttled):
        return StopReason.THROTTLED
    return StopReason.MAX_TOKENS if isinstance(error, Truncated) else StopReason.LLM_ERROR


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply(Generic[M_co]):
    """One model call's ending: a value, or why there is none."""

    value: M_co | None
    usage: Usage
    seconds: float = 0.0
    model: str = ""
    error: AgentkitError | None = None
    stop_reason: StopReason | None = None
    """Why there is no value: `LLM_ERROR`, `THROTTLED`, `MAX_TOKENS`, `DEADLINE` or `EXECUTOR_ERROR`."""
    prompt: str | None = None
    """SHA-256 of the rendered prompt (`prompt_digest`); `None` when `render` raised."""
    media: tuple[str, ...] = ()
    """The prompt's images and documents by digest (`media_digests`)."""
    reasoning: str | None = None
    """The reasoning the model wrote before its reply, when the server returned it."""
    others: ByModel | None = None
    """Of `usage`, what the attempts on models other than the role's spent, by model (the fallback's); `None`:
    every attempt asked the role's model."""


class _Counted:
    """Counts the requests that started, so that one cut off by a deadline is still counted, and what the
    attempts on a model other than the role's (`model`) spent, so that each model's share is priced at its own."""

    __slots__ = ("caller", "model", "others", "started")

    def __init__(self, caller: StructuredCaller, model: str) -> None:
        self.caller = caller
        self.model = model
        self.started = 0
        self.others: ByModel | None = None

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        self.started += 1
        model = request.model
        try:
            completion = await self.caller.complete(request, schema)
        except Exception as raised:
            used = usage_of(raised)
            check_counts(used, self.caller)
            if model != self.model:
                self.others = merged_by_model(self.others, {model: used})
            raise
        check_counts(completion.usage, self.caller)  # every attempt of any caller enters the run here
        if model != self.model:
            self.others = merged_by_model(self.others, {model: completion.usage})
        return completion


class RunSession:
    """The parts every run shares. As an async context manager it reports the start, an abort
    when the run is left by an exception (cancellation, a `UsageError`) so observers can close
    what they opened, and awaits every observer's `settle` on the way out; `finish` reports
    the result."""

    def __init__(
        self,
        observers: tuple[Observer, ...],
        *,
        agent: object,
        role: RoleSpec,
        max_rounds: int | None,
        label: str = "executor",
        tools: Sequence[str] = (),
        config: LoopConfig | None = None,
        run_id: str | None = None,
        usage: Usage | None = None,
        caller: object = None,
        continues: Continued | None = None,
    ) -> None:
        self.observers = observers
        self.tracers = tuple(observer for observer in observers if traces(observer))
        """The observers that give each round's `traceparent` (`Observer.traceparent`)."""
        self.wrappers = tuple(observer for observer in observers if wraps(observer))
        """The observers that wrap a model call or a tool's work in a context of theirs (`Observer.around`);
        without any, a call is not described to them at all."""
        self.role = role
        self.label = role.prompt_type or label
        self.run_id = run_id or uuid.uuid4().hex
        """A resumed run keeps its run id and the usage it had spent (`usage`)."""
        self.usage = usage or Usage()
        self.others: ByModel | None = None
        """Of this leg's usage, what went to models other than the role's, by model (`Reply.others`)."""
        self._settings: dict[str, Any] = {name: getattr(role, name) for name in _ROLE_FIELDS}
        """The role's part of every request (a request is the role plus the prompt)."""
        self._start: RunStarted | None = None
        self._seq = 0
        """The number the next event gets (`EventBase.seq`)."""
        self._round = 0
        """The last round an event of the run started (a `RunAborted` says it)."""
        if observers:
            self._start = RunStarted(
                run_id=self.run_id,
                agent=type(agent).__name__,
                model=role.model,
                tools=tuple(tools),
                max_rounds=max_rounds,
                config=config,
                caller=caller,
                continues=continues,
            )

    async def __aenter__(self) -> Self:
        if self._start is not None:
            self.emit(self._start)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is not None and self.observers:
            self.emit(RunAborted(run_id=self.run_id, error=error, round=self._round))
        if self.observers:
            # Awaited after the end (or abort) was delivered, so an observer's record of the run (a
            # journal write) is complete when the run returns, without blocking the event loop.
            await settle(self.observers, self.run_id)

    def emit(self, event: Event) -> None:
        """Deliver `event` to the observers, numbered (`seq`) in the order they get it; a no-op without them."""
        if self.observers:
            if self._seq:
                event = dataclasses.replace(event, seq=self._seq)
            self._seq += 1
            if isinstance(event, RoundStarted):
                self._round = event.info.round
            dispatch(self.observers, event)

    def traceparent(self) -> str | None:
        """The current round's `traceparent`, from the first tracing observer that gives one."""
        for observer in self.tracers:
            try:
                parent = observer.traceparent(self.run_id)
            except Exception:
                logger.exception(
                    "observer %s failed to give a traceparent (run %s)", type(observer).__name__, self.run_id
                )
                continue
            if parent:
                return parent
        return None

    def finish(self, result: E, *, seen: RunEnding | None = None) -> E:
        """Report the run's result (observers get `seen`, a copy, where the result holds mutable parts)."""
        if self.observers:
            self.emit(RunFinished(run_id=self.run_id, result=seen if seen is not None else result))
        run_spent(result.usage, self.role.model, self.others)
        return result

    async def ask(
        self,
        caller: StructuredCaller,
        render: Callable[[], Prompt],
        schema: type[M],
        policy: RetryPolicy | None,
        *,
        round: int,
        deadline: float | None = None,
        stream: bool = False,
        deltas: Callable[[Callable[[Event], None], str, int, bool], Deltas] | None = None,
    ) -> Reply[M]:
        """Render the prompt, then make one model call through `generate_structured`, within
        `deadline` seconds when given.

        With observers, a caller that streams reports the reply as it grows to `deltas` (made for this
        call: the emitter, run id, round and `stream`), which emits the delta events; `stream` asks a
        caller not set to stream to stream this call (`agentkit._deltas`).

        Failures become a `Reply` without a value: a `render` that raises is an
        `EXECUTOR_ERROR`; a failed call's usage counts every request sent, one cut off by the
        deadline included.

        Raises:
            UsageError: a wiring mistake (a script run dry, a bad schema) is never a model failure.
        """
        try:
            prompt = render()
        except Exception as raised:
            error = executor_failed("render", raised)
            return Reply(value=None, usage=Usage(), error=error, stop_reason=StopReason.EXECUTOR_ERROR)
        request = StructuredRequest(system=prompt.system, dynamic=prompt.dynamic, parts=prompt.parts, **self._settings)
        digest = prompt_digest(prompt)
        media = media_digests(prompt.parts)
        counted = _Counted(caller, request.model)
        finished: list[Usage] = []
        # Attempts are reported to the observers, and counted for a call the deadline may cut short.
        streamed = None if deltas is None or not self.observers else deltas(self.emit, self.run_id, round, stream)
        hook = self._attempt_hook(round, finished, streamed) if self.observers or deadline is not None else None
        started = time.perf_counter()
        try:
            with listening(streamed) if streamed is not None else _NOTHING:
                async with timeout_scope(deadline):
                    work = generate_structured(counted, request, schema, policy, on_attempt=hook)
                    if self.wrappers:
                        # Observers see the call while it runs (an OpenTelemetry span made current, say).
                        call = ModelCall(
                            run_id=self.run_id, round=round, role=self.label, request=request, caller=caller
                        )
                        work = observed(self.wrappers, call, work)
                    completion = await work
        except UsageError:
            raise
        except TimeoutError:
            # The deadline cut the call short: keep what the attempts spent, the one in flight included.
            if streamed is not None and streamed.pending:
                streamed.discard("the run's deadline cut the reply short")
            cut = Usage(requests=counted.started - len(finished))
            seconds = time.perf_counter() - started
            reply: Reply[M] = Reply(
                value=None,
                usage=sum(finished, cut),
                stop_reason=StopReason.DEADLINE,
                seconds=seconds,
                prompt=digest,
                media=media,
            )
        except AgentkitError as error:
            seconds = time.perf_counter() - started
            reply = Reply(
                value=None,
                usage=error.usage or Usage(),
                error=error,
                stop_reason=failure_reason(error),
                seconds=seconds,
                prompt=digest,
                media=media,
            )
        else:
            seconds = time.perf_counter() - started
            reply = Reply(
                value=completion.value,
                usage=completion.usage,
                model=completion.model,
                seconds=seconds,
                prompt=digest,
                media=media,
                reasoning=completion.reasoning,
            )
        if counted.others is not None:
            reply = dataclasses.replace(reply, others=counted.others)
            self.others = merged_by_model(self.others, counted.others)
        self.usage += reply.usage
        return reply

    def _attempt_hook(self, round: int, finished: list[Usage], streamed: Deltas | None) -> Callable[[Attempt], None]:
        def hook(attempt: Attempt) -> None:
            finished.append(attempt.usage)
            if streamed is not None:
                streamed.finished(attempt.attempt, attempt.error)
            if self.observers:
                self.emit(LLMCallFinished.of(attempt, run_id=self.run_id, role=self.label, round=round))

        return hook
