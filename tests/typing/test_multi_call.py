"""assert_type checks for several calls in one step (``LoopConfig.max_calls_per_step``; mypy and basedpyright)."""

from __future__ import annotations

from typing import Any, assert_type

from agentkit import LoopConfig, ToolLoopResult, ToolStep, run_tool_loop
from agentkit.prompting import worked_example
from agentkit.testing import ScriptedCaller, call_step, calls_step, done_step
from tests.typing.models import Doc, Finder, SearchArgs, search


async def check(step: ToolStep[SearchArgs]) -> None:
    config = LoopConfig(max_calls_per_step=3, max_parallel_calls=2)
    assert_type(config.max_calls_per_step, int)
    assert_type(config.max_parallel_calls, int | None)
    assert_type(step.step_calls(), tuple[SearchArgs, ...])
    several = calls_step(call_step(SearchArgs(query="a")), call_step(SearchArgs(query="b")))
    assert_type(several, dict[str, Any])
    calls_step(SearchArgs(query="a"))  # type: ignore[arg-type]  # each call is a call_step(...)
    caller = ScriptedCaller([several, done_step()])
    assert_type(await run_tool_loop(caller, Finder(), search, "ctx", config), ToolLoopResult[Doc])
    example = worked_example("q", [SearchArgs(query="a"), SearchArgs(query="b")], [["x"], ["y"]])
    assert_type(example, str)
