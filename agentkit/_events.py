"""The moments of a run, as frozen, `kind`-tagged values (observer hooks receive them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import JsonValue, TypeAdapter, computed_field
from pydantic_core import PydanticSerializationError, to_json

from agentkit._agent import RoundInfo, ToolRoundInfo
from agentkit._config import LoopConfig
from agentkit._jsonform import NOT_READ, JsonArgs, JsonCaller, JsonError, JsonException, Unwritten
from agentkit._proposals import ProposedAction
from agentkit._results import RunEnding
from agentkit._tiers import Tier
from agentkit._usage import Usage

if TYPE_CHECKING:
    from agentkit._structured import Attempt

__all__ = [
    "Continued",
    "Decided",
    "DegenerationDetected",
    "AnswerDelta",
    "Event",
    "EventBase",
    "LLMCallFinished",
    "PartialDiscarded",
    "ProposalCaptured",
    "RoundStarted",
    "RunAborted",
    "RunFinished",
    "RunStarted",
    "RationaleDelta",
    "TextDelta",
    "ToolCallStarted",
    "ToolResultReturned",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Decided:
    """A decision on a proposal that a resumed run settles before its first round."""

    round: int
    """The proposal's round."""
    tool_name: str
    tier: Tier | None
    approved: bool
    by: str
    """Who approved or rejected it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Continued:
    """What a leg of a run goes on from: the last round its state recorded (a resumed run's own, or, on a
    fork's first leg, its parent's), and the decisions it settles first."""

    run_id: str
    """The run whose round it is: this run's, or the parent's for a fork that has not run a round of its own."""
    round: int
    """That round (`0`: the state records none)."""
    trace: str | None = None
    """The W3C `traceparent` a tracing observer recorded for that round (`RoundEntry.trace`), to link to."""
    fork: bool = False
    """The round is the parent's: this leg is the fork's first."""
    decisions: tuple[Decided, ...] = ()


_WRITERS: dict[type[EventBase], TypeAdapter[Any]] = {}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _mended(value: object) -> object:
    """`value` (an event's JSON-mode dump) with every lone surrogate in its text and keys made U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_mended(key): _mended(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_mended(item) for item in value]
    return value


def _writer(cls: type[EventBase]) -> TypeAdapter[Any]:
    """The adapter that writes events of `cls` (made on its first event: it reads every field's type)."""
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = TypeAdapter(cls)
    return writer


@dataclass(frozen=True, kw_only=True, slots=True)
class EventBase:
    """What every event has besides its own fields: its number in the run, and its JSON form."""

    seq: int = 0
    """The event's number in its run, from 0 (the `RunStarted`), one more for each event after it, as
    delivered to the observers (a resumed leg numbers its own events from 0 again; the events of a journaled run
    that `agentkit.web.JournalFeed` derives from its journal are numbered once across all its legs)."""

    def to_json(self) -> str:
        """The event as JSON: an object with its `seq`, `kind`, `run_id`, `round` and its own fields (tool args
        as their JSON, an error as its class name and message), as
        `agentkit.events.EVENT_SCHEMA` describes it; `agentkit.events.parse_event` reads it back."""
        writer = _writer(type(self))
        try:
            return writer.dump_json(self).decode()
        except PydanticSerializationError:
            # A lone surrogate (a tool's text decoded with `surrogateescape`, a stream's `\udce9`) is not text in
            # any encoding, and JSON readers refuse its escape: written as U+FFFD, so the event still reaches a UI.
            return to_json(_mended(writer.dump_python(self, mode="json")), inf_nan_mode="null").decode()


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(EventBase):
    """A run began."""

    kind: Literal["run_start"] = "run_start"
    run_id: str
    agent: str
    """The executor's class name."""
    model: str
    """The primary model."""
    tools: tuple[str, ...]
    """The tool names offered."""
    max_rounds: int | None
    """The round ceiling (`None`: unlimited)."""
    config: Annotated[LoopConfig | None, NOT_READ, Unwritten] = None
    """The run's full configuration (autonomy, budgets, deadline, after-proposal policy), when
    the run is a tool loop. Not in the JSON form (it holds code: a summarizer, a comparator)."""
    caller: JsonCaller = None
    """The caller the run asks (it may describe itself, as `ModelCall.caller` says). In the JSON form,
    its class name."""
    continues: Continued | None = None
    """A resumed run (or a fork): what this leg goes on from. `None` for a run's first leg."""

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects a decorator over @property; pydantic documents it
    @property
    def round(self) -> int:
        """The round this leg goes on from (`0` for a run's first leg)."""
        return 0 if self.continues is None else self.continues.round


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundStarted(EventBase):
    """A round began; `info` is what the executor renders from.

    A tool loop's round carries a `ToolRoundInfo`; a single shot's or a pair's a `RoundInfo`.
    Both have `round`, `max_rounds` and `is_final_round`.
    """

    kind: Literal["round_start"] = "round_start"
    run_id: str
    info: ToolRoundInfo[Any] | RoundInfo

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects a decorator over @property; pydantic documents it
    @property
    def round(self) -> int:
        """The round that began (`info.round`)."""
        return self.info.round


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMCallFinished(EventBase):
    """One model attempt finished (retries and fallbacks each get one)."""

    kind: Literal["llm_call"] = "llm_call"
    run_id: str
    role: str
    """The role's `prompt_type` (or `"executor"`)."""
    round: int
    model: str
    attempt: int
    """1-based over all attempts of the round's call, fallback included."""
    seconds: float
    usage: Usage
    error: JsonError | None = None

    @classmethod
    def of(cls, attempt: Attempt, *, run_id: str, role: str, round: int) -> LLMCallFinished:
        """The event for one attempt reported by `generate_structured`'s `on_attempt`."""
        return cls(
            run_id=run_id,
            role=role,
            round=round,
            model=attempt.model,
            attempt=attempt.attempt,
            seconds=attempt.seconds,
            usage=attempt.usage,
            error=attempt.error,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStarted(EventBase):
    """The loop is about to run a tool."""

    kind: Literal["tool_call"] = "tool_call"
    run_id: str
    round: int
    tool_name: str
    tier: Tier
    args: JsonArgs
    count: int = 1
    """The tool's how-manieth call in the run this is, from 1 (a resumed run counts its earlier legs'
    calls too)."""
    label: str = ""
    """A status line a UI can show as it is, e.g. `"Running search"`, `"Running search (call 3)"`."""


def status_label(tool_name: str, count: int) -> str:
    """`ToolCallStarted.label`: what a UI shows while the call runs."""
    return f"Running {tool_name}" if count <= 1 else f"Running {tool_name} (call {count})"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResultReturned(EventBase):
    """A tool call finished (with a batch, a `ToolRetry` observation or an error)."""

    kind: Literal["tool_result"] = "tool_result"
    run_id: str
    round: int
    tool_name: str
    batch_size: int
    seconds: float
    observation: str | None = None
    error: JsonError | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposalCaptured(EventBase):
    """A call above the autonomy ceiling became a proposal (it did not run)."""

    kind: Literal["proposal"] = "proposal"
    run_id: str
    proposal: ProposedAction[Any]

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects a decorator over @property; pydantic documents it
    @property
    def round(self) -> int:
        """The proposal's round."""
        return self.proposal.round


@dataclass(frozen=True, kw_only=True, slots=True)
class DegenerationDetected(EventBase):
    """The executor repeated a recent call; the run ends STALEMATE, unless the call was refused
    under `RepeatPolicy.REFUSE` (`refused`) and the run goes on."""

    kind: Literal["degeneration"] = "degeneration"
    run_id: str
    round: int
    tool_name: str
    args: JsonArgs
    refused: bool = False
    """The repeated call was refused (not run) and the run goes on (`RepeatPolicy.REFUSE`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(EventBase):
    """A run ended; `result` is what the caller gets (a copy of it, where it holds lists).

    Every run shape's result is a `RunEnding`: `outcome`, `stop_reason`, `error`,
    `usage`, `rounds` and `run_id` are always there; narrow with `isinstance` (to
    `ToolLoopResult`, `OnceResult`, ...) for the rest.
    """

    kind: Literal["run_end"] = "run_end"
    run_id: str
    result: RunEnding
    """In the JSON form, the fields every result has (`RunEnding`'s)."""

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects a decorator over @property; pydantic documents it
    @property
    def round(self) -> int:
        """The rounds the run started (`result.rounds`)."""
        return self.result.rounds


@dataclass(frozen=True, kw_only=True, slots=True)
class RunAborted(EventBase):
    """A run was cancelled, or raised (a wiring mistake such as `UsageError`): no result exists.

    It lets an observer close what it opened for the run (spans, timers); the exception itself
    still propagates to the caller.
    """

    kind: Literal["run_abort"] = "run_abort"
    run_id: str
    error: JsonException
    """What ended the run: `asyncio.CancelledError`, a `UsageError`, ..."""
    round: int = 0
    """The last round the run started (`0`: none)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RationaleDelta(EventBase):
    """A streamed step's rationale grew (streaming on: `LoopConfig(stream=True)` or a caller's `stream=True`).

    It is what has arrived, not what was validated: the complete step follows (`ToolCallStarted`,
    `ProposalCaptured`, `RunFinished`...), or, when the step fails validation, `PartialDiscarded`."""

    kind: Literal["rationale_delta"] = "rationale_delta"
    run_id: str
    round: int
    attempt: int
    """1-based over the attempts of the round's call (as `LLMCallFinished.attempt`)."""
    text: str
    """The rationale so far."""
    delta: str
    """What this event added to it (the end of `text`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerDelta(EventBase):
    """A streamed step's answer grew: the answer so far, validated as far as it goes.

    `partial` is the JSON of the answer that has arrived (its last string may be cut short), and it
    validates against the run's answer type with every member still missing left out (a model
    answer's absent fields, a list's unfinished last item). A step that later fails validation is
    followed by `PartialDiscarded`."""

    kind: Literal["answer_delta"] = "answer_delta"
    run_id: str
    round: int
    attempt: int
    """1-based over the attempts of the round's call (as `LLMCallFinished.attempt`)."""
    partial: JsonValue
    """The answer so far, as JSON values (objects are dicts, arrays lists)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta(EventBase):
    """A streamed prose reply (`run_once_text` with streaming on) grew."""

    kind: Literal["text_delta"] = "text_delta"
    run_id: str
    round: int
    attempt: int
    """1-based over the attempts of the round's call (as `LLMCallFinished.attempt`)."""
    text: str
    """The reply so far."""
    delta: str
    """What this event added to it (the end of `text`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartialDiscarded(EventBase):
    """What was streamed of a reply is void: the reply failed (it did not validate and is re-asked, it was cut
    off by the token limit, the request failed mid-stream). The deltas since the last `PartialDiscarded`
    of the round (or its start) are to be dropped; the next ones start afresh."""

    kind: Literal["partial_discarded"] = "partial_discarded"
    run_id: str
    round: int
    attempt: int
    """1-based over the attempts of the round's call (as `LLMCallFinished.attempt`)."""
    reason: str
    """Why, in words (the validation error, the truncation, the failure)."""


Event = (
    RunStarted
    | RoundStarted
    | LLMCallFinished
    | RationaleDelta
    | AnswerDelta
    | TextDelta
    | PartialDiscarded
    | ToolCallStarted
    | ToolResultReturned
    | ProposalCaptured
    | DegenerationDetected
    | RunFinished
    | RunAborted
)
"""Any event; match on `event.kind`."""
