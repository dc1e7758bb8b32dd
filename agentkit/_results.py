"""What the loops return: results, round records and token usage."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._cites import resolve_citations
from agentkit._config import LoopConfig
from agentkit._outcome import Outcome, StopReason
from agentkit._state import RunCheckpoint
from agentkit._tiers import Tier
from agentkit._trust import RunProvenance
from agentkit._usage import Usage

if TYPE_CHECKING:
    from typing import Self

    from agentkit._proposals import ProposedAction
    from agentkit.errors import AgentkitError

__all__ = ["RoundRecord", "RunEnding", "TieredLoopResult", "ToolLoopResult", "Usage"]
"""`Usage` is defined in `agentkit._usage` (the state and the model seam need it without the results)."""

R = TypeVar("R")
Args = TypeVar("Args", bound=BaseModel)
Answer = DefaultedTypeVar("Answer", default=None)
"""The type of a run's final answer (`run_tool_loop(..., answer=Schema)`); `None` without one."""


@functools.cache
def _unrecorded() -> RunCheckpoint:
    """The state of a result built by hand: no run recorded (one value: it is frozen)."""
    return RunCheckpoint.start("", LoopConfig(), ())


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundRecord:
    """What happened in one round of a tool loop."""

    round: int
    """The round number, from 1."""
    done: bool
    """The executor said it was done this round."""
    rationale: str = ""
    """The executor's stated reason for its step."""
    tool_name: str | None = None
    """The tool the executor called, if it called one."""
    call: BaseModel | None = None
    """The validated arguments of the call."""
    tier: Tier | None = None
    """The called tool's declared tier."""
    executed: bool = False
    """The tool ran (it was neither proposed, refused nor a repeat)."""
    proposed: bool = False
    """The call was above the autonomy ceiling and became a proposal."""
    batch_size: int = 0
    """How many items the tool returned."""
    observation: str | None = None
    """The `ToolRetry` message the tool raised, if it did."""
    error: str | None = None
    """The error that ended the run in this round, if one did."""
    llm_seconds: float = 0.0
    """Time spent in the structured call, retries included."""
    tool_seconds: float = 0.0
    """Time spent in the tool call."""
    usage: Usage = field(default_factory=Usage)
    """Model usage of this round."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEnding:
    """What every run's result shares, whatever its shape (tool loop, single shot, pair).

    A handler written against it (`RunFinished.result` is one) serves every run.
    """

    outcome: Outcome
    """What the run produced."""
    stop_reason: StopReason
    """Why the run ended."""
    error: AgentkitError | None = None
    """Set exactly when `outcome` is `Outcome.ERROR`."""
    usage: Usage = field(default_factory=Usage)
    """Model usage summed over the run, every attempt (retries and fallback) included."""
    rounds: int = 0
    """Rounds started (model turns asked, not counting retries)."""
    run_id: str = ""
    """A unique id for the run, as carried by its observer events (and stamped on its proposals)."""

    def raise_for_error(self) -> Self:
        """Raise `error` if the run ended in error; otherwise return the result itself."""
        if self.error is not None:
            raise self.error
        return self


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolLoopResult(RunEnding, Generic[R, Answer]):
    """The ending of `run_tool_loop`: always returned, never raised."""

    items: list[R]
    """Every item gathered, batches concatenated in call order; kept whatever the ending. Not deduplicated:
    an item two calls returned is here twice (the caller knows what makes two items the same)."""
    trace: tuple[RoundRecord, ...] = ()
    """One record per round."""
    answer: Answer | None = None
    """With `answer=Schema`: the validated answer the executor gave with its done step, or in
    the closing round; `None` when it gave none (and always without `answer=`)."""
    answer_from_closing_round: bool = False
    """The answer came from the closing round: the tools stopped at the round ceiling, the budget
    or a stalemate (`stop_reason` says which), and the executor was then asked for the answer."""
    provenance: RunProvenance | None = None
    """What the run read that a third party could write, where each item came from, and whether untrusted
    content preceded the answer (`None`: the run had no `ProvenancePolicy`)."""
    checkpoint: RunCheckpoint = field(default_factory=_unrecorded)
    """The run's state, a frozen JSON-native value: `resume_tool_loop` (or `ToolLoop.resume`)
    continues a run that stopped at a proposal from it, and `journal.resume` a run whose process
    died between rounds from the last one its journal kept. On a result built by hand it records no
    run and cannot be resumed."""

    def cited(self) -> list[R]:
        """The items the answer cites (its `Cites` fields), in the order it cites them, each once;
        empty without an answer or citations."""
        return resolve_citations(self.answer, self.items)


@dataclass(frozen=True, kw_only=True, slots=True)
class TieredLoopResult(ToolLoopResult[R, Answer], Generic[Args, R, Answer]):
    """The ending of `run_tool_loop_tiered`: a `ToolLoopResult` plus the proposals."""

    proposed: list[ProposedAction[Args]] = field(default_factory=list)
    """Calls above the autonomy ceiling, in the order the executor made them; none ran."""
