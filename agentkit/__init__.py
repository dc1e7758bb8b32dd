"""agentkit: typed agents that gather, reason in a bounded loop, then act or propose."""

from agentkit.agent import PriorCall, Prompt, RoleSpec, ToolAgent, ToolRoundInfo
from agentkit.config import AfterProposal, LoopConfig
from agentkit.degeneration import SameFunc
from agentkit.errors import (
    AgentkitError,
    MissingTierError,
    ProviderError,
    StructuredOutputError,
    Throttled,
    TierParseError,
    ToolError,
    ToolRetry,
    ToolTimeout,
    UsageError,
)
from agentkit.loop import run_tool_loop, run_tool_loop_sync, run_tool_loop_tiered
from agentkit.observe import Observer
from agentkit.outcome import Outcome, StopReason
from agentkit.proposals import ProposedAction
from agentkit.results import RoundRecord, TieredLoopResult, ToolLoopResult, Usage
from agentkit.step import ToolStep
from agentkit.structured import Completion, RetryPolicy, StructuredCaller, StructuredRequest, generate_structured
from agentkit.tiers import AutonomyRung, Tier, max_rung_for, parse_tier
from agentkit.tools import FunctionTool, Tool, tool

__all__ = [
    "AfterProposal",
    "AgentkitError",
    "AutonomyRung",
    "Completion",
    "FunctionTool",
    "LoopConfig",
    "MissingTierError",
    "Observer",
    "Outcome",
    "PriorCall",
    "Prompt",
    "ProposedAction",
    "ProviderError",
    "RetryPolicy",
    "RoleSpec",
    "RoundRecord",
    "SameFunc",
    "StopReason",
    "StructuredCaller",
    "StructuredOutputError",
    "StructuredRequest",
    "Throttled",
    "Tier",
    "TierParseError",
    "TieredLoopResult",
    "Tool",
    "ToolAgent",
    "ToolError",
    "ToolLoopResult",
    "ToolRetry",
    "ToolRoundInfo",
    "ToolStep",
    "ToolTimeout",
    "Usage",
    "UsageError",
    "generate_structured",
    "max_rung_for",
    "parse_tier",
    "run_tool_loop",
    "run_tool_loop_sync",
    "run_tool_loop_tiered",
    "tool",
]
