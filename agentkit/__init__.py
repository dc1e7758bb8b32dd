"""agentkit: typed agents that gather, reason in a bounded loop, then act or propose.

The top level holds what a typical agent needs; sub-namespaces carry the rest:
``agentkit.testing`` (scripted caller, fake OpenAI server), ``agentkit.providers.openai``,
``agentkit.program`` (program gating), ``agentkit.journal``, ``agentkit.otel``, ``agentkit.local``.
"""

import importlib
from typing import TYPE_CHECKING

from agentkit._runner import ToolLoop
from agentkit._state import RunCheckpoint
from agentkit.agent import PriorCall, Prompt, RoleSpec, ToolAgent, ToolRoundInfo
from agentkit.config import AfterProposal, LoopConfig, RepeatPolicy
from agentkit.context import ContextWindow
from agentkit.degeneration import SameFunc
from agentkit.errors import (
    AgentkitError,
    CallRefused,
    ExecutorError,
    MissingTierError,
    ProviderError,
    ResumeRefused,
    StructuredOutputError,
    Throttled,
    TierParseError,
    ToolError,
    ToolRetry,
    ToolTimeout,
    Truncated,
    UsageError,
    VerifierError,
)
from agentkit.events import Event
from agentkit.loop import run_tool_loop, run_tool_loop_sync, run_tool_loop_tiered
from agentkit.observe import LoggingObserver, Observer
from agentkit.once import OnceAgent, OnceResult, RoundInfo, TextResult, run_once, run_once_text
from agentkit.outcome import Outcome, StopReason

# Imported here, not lazily: importing the submodule `agentkit.pair` would otherwise shadow the
# function `pair` on the package.
from agentkit.pair import LLMVerifier, PairConfig, PairResult, Review, RulesVerifier, Verifier, pair
from agentkit.proposals import ProposedAction, load_proposal
from agentkit.results import RoundRecord, TieredLoopResult, ToolLoopResult, Usage
from agentkit.resume import resume_tool_loop
from agentkit.step import ToolStep
from agentkit.structured import Completion, RetryPolicy, StructuredCaller, StructuredRequest, generate_structured
from agentkit.text import TextCaller, TextCompletion
from agentkit.tiers import AutonomyRung, Tier, max_rung_for, parse_tier
from agentkit.tools import ContextFunctionTool, ContextTool, FunctionTool, Tool, tool, tool_set

if TYPE_CHECKING:
    from agentkit.approval import Approval, ApprovalError, Rejection, approve, execute_approved, reject
    from agentkit.prompting import reflective_prompt
    from agentkit.stream import RunStream, iter_tool_loop, iter_tool_loop_tiered

# Imported on first use: these shapes define models and pull in asyncio, and a program that only
# runs the tool loop should not pay for them at `import agentkit`.
_LAZY = {
    "Approval": "agentkit.approval",
    "ApprovalError": "agentkit.approval",
    "Rejection": "agentkit.approval",
    "approve": "agentkit.approval",
    "execute_approved": "agentkit.approval",
    "reject": "agentkit.approval",
    "reflective_prompt": "agentkit.prompting",
    "RunStream": "agentkit.stream",
    "iter_tool_loop": "agentkit.stream",
    "iter_tool_loop_tiered": "agentkit.stream",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AfterProposal",
    "AgentkitError",
    "Approval",
    "ApprovalError",
    "AutonomyRung",
    "CallRefused",
    "Completion",
    "ContextFunctionTool",
    "ContextTool",
    "ContextWindow",
    "Event",
    "ExecutorError",
    "FunctionTool",
    "LLMVerifier",
    "LoggingObserver",
    "LoopConfig",
    "MissingTierError",
    "Observer",
    "OnceAgent",
    "OnceResult",
    "Outcome",
    "PairConfig",
    "PairResult",
    "PriorCall",
    "Prompt",
    "ProposedAction",
    "ProviderError",
    "Rejection",
    "RepeatPolicy",
    "ResumeRefused",
    "RetryPolicy",
    "Review",
    "RoleSpec",
    "RoundInfo",
    "RoundRecord",
    "RulesVerifier",
    "RunCheckpoint",
    "RunStream",
    "SameFunc",
    "StopReason",
    "StructuredCaller",
    "StructuredOutputError",
    "StructuredRequest",
    "TextCaller",
    "TextCompletion",
    "TextResult",
    "Throttled",
    "Tier",
    "TierParseError",
    "TieredLoopResult",
    "Tool",
    "ToolAgent",
    "ToolError",
    "ToolLoop",
    "ToolLoopResult",
    "ToolRetry",
    "ToolRoundInfo",
    "ToolStep",
    "ToolTimeout",
    "Truncated",
    "Usage",
    "UsageError",
    "Verifier",
    "VerifierError",
    "approve",
    "execute_approved",
    "generate_structured",
    "iter_tool_loop",
    "iter_tool_loop_tiered",
    "load_proposal",
    "max_rung_for",
    "pair",
    "parse_tier",
    "reflective_prompt",
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
