"""Single-shot runs: `run_once` (one typed verdict) and `run_once_text` (one prose reply).

The atom every composition is built from: an `OnceAgent` renders one prompt, one call goes
through `generate_structured` (so retry, fallback and the throttle contract are exactly the
tool loop's), and the ending comes back as a result, never as an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypedDict, TypeVar, runtime_checkable

from pydantic import BaseModel

from agentkit._agent import Prompt, RoleSpec, RoundInfo
from agentkit._deltas import TextDeltas
from agentkit._events import RoundStarted
from agentkit._observe import ObserverArg, observers_of
from agentkit._outcome import Outcome, StopReason
from agentkit._results import RunEnding
from agentkit._session import Reply, RunSession
from agentkit._structured import Completion, RetryPolicy, StructuredCaller, StructuredRequest
from agentkit._text import TextCaller
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, UsageError

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

    A verdict may instead carry a `bool` field named `is_material`; `is_material()` (the
    function) reads either. A verdict with neither is always material.
    """

    def is_material(self) -> bool:
        """Whether acting on this verdict would change anything."""
        ...


def is_material(value: object) -> bool:
    """Whether `value` is material: its `is_material()` method or field, else `True`."""
    marker = getattr(value, "is_material", None)
    if callable(marker):
        return bool(marker())
    if isinstance(marker, bool):
        return marker
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class OnceResult(RunEnding, Generic[V_co]):
    """The ending of `run_once`: always returned, never raised.

    `outcome` is APPLIED for a material verdict, SILENT for a non-material one, ERROR on
    failure; `stop_reason` is `EXECUTOR_DONE` on success, `LLM_ERROR`, `THROTTLED` or
    `MAX_TOKENS` on failure (the `error` is then set: a `Throttled` when throttled, a
    `Truncated` when the reply was cut off by the token limit).
    """

    value: V_co | None
    """The validated verdict; `None` exactly when `outcome` is `Outcome.ERROR`."""
    model: str = ""
    """The model that answered (the fallback's name when the fallback did); empty on error."""

    def unwrap(self) -> V_co:
        """The verdict, typed without `None`; raises `error` when the run ended in error."""
        if self.value is None:
            raise no_value(self)
        return self.value


@dataclass(frozen=True, kw_only=True, slots=True)
class TextResult(RunEnding):
    """The ending of `run_once_text`: always returned, never raised.

    `outcome` is APPLIED for a reply with text, SILENT for an empty (or blank) reply, ERROR on
    failure; `stop_reason` as for `OnceResult`.
    """

    text: str | None
    """The reply exactly as the model wrote it (an empty reply stays `""`); `None` on error."""
    model: str = ""
    """The model that answered; empty on error."""

    def unwrap(self) -> str:
        """The text, typed without `None`; raises `error` when the run ended in error."""
        if self.text is None:
            raise no_value(self)
        return self.text


def no_value(result: RunEnding) -> AgentkitError:
    """What `unwrap` raises for a result without a value: its error."""
    if result.error is not None:
        return result.error
    return AgentkitError(f"the run ended {result.outcome.name}, {result.stop_reason.name}, without a value")


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

    The agent renders round 1 of 1. A verdict whose `is_material()` says `False` ends the
    run SILENT, any other APPLIED (reason `EXECUTOR_DONE`). A failed call ends it ERROR with
    the error attached: `THROTTLED` for HTTP 429 (never retried), `MAX_TOKENS` for a reply cut
    off by the token limit (`Truncated`), `LLM_ERROR` otherwise.

    Args:
        caller: The structured-call seam.
        agent: Renders the prompt and names the model.
        ctx: The caller's data for `agent.render`.
        schema: The pydantic model of the verdict; the result's `value` is one.
        observer: One observer, several, or none.
        retry: Retry and fallback of the call; `RetryPolicy()` when omitted.

    Raises:
        UsageError: `schema` is not a pydantic model, or another wiring mistake.
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
    """`run_once` whose model calls are reported under `label` when the role names no `prompt_type`."""
    check_schema(schema, "run_once")
    role = agent.role()
    async with RunSession(
        observers_of(observer), agent=agent, role=role, max_rounds=1, label=label, caller=caller
    ) as session:
        reply = await _single_shot(caller, agent, ctx, schema, retry, session)
        if reply.value is None:
            return session.finish(OnceResult(value=None, **_failed(reply, session)))
        outcome = Outcome.APPLIED if is_material(reply.value) else Outcome.SILENT
        return session.finish(OnceResult(value=reply.value, model=reply.model, **_answered(outcome, reply, session)))


