"""assert_type checks for bounded context: ContextWindow, Omitted, summarizers and resume (mypy only).

A ``# type: ignore[code]`` here is a negative check: ``warn_unused_ignores`` fails the run if mypy
stops reporting that error.
"""

from __future__ import annotations

from typing import Any, assert_type

from agentkit import (
    ContextWindow,
    LoopConfig,
    PriorCall,
    RunCheckpoint,
    TieredLoopResult,
    ToolRoundInfo,
    resume_tool_loop,
)
from agentkit._context import Omitted, Summarizer, call_chars
from agentkit._state import CheckpointContext
from agentkit.testing import ScriptedCaller
from tests.typing.models import Doc, Planner, SearchArgs, search


def folding(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
    return (summary or "") + str(len(calls))


async def afolding(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
    return folding(summary, calls)


def wrong(calls: list[str]) -> str:
    return ""


def windows() -> None:
    window = ContextWindow(last=3, max_chars=8_000, max_tokens=2_000, chars_per_token=3.5, summarize=folding)
    assert_type(window.last, int | None)
    assert_type(window.max_chars, int | None)
    assert_type(window.max_tokens, int | None)
    assert_type(window.chars_per_token, float)
    assert_type(window.summarize, Summarizer | None)
    assert_type(window.char_limit, float | None)
    assert_type(ContextWindow(last=2, summarize=afolding), ContextWindow)
    assert_type(ContextWindow(last=2, summarize=lambda summary, calls: f"{summary}{len(calls)}"), ContextWindow)
    ContextWindow(last=2, summarize=wrong)  # type: ignore[arg-type]  # a summarizer takes (summary, calls)
    ContextWindow(last="3")  # type: ignore[arg-type]  # a count, not text
    config = LoopConfig(context=window)
    assert_type(config.context, ContextWindow | None)
    assert_type(CheckpointContext.of(window).rebuild(folding), ContextWindow)


def omitted(info: ToolRoundInfo[Doc], call: PriorCall[Doc]) -> None:
    assert_type(info.omitted, Omitted)
    assert_type(info.omitted.calls, int)
    assert_type(info.omitted.batches, int)
    assert_type(info.omitted.items, int)
    assert_type(info.omitted.chars, int)
    assert_type(info.omitted.summary, str | None)
    assert_type(call_chars(call), int)


async def resuming(checkpoint: RunCheckpoint) -> None:
    result = await resume_tool_loop(ScriptedCaller(), Planner(), search, "ctx", checkpoint, [], summarize=folding)
    assert_type(result, TieredLoopResult[SearchArgs, Doc])
    assert_type(checkpoint.progress.summary, str | None)
    assert_type(checkpoint.progress.summarized, int)
    await resume_tool_loop(ScriptedCaller(), Planner(), search, "ctx", checkpoint, [], summarize=wrong)  # type: ignore[call-overload]  # not a summarizer
