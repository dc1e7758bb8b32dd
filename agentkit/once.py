"""Single-shot runs: ``run_once`` (one typed verdict) and ``run_once_text`` (one prose reply).

The atom every composition is built from: an ``OnceAgent`` renders one prompt, one call goes
through ``generate_structured`` (so retry, fallback and the throttle contract are exactly the
tool loop's), and the ending comes back as a result, never as an exception.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from agentkit.agent import Prompt, RoleSpec, ToolRoundInfo
from agentkit.errors import AgentkitError, Throttled, UsageError
from agentkit.events import Event, LLMCallFinished, RoundStarted, RunAborted, RunFinished, RunStarted
from agentkit.observe import Observer, ObserverArg, dispatch, observers_of, settle
from agentkit.outcome import Outcome, StopReason
from agentkit.results import RunEnding, ToolLoopResult, Usage
from agentkit.structured import (
    Attempt,
    Completion,
    RetryPolicy,
    StructuredCaller,
    StructuredRequest,
    generate_structured,
)
from agentkit.text import TextCaller

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = [
    "Material",
    "OnceAgent",
    "OnceResult",
    "RoundInfo",
    "TextResult",
    "is_material",
    "run_once",
    "run_once_text",
]

Ctx = TypeVar("Ctx")
Ctx_contra = TypeVar("Ctx_contra", contravariant=True)
V = TypeVar("V", bound=BaseModel)
V_co = TypeVar("V_co", bound=BaseModel, covariant=True)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundInfo:
    """What a single-shot or pair executor sees when it renders its prompt."""

    round: int
    """This round, from 1 (a single shot is round 1 of 1)."""
    max_rounds: int
    """The ceiling: 1 for ``run_once``, ``PairConfig.max_rounds`` for ``pair``."""
    is_final_round: bool
    """No review follows this round's draft: commit to your best answer."""
    feedback: str | None = None
    """The verifier's objection to the previous draft (``pair`` revisions only)."""
    previous: BaseModel | None = None
    """The previous draft the feedback is about (``pair`` revisions only)."""


class OnceAgent(Protocol[Ctx_contra]):
    """An executor for one call: names its model and renders the prompt. It does no I/O."""

    def role(self) -> RoleSpec:
        """The model and settings for the call."""
        ...

    def render(self, ctx: Ctx_contra, info: RoundInfo) -> Prompt:
        """Build the prompt from the caller's context and the round."""
        ...


@runtime_checkable
class Material(Protocol):
    """A verdict that can say it changes nothing; such a verdict ends a run SILENT, not APPLIED.

    A verdict may instead carry a ``bool`` field named ``is_material``; ``is_material()`` (the
    function) reads either. A verdict with neither is always material.
    """

    def is_material(self) -> bool:
        """Whether acting on this verdict would change anything."""
        ...


def is_material(value: object) -> bool:
    """Whether ``value`` is material: its ``is_material()`` method or field, else ``True``."""
    marker = getattr(value, "is_material", None)
    if callable(marker):
        return bool(marker())
    if isinstance(marker, bool):
        return marker
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class OnceResult(RunEnding, Generic[V_co]):
    """The ending of ``run_once``: always returned, never raised."""

    value: V_co | None
    """The validated verdict; ``None`` exactly when ``outcome`` is ``Outcome.ERROR``."""
    outcome: Outcome
    """APPLIED for a material verdict, SILENT for a non-material one, ERROR on failure."""
    stop_reason: StopReason
    """``EXECUTOR_DONE`` on success; ``LLM_ERROR`` or ``THROTTLED`` on failure."""
    error: AgentkitError | None = None
    """Set exactly when ``outcome`` is ``Outcome.ERROR``; a ``Throttled`` when throttled."""
    usage: Usage = field(default_factory=Usage)
    """Model usage, every attempt (retries and fallback) included."""
    model: str = ""
    """The model that answered (the fallback's name when the fallback did); empty on error."""
    run_id: str = ""
    """A unique id for the run, as carried by its observer events."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextResult(RunEnding):
    """The ending of ``run_once_text``: always returned, never raised."""

    text: str | None
    """The reply exactly as the model wrote it (an empty reply stays ``""``); ``None`` on error."""
    outcome: Outcome
    """APPLIED for a reply with text, SILENT for an empty (or blank) reply, ERROR on failure."""
    stop_reason: StopReason
    """``EXECUTOR_DONE`` on success; ``LLM_ERROR`` or ``THROTTLED`` on failure."""
    error: AgentkitError | None = None
    """Set exactly when ``outcome`` is ``Outcome.ERROR``; a ``Throttled`` when throttled."""
    usage: Usage = field(default_factory=Usage)
    """Model usage, every attempt included."""
    model: str = ""
    """The model that answered; empty on error."""
    run_id: str = ""
    """A unique id for the run, as carried by its observer events."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply(Generic[M]):
    """One executor call's ending, shared by ``run_once`` and ``pair``."""

    value: M | None
    usage: Usage
    model: str = ""
    error: AgentkitError | None = None

    @property
    def failure_reason(self) -> StopReason:
        return StopReason.THROTTLED if isinstance(self.error, Throttled) else StopReason.LLM_ERROR


