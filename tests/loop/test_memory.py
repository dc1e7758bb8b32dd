"""Memory stays flat when tools are defined per request (a new args type and tool name every run)."""

from __future__ import annotations

import gc
import sys
import tracemalloc
import weakref
from typing import Any, Literal

import pytest
from pydantic import BaseModel, create_model

from agentkit import AfterProposal, LoopConfig, Tier, _cache, run_tool_loop, run_tool_loop_tiered
from agentkit._tools import FunctionTool
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Executor

pytestmark = pytest.mark.slow

RUNS = 4_000
MARKS = 5
BLOCKS_PER_RUN = 20
"""Allocated blocks a run may leave behind after warm-up (a run whose tools stay alive leaves about 420)."""


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


async def test_memory_stays_flat_over_runs_with_tools_made_per_run() -> None:
    """After warm-up, 4,000 runs that each define new tools leave the heap where it was (bounded caches)."""
    for index in range(600):  # fills every bounded cache
        await one_run(index)
    gc.collect()
    marks: list[int] = []
    per_mark = RUNS // MARKS
    for mark in range(MARKS):
        for index in range(per_mark):
            await one_run(600 + mark * per_mark + index)
        gc.collect()
        marks.append(sys.getallocatedblocks())
    # Every cache is bounded; by the first mark the largest of them is full. From there on the heap must
    # stay where it is. The measure is the interpreter's count of its allocated blocks, which needs no
    # tracing (tracemalloc made this test five times slower): a run whose tools stayed alive left about
    # 420 blocks behind here, unbounded caches 21-43 KB a run, while between marks the count moves by a
    # few hundred blocks in all.
    growth = marks[-1] - marks[1]
    runs = per_mark * (MARKS - 2)
    assert growth < BLOCKS_PER_RUN * runs, f"the heap grew by {growth} blocks over the last {runs} runs: {marks}"


WARM_UP = 1_100
"""Runs before measuring: more than any cache's bound, so every bounded cache is full."""
MEASURED = 1_000
PER_RUN = 2_000
"""Bytes a run may leave behind after warm-up."""
Made = Literal["args type", "args type and tool name", "tool name"]
READ_ARGS = create_model("ReadArgs", path=(str, ...))
"""The one args type of the "tool name" case, defined once like any module-level model."""


async def served(index: int, made: Made, types: list[weakref.ref[type[BaseModel]]]) -> None:
    """One request of a service that builds its tool per request: the files this user may read as a
    ``Literal`` (a new args type), a tool named for the tenant (a new name), or both."""
    args_type: type[BaseModel] = READ_ARGS
    if made != "tool name":
        files: Any = Literal[tuple(f"/u{index}/f{n}" for n in range(3))]
        args_type = create_model("ReadArgs", path=(files, ...))
        types.append(weakref.ref(args_type))

    async def read(args: BaseModel) -> list[str]:
        return ["contents"]

    name = "read" if made == "args type" else f"read_t{index}"
    tool = FunctionTool(name=name, description="d", args_type=args_type, tier=Tier.READ_ONLY, fn=read)
    args = args_type(path=f"/u{index}/f0")
    script = [call_step(args) if made == "args type" else call_step(args, tool=name), done_step()]
    tools: Any = tool if made == "args type" else [tool]
    result = await run_tool_loop(ScriptedCaller(script), Executor[str](), tools, "ctx", LoopConfig())
    assert result.items == ["contents"]


@pytest.mark.parametrize("made", ["args type", "args type and tool name", "tool name"])
async def test_tools_made_per_request_leave_under_2_kb_a_run_after_warm_up(made: Made) -> None:
    """After 1,100 runs, 1,000 more that each make their tool leave under 2 KB a run on the traced heap, and
    nothing keeps their args types alive (the step models built from them go with them)."""
    types: list[weakref.ref[type[BaseModel]]] = []
    for index in range(WARM_UP):
        await served(index, made, types)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(WARM_UP, WARM_UP + MEASURED):
            await served(index, made, types)
        gc.collect()
        retained = (tracemalloc.get_traced_memory()[0] - before) / MEASURED
    finally:
        tracemalloc.stop()
    # Bounded caches of per-request step models kept 8-23 KB a run here: what they evicted had been
    # allocated before tracing began, what replaced it was traced.
    assert retained < PER_RUN, f"{retained:.0f} bytes a run retained"
    assert sum(ref() is not None for ref in types) == 0
    kept = READ_ARGS.__dict__.get("__agentkit_kept__", {})
    assert len(kept) <= _cache.KEPT_PER_OWNER
    assert len(_cache._shared) <= _cache.SHARED_SIZE
