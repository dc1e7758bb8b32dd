"""The seed behaviours: the closing round says why the tools stopped and asks for the gaps; the tool-start
event counts the tool's calls and carries a status label."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, RepeatPolicy, StopReason, Tier, ToolRoundInfo, run_tool_loop, tool
from agentkit._agent import PriorCall
from agentkit.events import ToolCallStarted
from agentkit.prompting import reflective_prompt
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Doc, Executor, Query, Recorder


class Verdict(BaseModel):
    text: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Search."""
    return [Doc(id=f"search:{args.query}")]


def config(**fields: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, **fields)


def _closing_prompt(executor: Executor[Doc]) -> str:
    info = executor.infos[-1]
    assert info.closing_round
    return reflective_prompt("Answer questions.", "q", info).dynamic


async def test_closing_round_says_the_round_limit_stopped_the_tools() -> None:
    """A run stopped by its round limit closes with a round whose info and instruction name the limit."""
    executor = Executor[Doc]()
    caller = ScriptedCaller([call_step(Query(query="a")), done_step(answer=Verdict(text="x"))])
    result = await run_tool_loop(caller, executor, search, "q", config(max_rounds=1), answer=Verdict)
    assert result.answer_from_closing_round
    assert executor.infos[-1].closed_by is StopReason.ROUND_CEILING
    assert executor.infos[-1].repeated is None
    assert "the round limit is reached" in _closing_prompt(executor)


async def test_closing_round_names_the_call_that_repeated() -> None:
    """A run stopped by a repeated call closes with a round that names that call and the round it repeated."""
    executor = Executor[Doc]()
    script = [call_step(Query(query="a")), call_step(Query(query="a")), done_step(answer=Verdict(text="x"))]
    result = await run_tool_loop(
        ScriptedCaller(script), executor, search, "q", config(max_rounds=5, on_repeat=RepeatPolicy.STOP), answer=Verdict
    )
    assert result.stop_reason is StopReason.DEGENERATION
    info = executor.infos[-1]
    assert info.closed_by is StopReason.DEGENERATION
    assert info.repeated is not None
    assert (info.repeated.tool_name, info.repeated.args, info.repeated.repeats) == ("search", Query(query="a"), 1)
    assert 'the call search {"query":"a"} repeated the call of round 1' in _closing_prompt(executor)


def test_closing_round_says_the_budget_stopped_the_tools() -> None:
    """A closing round after the budget ran out says so."""
    info: ToolRoundInfo[str] = ToolRoundInfo(
        round=3, max_rounds=5, is_final_round=True, closing_round=True, closed_by=StopReason.BUDGET_EXHAUSTED
    )
    assert "the budget is spent" in reflective_prompt("Answer questions.", "q", info).dynamic


def test_closing_round_asks_for_the_gaps() -> None:
    """The closing instruction asks the executor to say what the results do not establish."""
    repeated: PriorCall[str] = PriorCall(round=2, tool_name="search", args=Query(query="a"), repeats=1)
    info: ToolRoundInfo[str] = ToolRoundInfo(
        round=3,
        max_rounds=5,
        is_final_round=True,
        closing_round=True,
        closed_by=StopReason.DEGENERATION,
        repeated=repeated,
    )
    assert "do not establish (the gaps)" in reflective_prompt("Answer questions.", "q", info).dynamic


async def test_tool_call_event_counts_the_tools_calls_and_labels_them() -> None:
    """Each tool-start event carries how many calls of that tool the run has made, this one included, and a
    status label a UI can show."""
    recorder = Recorder()
    script = [call_step(Query(query=q)) for q in ("a", "b", "c")] + [done_step()]
    await run_tool_loop(ScriptedCaller(script), Executor[Doc](), search, "q", config(), observer=recorder)
    started = [event for event in recorder.events if isinstance(event, ToolCallStarted)]
    assert [(event.count, event.label) for event in started] == [
        (1, "Running search"),
        (2, "Running search (call 2)"),
        (3, "Running search (call 3)"),
    ]


async def test_a_resumed_run_counts_the_calls_of_its_earlier_legs() -> None:
    """A run resumed after a proposal numbers its tool's calls on from the calls its first leg made."""
    from agentkit import resume_tool_loop, run_tool_loop_tiered
    from agentkit._approval import reject

    tools = [search, wipe]
    first = ScriptedCaller([call_step(Query(query="a"), tool=search), call_step(Query(query="x"), tool=wipe)])
    paused = await run_tool_loop_tiered(first, Executor[Doc](), tools, "q", config())
    decision = reject(paused.proposed[0], rejected_by="reviewer", reason="not now")
    recorder = Recorder()
    again = ScriptedCaller([call_step(Query(query="b"), tool=search), done_step()])
    await resume_tool_loop(again, Executor[Doc](), tools, "q", paused.checkpoint, [decision], observer=recorder)
    started = [event for event in recorder.events if isinstance(event, ToolCallStarted)]
    assert [(event.tool_name, event.count, event.label) for event in started] == [
        ("search", 2, "Running search (call 2)")
    ]


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Query) -> list[Doc]:
    """Wipe (never runs live)."""
    raise AssertionError("an irreversible call ran")
