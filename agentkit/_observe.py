"""Observers: hooks called as a run happens. An observer can never change a run's outcome.

`Observer` is the base class (a no-op hook per moment, plus `on_event` for every event);
`LoggingObserver` writes one structured log line per event; `dispatch` delivers an event to
a run's observers, isolating their failures. `observed` runs a model call or a tool invocation
inside each observer's `around` context, so that tracing observers can make their span current
for the work (and everything the work calls) while it runs. The OpenTelemetry observer lives in
`agentkit.otel` (an optional extra) and the event stream in `agentkit.events`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from agentkit._agent import ToolRoundInfo
from agentkit._events import (
    AnswerDelta,
    DegenerationDetected,
    Event,
    LLMCallFinished,
    PartialDiscarded,
    ProposalCaptured,
    RationaleDelta,
    RoundStarted,
    RunAborted,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallStarted,
    ToolResultReturned,
)
from agentkit._results import ToolLoopResult

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agentkit._state import RunCheckpoint
    from agentkit._structured import StructuredRequest
    from agentkit._tools import AnyTool

__all__ = [
    "ApprovedCall",
    "LoggingObserver",
    "ModelCall",
    "Observer",
    "ObserverArg",
    "ToolInvocation",
    "dispatch",
    "event_fields",
    "observed",
    "observers_of",
    "settle",
    "wrapping",
    "wraps",
]

logger = logging.getLogger("agentkit.observe")

T = TypeVar("T")


@dataclass(kw_only=True, slots=True, eq=False)
class ModelCall:
    """One logical model call of a run (its retries and fallback included), as `around` sees it.

    Treat it as read-only; `result` is filled in by `observed` when the call returns, before
    the observers' contexts exit.
    """

    run_id: str
    round: int
    role: str
    """The role's `prompt_type` (or `"executor"`, `"verifier"`)."""
    request: StructuredRequest
    """The request as first sent (re-asks and the fallback model derive from it)."""
    caller: object
    """The caller asked. It may describe itself with `provider_name`, `server_address`,
    `server_port` and `output_type` attributes (`OpenAICaller` does)."""
    result: object = None
    """The `Completion` the call returned; `None` while it runs and when it raised."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovedCall:
    """The approval an invocation runs under: a call a person approved, run by a resumed run,
    `execute_approved`, a journal (`execute`, a worker) or a Temporal activity."""

    approved_by: str
    digest: str
    """The proposal's digest: the exact call approved."""
    proposal_id: str | None = None
    """The journal's id of the proposal, when a journal holds it."""


@dataclass(kw_only=True, slots=True, eq=False)
class ToolInvocation:
    """One invocation of a tool, as `around` sees it (read-only): by a run, or an approved call run
    outside one (its `run_id` and `round` are then the proposal's)."""

    run_id: str
    round: int
    tool: AnyTool
    args: BaseModel
    """The arguments the tool is called with: the call's own, not a copy; never modify them."""
    result: object = None
    """What the tool returned; `None` while it runs and when it raised."""
    approval: ApprovedCall | None = None
    """The approval the call runs under; `None` for a call the loop ran live."""
    position: int | None = None
    """In a step of several calls (`LoopConfig.max_calls_per_step`): the call's place in the step, from 0."""

    @property
    def call_id(self) -> str:
        """The call's id within its run: the run id and the round (a live call, or the approved call of that
        round's proposal, which shares it), and in a step of several calls the call's place in it."""
        if self.run_id:
            place = "" if self.position is None else f":{self.position}"
            return f"{self.run_id}:{self.round}{place}"
        return self.approval.proposal_id or "" if self.approval is not None else ""