class _Common(TypedDict):
    """The `RunEnding` fields of a single shot's result."""

    outcome: Outcome
    stop_reason: StopReason
    error: AgentkitError | None
    usage: Usage
    rounds: int
    run_id: str


def _failed(reply: Reply[BaseModel], session: RunSession) -> _Common:
    assert reply.stop_reason is not None
    return _Common(
        outcome=Outcome.ERROR,
        stop_reason=reply.stop_reason,
        error=reply.error,
        usage=reply.usage,
        rounds=1,
        run_id=session.run_id,
    )


def _answered(outcome: Outcome, reply: Reply[BaseModel], session: RunSession) -> _Common:
    return _Common(
        outcome=outcome,
        stop_reason=StopReason.EXECUTOR_DONE,
        error=None,
        usage=reply.usage,
        rounds=1,
        run_id=session.run_id,
    )


async def _single_shot(
    caller: StructuredCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    schema: type[M],
    retry: RetryPolicy | None,
    session: RunSession,
    *,
    stream: bool = False,
) -> Reply[M]:
    info = RoundInfo(round=1, max_rounds=1, is_final_round=True)
    session.emit(RoundStarted(run_id=session.run_id, info=info))
    deltas = TextDeltas if schema is _Text else None
    return await session.ask(
        caller, lambda: agent.render(ctx, info), schema, retry, round=1, stream=stream, deltas=deltas
    )


class _Text(BaseModel):
    text: str


@dataclass(frozen=True, slots=True)
class _TextAsStructured:
    """Presents a `TextCaller` as a `StructuredCaller` so prose gets the same retry contract.

    The reply is wrapped after the call, never sent through JSON mode: the model writes prose.
    """

    caller: TextCaller
    output_type: ClassVar[str] = "text"
    """What observers report as the requested output (`gen_ai.output.type`)."""

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        reply = await self.caller.complete_text(request)
        return Completion(
            value=schema.model_validate({"text": reply.text}),
            usage=reply.usage,
            model=reply.model,
            response_id=reply.response_id,
            finish_reasons=reply.finish_reasons,
        )


async def run_once_text(
    caller: TextCaller,
    agent: OnceAgent[Ctx],
    ctx: Ctx,
    *,
    observer: ObserverArg = None,
    retry: RetryPolicy | None = None,
    stream: bool = False,
) -> TextResult:
    """Ask for one prose reply over the `TextCaller` seam (no JSON mode, no envelope).

    Retry, fallback, the throttle contract and the truncation rule are those of
    `generate_structured`: a reply cut off by the token limit ends ERROR with `MAX_TOKENS`,
    as a structured run does. An empty reply is returned as it came (`text == ""`, outcome
    SILENT), not as an error.

    Args:
        caller: The plain-text seam.
        agent: Renders the prompt and names the model.
        ctx: The caller's data for `agent.render`.
        observer: One observer, several, or none.
        retry: Retry and fallback of the call; `RetryPolicy()` when omitted.
        stream: Ask the caller to stream the reply, and emit it as it arrives (`TextDelta`, and
            `PartialDiscarded` for a reply that then fails) to the observers. A caller set to
            stream (`OpenAICaller(stream=True)`, `AnthropicCaller(stream=True)`) streams without it;
            one that cannot stream answers as without it.
    """
    role = agent.role()
    text_caller = _TextAsStructured(caller)
    async with RunSession(observers_of(observer), agent=agent, role=role, max_rounds=1, caller=text_caller) as session:
        reply = await _single_shot(text_caller, agent, ctx, _Text, retry, session, stream=stream)
        if reply.value is None:
            return session.finish(TextResult(text=None, **_failed(reply, session)))
        text = reply.value.text
        outcome = Outcome.APPLIED if text.strip() else Outcome.SILENT
        return session.finish(TextResult(text=text, model=reply.model, **_answered(outcome, reply, session)))
