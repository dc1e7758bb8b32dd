"""assert_type checks for the test doubles of ``agentkit.testing`` (mypy and basedpyright).

A ``# type: ignore[code]`` here is a negative check: ``warn_unused_ignores`` fails the run if
mypy stops reporting that error.
"""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import RunCheckpoint, StructuredRequest, Tool, ToolLoopResult, run_tool_loop, tool_set
from agentkit._once import TextResult, run_once_text
from agentkit._structured import Completion
from agentkit._text import TextCompletion
from agentkit.journal import Journal
from agentkit.testing import (
    Answer,
    AnswerFunction,
    FunctionCaller,
    ReplayCaller,
    ReplayDiverged,
    RoundAnswerFunction,
    done_step,
)
from tests.typing.models import Doc, Finder, SearchArgs, Triager, fetch, search


def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
    return done_step()


async def answer_later(request: StructuredRequest, schema: type[BaseModel] | None) -> Answer:
    return "prose"


def wrong(request: StructuredRequest) -> str:
    return "no schema parameter"


async def check() -> None:
    caller = FunctionCaller(answer)
    assert_type(caller.function, AnswerFunction | RoundAnswerFunction)
    assert_type(caller.requests, list[StructuredRequest])
    assert_type(FunctionCaller(answer_later), FunctionCaller)
    FunctionCaller(wrong)  # type: ignore[arg-type]  # a function must take the request and the schema
    request = StructuredRequest(system="", dynamic="", model="m")
    assert_type(await caller.complete(request, SearchArgs), Completion[SearchArgs])
    assert_type(await caller.complete_text(request), TextCompletion)
    assert_type(await run_tool_loop(caller, Finder(), search, "ctx"), ToolLoopResult[Doc])
    assert_type(await run_once_text(caller, Triager(), "ctx"), TextResult)


async def replaying(journal: Journal, checkpoint: RunCheckpoint) -> None:
    replay = ReplayCaller(checkpoint, strict=False, fallback=FunctionCaller(answer))
    assert_type(replay.diverged, ReplayDiverged | None)
    assert_type(ReplayCaller.from_file("run.json"), ReplayCaller)
    assert_type(await ReplayCaller.from_journal(journal, "run-1"), ReplayCaller)
    one = replay.tools(search)
    assert_type(one, Tool[SearchArgs, Doc])
    several = replay.tools(tool_set(search, fetch))
    assert_type(several, list[Tool[Any, Doc]])
    result = await run_tool_loop(replay, Finder(), one, "ctx")
    assert_type(result, ToolLoopResult[Doc])
    assert_type(await journal.state("run-1"), RunCheckpoint)
    assert_type(await journal.fork("run-1", at_round=2), str)
    ReplayCaller("run.json")  # type: ignore[arg-type]  # a cassette is a state, or from_file
