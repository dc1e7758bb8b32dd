"""How a run ended: the `Outcome` callers branch on and the `StopReason` that explains it."""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass

if typing.TYPE_CHECKING:
    from agentkit.errors import AgentkitError

__all__ = ["Ending", "Outcome", "StopReason"]


class Outcome(enum.StrEnum):
    """What a run produced."""

    APPLIED = "applied"
    """Items were gathered or an action was proposed."""
    SILENT = "silent"
    """Nothing was needed or nothing was found."""
    STALEMATE = "stalemate"
    """The executor repeated itself (degeneration)."""
    ERROR = "error"
    """The model, a tool or the wiring failed; `result.error` says how."""


class StopReason(enum.StrEnum):
    """Why a run ended."""

    EXECUTOR_DONE = "executor_done"
    """The executor said it was done and items had been gathered."""
    NOTHING_RETRIEVED = "nothing_retrieved"
    """The executor said it was done and nothing had been gathered."""
    ROUND_CEILING = "round_ceiling"
    """`LoopConfig.max_rounds` was reached."""
    DEGENERATION = "degeneration"
    """The executor repeated a call (or a short cycle of calls)."""
    PROPOSED = "proposed"
    """A call above the autonomy ceiling became a proposal and the loop stopped."""
    LLM_ERROR = "llm_error"
    """The structured call failed after retries and fallback."""
    MAX_TOKENS = "max_tokens"
    """The reply was cut off by the token limit (`finish_reason == "length"`) on every model that
    could be asked; the error is a `Truncated` carrying the cut text."""
    THROTTLED = "throttled"
    """The provider answered HTTP 429; the error is a `Throttled`."""
    TOOL_ERROR = "tool_error"
    """A tool raised (or timed out); the error is a `ToolError` naming it."""
    TOOL_DECLARES_NO_TIER = "tool_declares_no_tier"
    """A tool declared no reversibility tier; it was never called."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """The next model call would have exceeded `LoopConfig.token_budget`."""
    DEADLINE = "deadline"
    """`LoopConfig.deadline` passed."""
    EXECUTOR_ERROR = "executor_error"
    """The executor's own code (its `render`) or the repeat comparator (`same=`) raised; the
    error is an `ExecutorError` whose cause is the exception. Items gathered are kept."""
    VERIFIER_APPROVED = "verifier_approved"
    """A pair's verifier approved the executor's draft."""
    VERIFIER_ERROR = "verifier_error"
    """A pair's verifier failed; the unverified draft was discarded."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How the loop's run ends, as its steps decide it (`agentkit._loop`, `agentkit._calls`)."""

    outcome: Outcome | None
    """`None`: decide by whether anything was gathered (APPLIED or SILENT)."""
    reason: StopReason
    error: AgentkitError | None = None
