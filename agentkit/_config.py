"""`LoopConfig`: the code-enforced ceilings around a loop."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from decimal import Decimal

from agentkit._context import ContextWindow
from agentkit._cost import Prices, check_cost_budget
from agentkit._structured import RetryPolicy
from agentkit._tiers import Tier
from agentkit._trust import ProvenancePolicy
from agentkit.errors import UsageError

__all__ = ["DEFAULT_MAX_ROUNDS", "AfterProposal", "LoopConfig", "RepeatPolicy"]

DEFAULT_MAX_ROUNDS = 4


class AfterProposal(enum.StrEnum):
    """What a tiered loop does once a call has become a proposal."""

    STOP = "stop"
    """End the run: outcome APPLIED, reason PROPOSED (the default)."""
    CONTINUE = "continue"
    """Tell the executor the call awaits approval and go on."""


class RepeatPolicy(enum.StrEnum):
    """What the loop does when the executor repeats a recent call (see `degeneration_window`)."""

    STOP = "stop"
    """End the run: outcome STALEMATE, reason DEGENERATION (the default)."""
    REFUSE = "refuse"
    """Do not run the repeated call; tell the executor it repeats an earlier round's call (its
    `PriorCall` has `repeats` set to that round and an `observation` saying so) and go on.
    The round counts toward the ceiling. A repeat after `LoopConfig.repeat_refusals` refusals
    ends the run STALEMATE, as `STOP` does at once."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopConfig:
    """Ceilings and policies for one loop run.

    The round ceiling has a default (4) and unlimited rounds must be asked for (`None`); the
    token budget, the deadline and the tool timeout are off unless set. Every field is checked
    when the config is built: a wrong type, NaN, infinity or a value out of range is a
    `UsageError` naming the field and what it accepts.
    """

    max_rounds: int | None = DEFAULT_MAX_ROUNDS
    """Most rounds to run; `None` means unlimited and must be said explicitly."""
    token_budget: int | None = None
    """Input+output tokens for the run; `None` (the default): no budget. A soft stop: before each
    round the loop stops if the tokens spent plus the largest round so far would exceed it, so
    one round (its retries and fallback included) can still overshoot it; the first round always
    runs."""
    deadline: float | None = None
    """Seconds the whole run may take (wall clock); `None` (the default): no deadline."""
    tool_timeout: float | None = None
    """Seconds one tool call may take (a timeout is a tool error); `None` (the default): no limit."""
    autonomy: Tier = Tier.REVERSIBLE
    """Highest tier allowed to run live; external-reversible and irreversible never do."""
    after_proposal: AfterProposal = AfterProposal.STOP
    """Stop at the first proposal, or continue."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry and fallback of each structured call."""
    degeneration_window: int = 3
    """How many recent calls a new call is compared against (catches A, B, A, B cycles)."""
    rationale_max_length: int | None = None
    """Bound on the step's free-text rationale (small models run on without one)."""
    on_repeat: RepeatPolicy = RepeatPolicy.STOP
    """End the run at a repeated call (`STOP`), or refuse the call and go on (`REFUSE`)."""
    repeat_refusals: int = 2
    """With `RepeatPolicy.REFUSE`: how many repeated calls are refused in a run; the next
    repeat ends it STALEMATE. Unused with `STOP`."""
    context: ContextWindow | None = None
    """How much of the earlier calls the executor is shown each round (the last N, a character or
    estimated-token budget, an optional summary of the rest); `None` (the default): all of them.
    Only the executor's view is bounded: `result.items` keeps everything."""
    min_calls: int = 0
    """How many tool calls must have run (returned a batch) before the executor may say done:
    until then the step schema the model sees has no done variant (a constrained decoder cannot
    write one) and a done reply is refused and asked again, as an invalid step is. The retrieval
    recipe is `min_calls=1` with `on_repeat=RepeatPolicy.REFUSE`: the model cannot answer
    before it looked, and is told, rather than stopped, when it repeats a search. Without enough
    calls by the round ceiling, the run ends at the ceiling (no closing round). 0 (the default):
    done is always allowed."""
    closing_round: bool = True
    """With `answer=` given to the loop: a run whose tools stop at the round ceiling, the token
    budget or a stalemate gets one more round, with no tool call allowed, that asks the executor
    for the answer. It runs only within the budget and before the deadline (with a token budget,
    the tool rounds stop one round earlier to leave it room). `False` turns it off. Unused
    without `answer=`."""
    prices: Prices | None = None
    """Each model's price (`Prices`): with it, `result.cost` is what the run's model calls cost, each
    round priced at the model that answered it (the role's model when none did); `None` (the default):
    no cost (`result.cost` is `None`). The run's state keeps the table, so a resumed run prices alike."""
    cost_budget: Decimal | None = None
    """Money for the run, in the currency of `prices` (which it needs); `None` (the default): no budget.
    The token budget's rule: before each round the loop stops `BUDGET_EXHAUSTED` if the cost so far
    plus the costliest round so far would exceed it, so one round can still overshoot it; the first
    round always runs."""
    stream: bool = False
    """Ask the model to stream each step, and emit it as it arrives: `RationaleDelta` as the rationale
    grows, `AnswerDelta` with the answer so far (validated as far as it goes), then the complete step,
    validated as a step that did not stream (`PartialDiscarded` when it fails and is asked again).
    It needs a caller that streams (`OpenAICaller`, `AnthropicCaller`; either with `stream=True`
    streams every run); with any other, the run goes as without it. The deltas reach observers and `iter_tool_loop`,
    never the journal, which records the complete step; a run with no observer is not streamed
    (nobody would see the deltas). It is not part of a run's recorded state: a resumed or forked
    run streams when its own config (or caller) says so. `False` (the default) sends the request
    of a run that does not stream, byte for byte."""

    max_calls_per_step: int = 1
    """How many tool calls one step may carry. 1 (the default): a step is done or one call, its schema and
    request bytes as they always were. Above 1, the call variant carries 1 to N calls, a bounded array in the
    step schema (a constrained decoder cannot write more). Each call is checked on its own (tier, grants, the
    repeat guard, counting the step's earlier calls), the calls that run live run concurrently, and their
    results join the run in the step's order (docs/loops.md)."""
    max_parallel_calls: int | None = None
    """With `max_calls_per_step` above 1: how many of a step's calls run at once; `None` (the default): all
    of them. Each call keeps its own `tool_timeout`."""
    provenance: ProvenancePolicy | None = field(default_factory=ProvenancePolicy)
    """What the run may still do on its own once a tool declared `Trust.UNTRUSTED` has returned something
    (see `ProvenancePolicy` and docs/provenance.md): by default nothing above `READ_ONLY` runs live, and no
    egress call does. A run that reads no untrusted content is gated by its tiers alone. `None` turns it
    off: no taint, no marks, tiers only."""
    repeat_exempt: frozenset[str] = frozenset()
    """Tools the repeat guard never stops or refuses (a read whose legitimate use repeats, such as polling
    a queue or re-reading a page that changes); their calls do not join the repeat window either."""

    def __post_init__(self) -> None:
        whole_or_none("max_rounds", self.max_rounds, "an int >= 1, or None for unlimited")
        whole_or_none("token_budget", self.token_budget, "an int >= 1 (tokens), or None for no budget")
        check_cost_budget(self.cost_budget, self.prices)
        seconds_or_none("deadline", self.deadline)
        seconds_or_none("tool_timeout", self.tool_timeout)
        whole_or_none("degeneration_window", self.degeneration_window, "an int >= 1", optional=False)
        whole_or_none("rationale_max_length", self.rationale_max_length, "an int >= 1 (characters), or None")
        whole_or_none("repeat_refusals", self.repeat_refusals, "an int >= 1", optional=False)
        whole_or_none("max_calls_per_step", self.max_calls_per_step, "an int >= 1 (calls)", optional=False)
        whole_or_none("max_parallel_calls", self.max_parallel_calls, "an int >= 1 (calls at once), or None for all")
        if isinstance(self.min_calls, bool) or not isinstance(self.min_calls, int) or self.min_calls < 0:
            raise UsageError(f"LoopConfig.min_calls must be an int >= 0; got {self.min_calls!r}")
        if self.max_rounds is not None and self.min_calls > self.max_rounds:
            raise UsageError(
                f"LoopConfig.min_calls ({self.min_calls}) is more than max_rounds ({self.max_rounds}): the run could "
                "never be done; lower min_calls or raise max_rounds"
            )
        if self.context is not None and not isinstance(self.context, ContextWindow):
            raise UsageError(f"LoopConfig.context must be a ContextWindow or None; got {self.context!r}")
        if not isinstance(self.closing_round, bool):
            raise UsageError(f"LoopConfig.closing_round must be True or False; got {self.closing_round!r}")
        if not isinstance(self.stream, bool):
            raise UsageError(f"LoopConfig.stream must be True or False; got {self.stream!r}")
        if not isinstance(self.on_repeat, RepeatPolicy):
            raise UsageError(f"LoopConfig.on_repeat must be a RepeatPolicy; got {self.on_repeat!r}")
        if not isinstance(self.autonomy, Tier):
            raise UsageError(f"LoopConfig.autonomy must be a Tier; got {self.autonomy!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise UsageError(f"LoopConfig.retry must be a RetryPolicy; got {self.retry!r}")
        if self.provenance is not None and not isinstance(self.provenance, ProvenancePolicy):
            raise UsageError(f"LoopConfig.provenance must be a ProvenancePolicy or None; got {self.provenance!r}")
        if not isinstance(self.repeat_exempt, frozenset) or not all(isinstance(n, str) for n in self.repeat_exempt):
            raise UsageError(f"LoopConfig.repeat_exempt must be a frozenset of tool names; got {self.repeat_exempt!r}")
        if not isinstance(self.after_proposal, AfterProposal):
            raise UsageError(f"LoopConfig.after_proposal must be an AfterProposal; got {self.after_proposal!r}")


def whole_or_none(name: str, value: object, accepted: str, *, optional: bool = True) -> None:
    """Refuse anything but a whole number >= 1 (or `None` when `optional`); bools are not numbers here.

    Raises:
        UsageError: naming the field and what it accepts.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"LoopConfig.{name} must be {accepted}; got {value!r}")


def seconds_or_none(name: str, value: object) -> None:
    """Refuse anything but a finite number of seconds > 0, or `None` (NaN and infinity included).

    Raises:
        UsageError: naming the field and what it accepts.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"LoopConfig.{name} must be a finite number of seconds > 0, or None for no limit; got {value!r}"
        )
