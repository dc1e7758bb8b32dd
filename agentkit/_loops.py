"""`run_tool_loop` and `run_tool_loop_tiered`: the bounded tool loop, plain and tier-gated.

Both are a `ToolLoop` used once (one loop body, `agentkit._loop.run_core`); they differ only in
what they accept and in the result they return.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar
from typing_extensions import Unpack

from agentkit._agent import ToolAgent
from agentkit._config import LoopConfig
from agentkit._observe import Observer, observers_of
from agentkit._options import LoopOptions, RunOptions
from agentkit._results import TieredLoopResult, ToolLoopResult
from agentkit._runner import ToolLoop
from agentkit._structured import StructuredCaller
from agentkit._tools import ContextTool, Tool

if TYPE_CHECKING:
    from agentkit._stream import RunStream

__all__ = ["iter_tool_loop", "iter_tool_loop_tiered", "run_tool_loop", "run_tool_loop_sync", "run_tool_loop_tiered"]

Ctx = TypeVar("Ctx")
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=None)


async def run_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tool: Tool[Args, R] | ContextTool[Args, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[RunOptions[Args, Answer]],
) -> ToolLoopResult[R, Answer]:
    """Run the bounded tool loop with tools that may all run live.

    Each round the executor renders a prompt and emits one validated `ToolStep`; the loop stops
    on `done`, the round ceiling, a repeated call, a budget, a deadline or an error, and always
    returns a result whose `items` hold every batch gathered.

    Args:
        caller: The structured-call seam (`OpenAICaller`, `ScriptedCaller`, ...).
        agent: The executor.
        tool: One tool, or a sequence of tools (the step then names the tool it calls).
        ctx: The caller's data for `agent.render`, and the very object each tool that takes the
            run's ctx is called with.
        config: Ceilings and policies; `LoopConfig()` when omitted.
        **options: `same=`, `observer=` and `answer=`, each described in `agentkit._options.RunOptions`
            (where every loop entry point's options are written once).

    Raises:
        UsageError: a tool that could not run live under `config.autonomy` (use
            `run_tool_loop_tiered`), bad tool names, or another wiring mistake. Raised before
            any model call.
    """
    loop = ToolLoop._wired(caller, agent, tool, config, options, may_propose=False)
    result = await loop.run(ctx)
    return ToolLoopResult(
        items=result.items,
        rounds=result.rounds,
        outcome=result.outcome,
        stop_reason=result.stop_reason,
        error=result.error,
        usage=result.usage,
        trace=result.trace,
        run_id=result.run_id,
        answer=result.answer,
        answer_from_closing_round=result.answer_from_closing_round,
        checkpoint=result.checkpoint,
        provenance=result.provenance,
    )


@overload
async def run_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[Args, Answer]],
) -> TieredLoopResult[Args, R, Answer]: ...
@overload
async def run_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, BaseModel, R],
    tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[BaseModel, Answer]],
) -> TieredLoopResult[BaseModel, R, Answer]: ...
async def run_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Any, R],
    tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[Any, Any]],
) -> TieredLoopResult[Any, R, Any]:
    """Run the tool loop with tier gating: calls above the autonomy ceiling become proposals.

    A call runs live only when its tool's tier is at or below `config.autonomy` **and**
    `max_rung_for(tier)` is `AUTO`; external-reversible and irreversible calls never run. A
    gated call becomes a `ProposedAction` and, by default, the run stops (APPLIED, PROPOSED).
    A tool with no tier is never called: the run ends ERROR, TOOL_DECLARES_NO_TIER. `answer`
    works as in `run_tool_loop`.

    `result.checkpoint` holds the run's state; a run stopped at a proposal continues from it with
    `resume_tool_loop`. So where the run may stop at a proposal (`after_proposal` is `STOP`
    and a tool's tier is above what runs live), every tool's items must round-trip through JSON.

    `grants` (an `agentkit.decisions.Grants`): a proposal a live grant matches is approved by it
    (recorded as `grant:<id>`, one use counted) and runs once, in the round that proposed it; the
    executor sees its result. A call no live grant matches is proposed as usual.

    Raises:
        UsageError: bad tool names or another wiring mistake; a grant that constrains a field its
            tool's args type lacks, or grants an irreversible tool without `allow_irreversible`;
            where the run may stop at a proposal, a tool whose item type is undeclared or cannot
            round-trip through JSON (naming the tool and the type). Raised before any model call.
    """
    return await ToolLoop(caller, agent, tools, config, **options).run(ctx)


def run_tool_loop_sync(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tool: Tool[Args, R] | ContextTool[Args, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[RunOptions[Args, Answer]],
) -> ToolLoopResult[R, Answer]:
    """`run_tool_loop` for scripts: runs it to completion in a new event loop."""
    import asyncio  # kept off `import agentkit`

    return asyncio.run(run_tool_loop(caller, agent, tool, ctx, config, **options))


def iter_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tool: Tool[Args, R] | ContextTool[Args, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[RunOptions[Args, Answer]],
) -> RunStream[ToolLoopResult[R, Answer]]:
    """`run_tool_loop` as a stream of events; takes the same arguments.

    Example:
        >>> async with iter_tool_loop(caller, agent, search, ctx) as run:
        ...     async for event in run:
        ...         print(event.kind)
        >>> run.result.items
    """
    from agentkit._stream import RunStream  # kept off `import agentkit`: it needs asyncio

    observers = observers_of(options.get("observer"))

    def start(feed: Observer) -> Coroutine[Any, Any, ToolLoopResult[R, Answer]]:
        fed: RunOptions[Args, Answer] = {**options, "observer": (*observers, feed)}
        return run_tool_loop(caller, agent, tool, ctx, config, **fed)

    return RunStream(start)


@overload
def iter_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[Args, Answer]],
) -> RunStream[TieredLoopResult[Args, R, Answer]]: ...
@overload
def iter_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, BaseModel, R],
    tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[BaseModel, Answer]],
) -> RunStream[TieredLoopResult[BaseModel, R, Answer]]: ...
def iter_tool_loop_tiered(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Any, R],
    tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    config: LoopConfig | None = None,
    **options: Unpack[LoopOptions[Any, Any]],
) -> RunStream[TieredLoopResult[Any, R, Any]]:
    """`run_tool_loop_tiered` as a stream of events; takes the same arguments."""
    from agentkit._stream import RunStream  # kept off `import agentkit`: it needs asyncio

    observers = observers_of(options.get("observer"))

    def start(feed: Observer) -> Coroutine[Any, Any, TieredLoopResult[Any, R, Any]]:
        fed: LoopOptions[Any, Any] = {**options, "observer": (*observers, feed)}
        return run_tool_loop_tiered(caller, agent, tools, ctx, config, **fed)

    return RunStream(start)