class Observer:
    """Base class with a no-op hook per moment of a run; override the ones you need.

    For each event, `on_event` is called first, then the hook named for the event. New hooks
    are added here with a no-op body, so a subclass never breaks when one is added.

    Hooks are synchronous, run on the loop's task and should be quick. An exception raised by a
    hook is logged once through `logging` (logger `agentkit.observe`, level ERROR, with the
    traceback) and swallowed: it never changes the run, its items or the other observers.

    `settle` is the one coroutine: the run awaits it after its end (or abort) was delivered and
    before it returns, so an observer that hands events to another thread can wait there for them
    to be done without blocking the event loop.
    """

    sees_calls: ClassVar[bool] = True
    """Whether this observer's `RoundStarted` events show the run's calls so far.

    A run gives its observers their own copy of every call (args and items), kept for
    `RoundStarted.info`'s `prior_calls`, `prior_results` and `proposals`. An observer that
    reads no more of a round than its number and ceiling (`JournalObserver`) sets this `False`;
    when every observer of a run does, the run keeps no such copies and their `RoundStarted`
    events show no calls (the round, its ceiling and `omitted` are as ever).
    """

    def on_event(self, event: Event) -> None:
        """Any event, before its own hook (for observers that treat every event alike)."""

    def on_run_start(self, event: RunStarted) -> None:
        """A run began."""

    def on_round_start(self, event: RoundStarted) -> None:
        """A round began."""

    def on_llm_call(self, event: LLMCallFinished) -> None:
        """One model attempt finished."""

    def on_tool_call(self, event: ToolCallStarted) -> None:
        """A tool is about to run."""

    def on_tool_result(self, event: ToolResultReturned) -> None:
        """A tool call finished."""

    def on_proposal(self, event: ProposalCaptured) -> None:
        """A call became a proposal."""

    def on_degeneration(self, event: DegenerationDetected) -> None:
        """The executor repeated itself."""

    def on_run_end(self, event: RunFinished) -> None:
        """A run ended with a result."""

    def on_run_abort(self, event: RunAborted) -> None:
        """A run was cancelled or raised; there is no result."""

    def on_delta(self, event: RationaleDelta | AnswerDelta | TextDelta | PartialDiscarded) -> None:
        """A streamed reply grew, or what it streamed was discarded (only in runs that stream)."""

    def around(self, call: ModelCall | ToolInvocation) -> contextlib.AbstractContextManager[object]:
        """A context the run enters around one model call or tool invocation, in the task that runs it.

        The work runs inside it, so a context variable set on entry (an OpenTelemetry span made
        current) is seen by everything the work does; an exception the work raises passes through
        its exit. The default does nothing. Failures on entry or exit are logged and isolated like
        a hook's, and an exit can never swallow the work's exception.
        """
        return contextlib.nullcontext()

    async def settle(self, run_id: str) -> None:
        """Awaited after the run's end (or abort) was delivered, before the run returns; returns at once here."""

    def traceparent(self, run_id: str) -> str | None:
        """The W3C `traceparent` of the run's current round, for its state to keep (`RoundEntry.trace`).

        A later leg of the run (`resume`), or a fork of it, is told it (`RunStarted.continues`), so a
        tracing observer can link the two. Only observers that override it are asked; `None` here.
        """
        return None

    def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        """A tiered run's state before its first round and at the end of each round that did not end it.

        Only observers that override this hook get it (the journal's stores it, for crash recovery):
        building a checkpoint copies the run's state, so a run whose observers do not want one never
        builds one. A run whose tools' items cannot round-trip through JSON makes none. The final
        state comes with the run's end, as `result.checkpoint`.
        """


def traces(observer: Observer) -> bool:
    """Whether `observer` overrides `traceparent` (so the run asks it for each round's)."""
    return type(observer).traceparent is not Observer.traceparent


def wraps(observer: Observer) -> bool:
    """Whether `observer` overrides `around` (so the run describes each model call and tool invocation to it)."""
    return type(observer).around is not Observer.around


def wants_checkpoints(observer: Observer) -> bool:
    """Whether `observer` overrides `on_checkpoint` (so the run builds a checkpoint per round for it)."""
    return type(observer).on_checkpoint is not Observer.on_checkpoint


def deliver_checkpoint(observers: tuple[Observer, ...], run_id: str, checkpoint: RunCheckpoint) -> None:
    """Hand `checkpoint` to each observer's `on_checkpoint`, isolating failures as `dispatch` does."""
    for observer in observers:
        try:
            observer.on_checkpoint(run_id, checkpoint)
        except Exception:
            logger.exception(
                "observer %s failed on a checkpoint (run %s); the run goes on", type(observer).__name__, run_id
            )


ObserverArg = Observer | Sequence[Observer] | None
"""What `observer=` takes: one observer, several, or none."""


def observers_of(observer: ObserverArg) -> tuple[Observer, ...]:
    """Normalise `observer=` to a tuple."""
    if observer is None:
        return ()
    if isinstance(observer, Observer):
        return (observer,)
    return tuple(observer)


def _on_event(observer: Observer, event: Event) -> None:
    observer.on_event(event)