class Session:
    """The observer side of one run: its id and event delivery (a no-op without observers).

    Used as a context manager: entering reports the start, and a run left by an exception
    (cancellation, a ``UsageError``) is reported aborted, so observers can close what they opened.
    """

    def __init__(
        self,
        observers: tuple[Observer, ...],
        *,
        agent: object,
        role: RoleSpec,
        max_rounds: int,
        label: str = "executor",
    ) -> None:
        self.observers = observers
        self.run_id = uuid.uuid4().hex
        self.label = role.prompt_type or label
        self.start = RunStarted(
            run_id=self.run_id, agent=type(agent).__name__, model=role.model, tools=(), max_rounds=max_rounds
        )

    def __enter__(self) -> Self:
        self.emit(self.start)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if error is not None:
            self.emit(RunAborted(run_id=self.run_id, error=error))

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Leaving it awaits the observers' settle, so their record of the run is complete when it returns.
        self.__exit__(kind, error, tb)
        if self.observers:
            await settle(self.observers, self.run_id)

    def emit(self, event: Event) -> None:
        if self.observers:
            dispatch(self.observers, event)

    def round_started(self, info: RoundInfo) -> None:
        if self.observers:
            tool_info: ToolRoundInfo[Any] = ToolRoundInfo(
                round=info.round, max_rounds=info.max_rounds, is_final_round=info.is_final_round
            )
            self.emit(RoundStarted(run_id=self.run_id, info=tool_info))

    def attempt_hook(self, round: int) -> Callable[[Attempt], None] | None:
        if not self.observers:
            return None

        def hook(attempt: Attempt) -> None:
            self.emit(LLMCallFinished.of(attempt, run_id=self.run_id, role=self.label, round=round))

        return hook

    def finished(
        self,
        *,
        value: object,
        rounds: int,
        outcome: Outcome,
        stop_reason: StopReason,
        error: AgentkitError | None,
        usage: Usage,
    ) -> None:
        # RunFinished carries a tool-loop result; a single shot projects onto it (the verdict as
        # the one item) so observers that pair run start and end (spans, logs) stay balanced.
        if self.observers:
            projected: ToolLoopResult[Any] = ToolLoopResult(
                items=[] if value is None else [value],
                rounds=rounds,
                outcome=outcome,
                stop_reason=stop_reason,
                error=error,
                usage=usage,
                run_id=self.run_id,
            )
            self.emit(RunFinished(run_id=self.run_id, result=projected))


def request_for(prompt: Prompt, role: RoleSpec) -> StructuredRequest:
    """The request for one rendered prompt under a role."""
    return StructuredRequest(
        system=prompt.system,
        dynamic=prompt.dynamic,
        model=role.model,
        fallback_model=role.fallback_model,
        temperature=role.temperature,
        max_tokens=role.max_tokens,
        prompt_type=role.prompt_type,
        seed=role.seed,
    )


async def ask(
    caller: StructuredCaller,
    request: StructuredRequest,
    schema: type[M],
    policy: RetryPolicy | None,
    on_attempt: Callable[[Attempt], None] | None,
) -> Reply[M]:
    """One call through ``generate_structured``; model failures become a ``Reply`` with ``error``.

    Raises:
        UsageError: a wiring mistake (a script run dry, a bad schema) is never a model failure.
    """
    try:
        completion = await generate_structured(caller, request, schema, policy, on_attempt=on_attempt)
    except UsageError:
        raise
    except AgentkitError as error:
        return Reply(value=None, usage=error.usage or Usage(), error=error)
    return Reply(value=completion.value, usage=completion.usage, model=completion.model)


def check_schema(schema: object, entry_point: str) -> None:
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise UsageError(f"{entry_point} needs schema= a pydantic model class; got {schema!r}")


