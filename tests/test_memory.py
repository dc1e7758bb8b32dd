"""Memory stays flat when tools are defined per request (a new args type and tool name every run)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from pydantic import BaseModel, create_model

from agentkit import AfterProposal, LoopConfig, Tier, run_tool_loop, run_tool_loop_tiered
from agentkit._tools import FunctionTool
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Executor

RUNS = 10_000
MARKS = 5


async def one_run(index: int) -> None:
    """A run whose tools are made for it alone: a fresh args model and fresh tool names."""
    args_type: type[BaseModel] = create_model(f"Args{index}", q=(str, ...))

    async def look(args: BaseModel) -> list[str]:
        return ["found"]

    search = FunctionTool(name=f"search_{index}", description="d", args_type=args_type, tier=Tier.READ_ONLY, fn=look)
    wipe = FunctionTool(name=f"wipe_{index}", description="d", args_type=args_type, tier=Tier.IRREVERSIBLE, fn=look)
    if index % 10:
        # The step model is built for every run, however short; most runs stop at once.
        calls = [call_step(args_type(q="x"))] if index % 10 == 1 else []
        await run_tool_loop(ScriptedCaller([*calls, done_step()]), Executor[str](), search, "ctx", LoopConfig())
    else:
        script = [call_step(args_type(q="x"), tool=search.name), call_step(args_type(q="y"), tool=wipe.name)]
        config = LoopConfig(after_proposal=AfterProposal.STOP)
        await run_tool_loop_tiered(ScriptedCaller([*script]), Executor[str](), [search, wipe], "ctx", config)


@pytest.mark.slow
async def test_memory_stays_flat_over_ten_thousand_runs_with_tools_made_per_run() -> None:
    """After warm-up, 10,000 runs that each define new tools leave the traced heap where it was (bounded caches)."""
    for index in range(600):  # fills every bounded cache
        await one_run(index)
    gc.collect()
    tracemalloc.start()
    try:
        marks: list[int] = []
        per_mark = RUNS // MARKS
        for mark in range(MARKS):
            for index in range(per_mark):
                await one_run(600 + mark * per_mark + index)
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # Every cache is bounded; by the first mark the largest of them is full. From there on the heap
    # must stay where it is: unbounded caches kept 21-43 KB per run (over 160 MB here).
    growth = marks[-1] - marks[1]
    runs = per_mark * (MARKS - 2)
    assert growth < 100 * runs, f"heap grew {growth} bytes over the last {runs} runs: {marks}"