def _on_hook(observer: Observer, event: Event) -> None:
    match event:
        case RunStarted():
            observer.on_run_start(event)
        case RoundStarted():
            observer.on_round_start(event)
        case LLMCallFinished():
            observer.on_llm_call(event)
        case ToolCallStarted():
            observer.on_tool_call(event)
        case ToolResultReturned():
            observer.on_tool_result(event)
        case ProposalCaptured():
            observer.on_proposal(event)
        case DegenerationDetected():
            observer.on_degeneration(event)
        case RunFinished():
            observer.on_run_end(event)
        case RunAborted():
            observer.on_run_abort(event)
        case RationaleDelta() | AnswerDelta() | TextDelta() | PartialDiscarded():
            observer.on_delta(event)


def dispatch(observers: tuple[Observer, ...], event: Event) -> None:
    """Deliver `event` to each observer (`on_event`, then its own hook), isolating failures.

    A hook that raises is logged once and skipped; the next hook and observer still run.
    """
    for observer in observers:
        for deliver in (_on_event, _on_hook):
            try:
                deliver(observer, event)
            except Exception:
                logger.exception(
                    "observer %s failed on the %s event (run %s); the run goes on",
                    type(observer).__name__,
                    event.kind,
                    event.run_id,
                )


class _Guarded:
    """An observer's `around` context whose failures are logged, never raised, never swallowing."""

    __slots__ = ("call", "context", "observer")

    def __init__(self, observer: Observer, call: ModelCall | ToolInvocation) -> None:
        self.observer, self.call = observer, call
        self.context: contextlib.AbstractContextManager[object] | None = None

    def __enter__(self) -> None:
        try:
            context = self.observer.around(self.call)
            context.__enter__()
        except Exception:
            self._log("entering")
        else:
            self.context = context

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.context is None:
            return
        try:
            self.context.__exit__(kind, error, tb)
        except Exception as raised:
            if raised is not error:
                self._log("leaving")

    def _log(self, moment: str) -> None:
        logger.exception(
            "observer %s failed %s the context of a %s (run %s); the run goes on",
            type(self.observer).__name__,
            moment,
            type(self.call).__name__,
            self.call.run_id,
        )


async def observed(observers: tuple[Observer, ...], call: ModelCall | ToolInvocation, work: Awaitable[T]) -> T:
    """Await `work` inside every observer's `around(call)` context; what it returns is returned.

    The one seam through which observers see a model call or tool invocation *while it runs*:
    each call site wraps its `await` in it. Without observers it is a plain `await`.
    """
    if not observers:
        return await work
    wrapping = [observer for observer in observers if wraps(observer)]
    if not wrapping:  # no observer wraps the work: the base class's context does nothing
        result = await work
        call.result = result
        return result
    with contextlib.ExitStack() as stack:
        for observer in wrapping:
            stack.enter_context(_Guarded(observer, call))
        result = await work
        call.result = result
        return result


def wrapping(
    observers: tuple[Observer, ...], call: ToolInvocation
) -> Callable[[Awaitable[Sequence[Any]]], Awaitable[Sequence[Any]]] | None:
    """`invoke`'s `around` for `call`: the tool's work inside the observers' contexts (`None`: no observers)."""
    if not observers:
        return None

    def around(work: Awaitable[Sequence[Any]]) -> Awaitable[Sequence[Any]]:
        return observed(observers, call, work)

    return around


async def settle(observers: tuple[Observer, ...], run_id: str) -> None:
    """Await each observer's `settle` once a run ended, isolating failures as `dispatch` does."""
    for observer in observers:
        try:
            await observer.settle(run_id)
        except Exception:
            logger.exception("observer %s failed to settle run %s; the run goes on", type(observer).__name__, run_id)


