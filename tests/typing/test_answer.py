"""assert_type checks for the typed final answer: ``answer=Schema`` on every tool loop (mypy and pyright)."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import (
    Cites,
    LoopConfig,
    RunCheckpoint,
    TieredLoopResult,
    ToolLoopResult,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_sync,
    run_tool_loop_tiered,
)
from agentkit.events import iter_tool_loop, iter_tool_loop_tiered
from agentkit.testing import ScriptedCaller, done_step
from tests.typing.models import DeleteArgs, Doc, Finder, delete, fetch, search


class Verdict(BaseModel):
    text: str


async def plain() -> None:
    result = await run_tool_loop(ScriptedCaller(), Finder(), search, "q", answer=Verdict)
    assert_type(result, ToolLoopResult[Doc, Verdict])
    assert_type(result.answer, Verdict | None)
    assert_type(result.answer_from_closing_round, bool)
    assert_type(result.items, list[Doc])
    if result.answer is not None:
        assert_type(result.answer.text, str)


class Grounded(BaseModel):
    source: Cites[Doc]
    also: list[Cites[Doc]]
    text: str


async def cited() -> None:
    result = await run_tool_loop(ScriptedCaller(), Finder(), search, "q", LoopConfig(min_calls=1), answer=Grounded)
    assert_type(result.cited(), list[Doc])
    if result.answer is not None:
        assert_type(result.answer.source, str)  # a citation is the id
        assert_type(result.answer.also, list[str])
    Grounded(source="doc-1", also=[], text="built by hand, as a test would")


async def without_an_answer_schema() -> None:
    result = await run_tool_loop(ScriptedCaller(), Finder(), search, "q")
    # No answer=: the result is ToolLoopResult[Doc], as it always was (the answer type defaults to None).
    assert_type(result, ToolLoopResult[Doc])
    assert_type(result.answer, None)
    kept: ToolLoopResult[Doc] = result
    assert_type(kept, ToolLoopResult[Doc, None])


async def tiered() -> None:
    one = await run_tool_loop_tiered(ScriptedCaller(), Finder(), delete, "q", answer=Verdict)
    assert_type(one, TieredLoopResult[DeleteArgs, Doc, Verdict])
    assert_type(one.answer, Verdict | None)
    several = await run_tool_loop_tiered(ScriptedCaller(), Finder(), [search, fetch, delete], "q", answer=Verdict)
    assert_type(several, TieredLoopResult[BaseModel, Doc, Verdict])
    unanswered = await run_tool_loop_tiered(ScriptedCaller(), Finder(), delete, "q")
    assert_type(unanswered, TieredLoopResult[DeleteArgs, Doc])


async def resumed(checkpoint: RunCheckpoint) -> None:
    result = await resume_tool_loop(ScriptedCaller(), Finder(), delete, "q", checkpoint, [], answer=Verdict)
    assert_type(result.answer, Verdict | None)


def sync() -> None:
    result = run_tool_loop_sync(
        ScriptedCaller(), Finder(), search, "q", LoopConfig(closing_round=False), answer=Verdict
    )
    assert_type(result.answer, Verdict | None)
    assert_type(done_step(answer=Verdict(text="x")), dict[str, Any])


async def streamed() -> None:
    async with iter_tool_loop(ScriptedCaller(), Finder(), search, "q", answer=Verdict) as run:
        async for _ in run:
            pass
    assert_type(run.result.answer, Verdict | None)
    async with iter_tool_loop_tiered(ScriptedCaller(), Finder(), delete, "q", answer=Verdict) as tiered_run:
        pass
    assert_type(tiered_run.result, TieredLoopResult[DeleteArgs, Doc, Verdict])
