"""agentkit: typed agents that gather, reason in a bounded loop, then act or propose.

The top level holds what a typical agent needs; the public modules carry the rest:

- `agentkit.errors`: the whole error tree (the top level has its root, `UsageError` and `ToolRetry`);
- `agentkit.events`: the events a run emits, runs as streams of them, `LoggingObserver`;
- `agentkit.testing`: the scripted and function callers, the fake OpenAI server;
- `agentkit.providers`: `openai` (`OpenAICaller`), `local` (the embedded model), the prose seam
  (`TextCaller`, `TextCompletion` and `run_once_text`'s `TextResult`);
- `agentkit.provenance`: trust declarations, the provenance policy and what runs record of it;
- `agentkit.journal`, `agentkit.temporal`, `agentkit.mcp`, `agentkit.otel`, `agentkit.program`
  and `agentkit.prompting`.

Every other module is private. Each name here reports `agentkit` as its module, as httpx's do.
"""

import contextlib
import importlib
from typing import TYPE_CHECKING

from agentkit._agent import PriorCall, Prompt, RoleSpec, ToolAgent, ToolRoundInfo
from agentkit._cites import Cites
from agentkit._config import AfterProposal, LoopConfig, RepeatPolicy
from agentkit._context import ContextWindow
from agentkit._degeneration import SameFunc
from agentkit._loops import run_tool_loop, run_tool_loop_sync, run_tool_loop_tiered
from agentkit._observe import Observer
from agentkit._once import OnceAgent, OnceResult, RoundInfo, run_once, run_once_text
from agentkit._outcome import Outcome, StopReason
from agentkit._pair import LLMVerifier, PairConfig, PairResult, Review, RulesVerifier, Verifier, pair
from agentkit._proposals import ProposedAction
from agentkit._results import RoundRecord, TieredLoopResult, ToolLoopResult
from agentkit._resume import resume_tool_loop
from agentkit._runner import ToolLoop
from agentkit._state import RunCheckpoint
from agentkit._step import ToolStep
from agentkit._structured import Completion, RetryPolicy, StructuredCaller, StructuredRequest, generate_structured
from agentkit._tiers import AutonomyRung, Tier, max_rung_for, parse_tier
from agentkit._tools import ContextTool, FunctionTool, Tool, tool, tool_set
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, ToolRetry, UsageError

if TYPE_CHECKING:
    from agentkit._approval import Approval, Rejection, approve, execute_approved, reject

# Imported on first use: approval pulls in threading and uuid machinery a program that only runs
# the tool loop does not need at `import agentkit`.
_LAZY = {
    "Approval": "agentkit._approval",
    "Rejection": "agentkit._approval",
    "approve": "agentkit._approval",
    "execute_approved": "agentkit._approval",
    "reject": "agentkit._approval",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    _own(value)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _own(value: object) -> None:
    """Report `agentkit` as the module of a public name (its home is a private module)."""
    if getattr(value, "__module__", "").startswith("agentkit._"):
        with contextlib.suppress(AttributeError, TypeError):  # an alias (``SameFunc``) keeps its own
            value.__module__ = "agentkit"


__all__ = [
    "AfterProposal",
    "AgentkitError",
    "Approval",
    "AutonomyRung",
    "Cites",
    "Completion",
    "ContextTool",
    "ContextWindow",
    "FunctionTool",
    "LLMVerifier",
    "LoopConfig",
    "Observer",
    "OnceAgent",
    "OnceResult",
    "Outcome",
    "PairConfig",
    "PairResult",
    "PriorCall",
    "Prompt",
    "ProposedAction",
    "Rejection",
    "RepeatPolicy",
    "RetryPolicy",
    "Review",
    "RoleSpec",
    "RoundInfo",
    "RoundRecord",
    "RulesVerifier",
    "RunCheckpoint",
    "SameFunc",
    "StopReason",
    "StructuredCaller",
    "StructuredRequest",
    "Tier",
    "TieredLoopResult",
    "Tool",
    "ToolAgent",
    "ToolLoop",
    "ToolLoopResult",
    "ToolRetry",
    "ToolRoundInfo",
    "ToolStep",
    "Usage",
    "UsageError",
    "Verifier",
    "approve",
    "execute_approved",
    "generate_structured",
    "max_rung_for",
    "pair",
    "parse_tier",
    "reject",
    "resume_tool_loop",
    "run_once",
    "run_once_text",
    "run_tool_loop",
    "run_tool_loop_sync",
    "run_tool_loop_tiered",
    "tool",
    "tool_set",
]

for _name in __all__:
    if _name not in _LAZY:
        _own(globals()[_name])
del _name