def event_fields(event: Event, *, include_args: bool = True) -> dict[str, object]:
    """The event's salient fields as flat, JSON-friendly values (for logs and exporters).

    Args:
        event: Any event.
        include_args: Include tool-call arguments (as compact JSON); turn off when they may hold
            data that must not reach logs.
    """
    fields: dict[str, object] = {"run_id": event.run_id}
    match event:
        case RunStarted():
            fields |= {"agent": event.agent, "model": event.model, "tools": ",".join(event.tools)}
            fields["max_rounds"] = event.max_rounds
        case RoundStarted():
            info = event.info
            fields |= {"round": info.round, "max_rounds": info.max_rounds, "final": info.is_final_round}
            fields["prior_calls"] = len(info.prior_calls) if isinstance(info, ToolRoundInfo) else 0
        case LLMCallFinished():
            fields |= {"role": event.role, "round": event.round, "model": event.model, "attempt": event.attempt}
            fields |= {"seconds": round(event.seconds, 4), "requests": event.usage.requests}
            fields |= {"input_tokens": event.usage.input_tokens, "output_tokens": event.usage.output_tokens}
            fields["error"] = _error_text(event.error)
        case ToolCallStarted():
            fields |= {"round": event.round, "tool": event.tool_name, "tier": event.tier.name}
            fields["args"] = event.args.model_dump_json() if include_args else None
        case ToolResultReturned():
            fields |= {"round": event.round, "tool": event.tool_name, "batch_size": event.batch_size}
            fields |= {"seconds": round(event.seconds, 4), "observation": event.observation}
            fields["error"] = _error_text(event.error)
        case ProposalCaptured():
            proposal = event.proposal
            fields |= {"round": proposal.round, "tool": proposal.tool_name, "tier": proposal.tier.name}
            fields["digest"] = proposal.digest
        case DegenerationDetected():
            fields |= {"round": event.round, "tool": event.tool_name}
            fields["args"] = event.args.model_dump_json() if include_args else None
        case RationaleDelta() | AnswerDelta() | TextDelta() | PartialDiscarded():
            fields |= _delta_fields(event)
        case RunFinished():
            result = event.result
            fields |= {"outcome": result.outcome.value, "stop_reason": result.stop_reason.value}
            items = len(result.items) if isinstance(result, ToolLoopResult) else None
            fields |= {"rounds": result.rounds, "items": items, "requests": result.usage.requests}
            fields |= {"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens}
            fields["error"] = _error_text(result.error)
        case RunAborted():
            fields["error"] = _error_text(event.error)
    return {key: value for key, value in fields.items() if value is not None or key not in _OPTIONAL}


_OPTIONAL = frozenset({"args", "error", "observation"})


def _error_text(error: BaseException | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {error}"


def _logfmt(value: object) -> str:
    text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    if not text or any(c in text for c in ' ="\n'):
        return json.dumps(text, ensure_ascii=False)
    return text


def _delta_fields(event: RationaleDelta | AnswerDelta | TextDelta | PartialDiscarded) -> dict[str, object]:
    fields: dict[str, object] = {"round": event.round, "attempt": event.attempt}
    if isinstance(event, RationaleDelta | TextDelta):
        fields["chars"] = len(event.text)
    elif isinstance(event, PartialDiscarded):
        fields["reason"] = event.reason
    return fields


def is_delta(event: Event) -> bool:
    """Whether `event` reports a streamed reply as it grows (or its discard): what no record of a run keeps."""
    return isinstance(event, RationaleDelta | AnswerDelta | TextDelta | PartialDiscarded)


def _is_failure(event: Event) -> bool:
    match event:
        case LLMCallFinished() | ToolResultReturned():
            return event.error is not None
        case RunFinished():
            return event.result.error is not None
        case RunAborted():
            return True
        case _:
            return False


class LoggingObserver(Observer):
    """Writes one concise, structured log line per event through stdlib `logging`.

    The message is `agentkit.<kind> key=value ...` (logfmt); the same fields travel on the
    record as `record.agentkit` (a dict with `event` and the fields) for structured handlers.
    Failures (a failed model attempt or tool call, an ERROR ending, an aborted run) are logged at
    `error_level`, everything else at `level`.

    Args:
        logger: Where to log; `logging.getLogger("agentkit.events")` by default.
        level: Level of ordinary events.
        error_level: Level of failures.
        include_args: Log tool-call arguments (turn off when they may hold sensitive data).
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        level: int = logging.INFO,
        error_level: int = logging.WARNING,
        include_args: bool = True,
    ) -> None:
        self.logger = logger or logging.getLogger("agentkit.events")
        self.level = level
        self.error_level = error_level
        self.include_args = include_args

    def on_event(self, event: Event) -> None:
        """Log `event` as one line (a streamed delta at `DEBUG`: a reply streams many)."""
        level = self.error_level if _is_failure(event) else logging.DEBUG if is_delta(event) else self.level
        if not self.logger.isEnabledFor(level):
            return
        fields = event_fields(event, include_args=self.include_args)
        line = " ".join(f"{key}={_logfmt(value)}" for key, value in fields.items())
        self.logger.log(level, "agentkit.%s %s", event.kind, line, extra={"agentkit": {"event": event.kind, **fields}})
