"""`resume_tool_loop`: continue a tiered run that stopped at a proposal, once a human has decided.

The resumed run is the same loop core (`agentkit._loop`) entered with the run's state: before its
next round each approved call runs once through `execute_approved` and each rejection becomes
that call's observation; then the rounds go on under the state's ceilings, budget, deadline and
degeneration window, counted from where the run stopped. Everything is checked before anything
runs (`ToolLoop.prepared`): a refused resume makes no model call and runs no tool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar
from typing_extensions import Unpack

from agentkit._agent import ToolAgent
from agentkit._options import ResumeOptions
from agentkit._results import TieredLoopResult
from agentkit._runner import ToolLoop
from agentkit._state import RunCheckpoint
from agentkit._structured import StructuredCaller
from agentkit._tools import ContextTool, Tool

if TYPE_CHECKING:
    from agentkit._approval import Approval, Rejection

__all__ = ["resume_tool_loop"]

Ctx = TypeVar("Ctx")
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=None)


@overload
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    **options: Unpack[ResumeOptions[Args, Answer]],
) -> TieredLoopResult[Args, R, Answer]: ...
@overload
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, BaseModel, R],
    tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    **options: Unpack[ResumeOptions[BaseModel, Answer]],
) -> TieredLoopResult[BaseModel, R, Answer]: ...
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Any, R],
    tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    **options: Unpack[ResumeOptions[Any, Any]],
) -> TieredLoopResult[Any, R, Any]:
    """Continue the run `checkpoint` records, with a decision for each of its pending proposals.

    Args:
        caller: The structured-call seam.
        agent: The executor (the same one, or one that renders the same way).
        tools: The run's tool set: the same names, in the same order, at the same tiers.
        ctx: The caller's data for `agent.render`, and for the tools that take the run's ctx (the approved calls
            included).
        checkpoint: `result.checkpoint` of a run that stopped at a proposal (perhaps reloaded
            with `RunCheckpoint.model_validate_json`).
        decisions: One `Approval` or `Rejection` per pending proposal.
        **options: `run_tool_loop_tiered`'s, given again, and `summarize=` (`ResumeOptions`): a
            function cannot be stored in the checkpoint (its `module.qualname` is), so `same=` and
            `summarize=` are required exactly when the run had one, and of the same name; nor can a
            type, so `answer=` is the run's answer type again.

    Returns:
        The continued run's result, under the same run id: `rounds` and `usage` count the whole
        run, `items` every item gathered (the approved calls' batches included), `trace` and
        `proposed` this leg's rounds and proposals, `checkpoint` the state to resume from again.

    Raises:
        ResumeRefused: the checkpoint is altered or of another version, or finished; the tool set
            differs from the checkpoint's; a decision is for a proposal the checkpoint does not hold,
            is one of two for the same proposal, or is an approval already spent; or a pending
            proposal has no decision; `same` or `summarize` is missing, unexpected, or another
            function than the run's. Nothing ran.
        UsageError: a tool whose items cannot round-trip through JSON.
    """
    loop = ToolLoop._wired(caller, agent, tools, None, options, grants=options.get("grants"))
    summarize = options.get("summarize")
    result: TieredLoopResult[Any, R, Any] = await loop.resume(ctx, checkpoint, decisions, summarize=summarize)
    return result