async def run_once(
    caller: StructuredCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    *,
    schema: type[V],
    observer: ObserverArg = None,
    retry: RetryPolicy | None = None,
) -> OnceResult[V]:
    """Ask for one typed verdict: one rendered prompt, one structured call.

    The agent renders round 1 of 1. A verdict whose ``is_material()`` says ``False`` ends the
    run SILENT, any other APPLIED (reason ``EXECUTOR_DONE``). A failed call ends it ERROR with
    the error attached: ``THROTTLED`` for HTTP 429 (never retried), ``LLM_ERROR`` otherwise.

    Args:
        caller: The structured-call seam.
        agent: Renders the prompt and names the model.
        ctx: The caller's data for ``agent.render``.
        schema: The pydantic model of the verdict; the result's ``value`` is one.
        observer: One observer, several, or none.
        retry: Retry and fallback of the call; ``RetryPolicy()`` when omitted.

    Raises:
        UsageError: ``schema`` is not a pydantic model, or another wiring mistake.
    """
    return await once_as("executor", caller, agent, ctx, schema=schema, observer=observer, retry=retry)


async def once_as(
    label: str,
    caller: StructuredCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    *,
    schema: type[V],
    observer: ObserverArg,
    retry: RetryPolicy | None,
) -> OnceResult[V]:
    """``run_once`` whose model calls are reported under ``label`` when the role names no ``prompt_type``."""
    check_schema(schema, "run_once")
    role = agent.role()
    async with Session(observers_of(observer), agent=agent, role=role, max_rounds=1, label=label) as session:
        reply = await _single_shot(caller, agent, ctx, role, schema, retry, session)
        result: OnceResult[V]
        if reply.value is None:
            result = OnceResult(
                value=None,
                outcome=Outcome.ERROR,
                stop_reason=reply.failure_reason,
                error=reply.error,
                usage=reply.usage,
                run_id=session.run_id,
            )
        else:
            result = OnceResult(
                value=reply.value,
                outcome=Outcome.APPLIED if is_material(reply.value) else Outcome.SILENT,
                stop_reason=StopReason.EXECUTOR_DONE,
                usage=reply.usage,
                model=reply.model,
                run_id=session.run_id,
            )
        session.finished(
            value=result.value,
            rounds=1,
            outcome=result.outcome,
            stop_reason=result.stop_reason,
            error=result.error,
            usage=result.usage,
        )
        return result


async def _single_shot(
    caller: StructuredCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    role: RoleSpec,
    schema: type[M],
    retry: RetryPolicy | None,
    session: Session,
) -> Reply[M]:
    info = RoundInfo(round=1, max_rounds=1, is_final_round=True)
    session.round_started(info)
    request = request_for(agent.render(ctx, info), role)
    return await ask(caller, request, schema, retry, session.attempt_hook(1))


class _Text(BaseModel):
    text: str


@dataclass(frozen=True, slots=True)
class _TextAsStructured:
    """Presents a ``TextCaller`` as a ``StructuredCaller`` so prose gets the same retry contract.

    The reply is wrapped after the call, never sent through JSON mode: the model writes prose.
    """

    caller: TextCaller

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        reply = await self.caller.complete_text(request)
        return Completion(value=schema.model_validate({"text": reply.text}), usage=reply.usage, model=reply.model)


async def run_once_text(
    caller: TextCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    *,
    observer: ObserverArg = None,
    retry: RetryPolicy | None = None,
) -> TextResult:
    """Ask for one prose reply over the ``TextCaller`` seam (no JSON mode, no envelope).

    Retry, fallback and the throttle contract are those of ``generate_structured``. An empty
    reply is returned as it came (``text == ""``, outcome SILENT), not as an error.

    Args:
        caller: The plain-text seam.
        agent: Renders the prompt and names the model.
        ctx: The caller's data for ``agent.render``.
        observer: One observer, several, or none.
        retry: Retry and fallback of the call; ``RetryPolicy()`` when omitted.
    """
    role = agent.role()
    async with Session(observers_of(observer), agent=agent, role=role, max_rounds=1) as session:
        reply = await _single_shot(_TextAsStructured(caller), agent, ctx, role, _Text, retry, session)
        result: TextResult
        if reply.value is None:
            result = TextResult(
                text=None,
                outcome=Outcome.ERROR,
                stop_reason=reply.failure_reason,
                error=reply.error,
                usage=reply.usage,
                run_id=session.run_id,
            )
        else:
            text = reply.value.text
            result = TextResult(
                text=text,
                outcome=Outcome.APPLIED if text.strip() else Outcome.SILENT,
                stop_reason=StopReason.EXECUTOR_DONE,
                usage=reply.usage,
                model=reply.model,
                run_id=session.run_id,
            )
        session.finished(
            value=result.text,
            rounds=1,
            outcome=result.outcome,
            stop_reason=result.stop_reason,
            error=result.error,
            usage=result.usage,
        )
        return result
