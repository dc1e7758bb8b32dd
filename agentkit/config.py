"""``LoopConfig``: the code-enforced ceilings around a loop."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from agentkit.errors import UsageError
from agentkit.structured import RetryPolicy
from agentkit.tiers import Tier

__all__ = ["DEFAULT_MAX_ROUNDS", "AfterProposal", "LoopConfig"]

DEFAULT_MAX_ROUNDS = 4


class AfterProposal(enum.StrEnum):
    """What a tiered loop does once a call has become a proposal."""

    STOP = "stop"
    """End the run: outcome APPLIED, reason PROPOSED (the default)."""
    CONTINUE = "continue"
    """Tell the executor the call awaits approval and go on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopConfig:
    """Ceilings and policies for one loop run. Every limit has a default; unlimited is explicit."""

    max_rounds: int | None = DEFAULT_MAX_ROUNDS
    """Most rounds to run; ``None`` means unlimited and must be said explicitly."""
    token_budget: int | None = None
    """Most input+output tokens; the loop stops before a call that would exceed it."""
    deadline: float | None = None
    """Seconds the whole run may take (wall clock)."""
    tool_timeout: float | None = None
    """Seconds one tool call may take; a timeout is a tool error."""
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

    def __post_init__(self) -> None:
        if self.max_rounds is not None and (
            not isinstance(self.max_rounds, int) or isinstance(self.max_rounds, bool) or self.max_rounds < 1
        ):
            raise UsageError(f"max_rounds must be >= 1, or None for unlimited; got {self.max_rounds!r}")
        for name in ("token_budget", "deadline", "tool_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be positive, or None for no limit; got {value!r}")
        if not isinstance(self.autonomy, Tier):
            raise UsageError(f"autonomy must be a Tier, got {self.autonomy!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise UsageError(f"retry must be a RetryPolicy, got {self.retry!r}")
        if not isinstance(self.after_proposal, AfterProposal):
            raise UsageError(f"after_proposal must be an AfterProposal, got {self.after_proposal!r}")
        if self.degeneration_window < 1:
            raise UsageError(f"degeneration_window must be >= 1; got {self.degeneration_window!r}")
        if self.rationale_max_length is not None and self.rationale_max_length < 1:
            raise UsageError(f"rationale_max_length must be >= 1; got {self.rationale_max_length!r}")
