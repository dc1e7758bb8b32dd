"""The event stream: the same events as the hooks, the result, cancellation and errors."""

from __future__ import annotations

import asyncio

import pytest

from agentkit import (
    FunctionTool,
    LoopConfig,
    Observer,
    Outcome,
    StopReason,
    Tier,
    TieredLoopResult,
    ToolLoopResult,
    UsageError,
    tool,
)
from agentkit.events import (
    Event,
    RoundStarted,
    RunFinished,
    RunStream,
    ToolCallStarted,
    iter_tool_loop,
    iter_tool_loop_tiered,
)
from agentkit.testing import ScriptedCaller, ScriptExhausted, call_step, done_step
from tests.support import NO_WAIT, Doc, Finder, Query, Recorder, delete, search

CONFIG = LoopConfig(retry=NO_WAIT)


async def test_stream_yields_exactly_the_hook_sequence() -> None:
    """The events streamed are the very events the hooks received, in the same order."""
    recorder = Recorder()
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b")), done_step()])
    streamed: list[Event] = []
    async with iter_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=recorder) as run:
        async for event in run:
            streamed.append(event)
    assert streamed == recorder.events
    assert all(a is b for a, b in zip(streamed, recorder.events, strict=True))
    assert [event.kind for event in streamed][-1] == "run_end"
    assert len(streamed) == 12


async def test_stream_exposes_the_loop_result() -> None:
    """After the last event, ``result`` is what run_tool_loop returns, for the same run."""
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    async with iter_tool_loop(caller, Finder(), search, "ctx", CONFIG) as run:
        events = [event async for event in run]
    result = run.result
    assert type(result) is ToolLoopResult
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 2)
    assert result.items == [Doc(id="a1"), Doc(id="a2")]
    final = events[-1]
    assert isinstance(final, RunFinished)
    assert final.result.run_id == result.run_id
    assert run.done


async def test_tiered_stream_carries_the_proposals() -> None:
    """The tiered stream reports the proposal and its result holds it."""
    caller = ScriptedCaller([call_step(Query(query="old"), tool="delete")])
    async with iter_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", CONFIG) as run:
        kinds = [event.kind async for event in run]
    assert kinds == ["run_start", "round_start", "llm_call", "proposal", "run_end"]
    assert isinstance(run.result, TieredLoopResult)
    assert [proposal.tool_name for proposal in run.result.proposed] == ["delete"]
    assert run.result.stop_reason is StopReason.PROPOSED


async def test_wait_returns_the_result_without_iterating() -> None:
    """``await run.wait()`` finishes the run without reading its events."""
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    async with iter_tool_loop(caller, Finder(), search, "ctx", CONFIG) as run:
        result = await run.wait()
    assert result.items == [Doc(id="a1"), Doc(id="a2")]
    assert run.result is result


def hanging() -> tuple[asyncio.Event, asyncio.Event, FunctionTool[Query, Doc]]:
    """A tool that blocks until cancelled: the events it sets once entered and once cancelled, and the tool."""
    entered, cancelled = asyncio.Event(), asyncio.Event()

    @tool(tier=Tier.READ_ONLY)
    async def hang(args: Query) -> list[Doc]:
        """Blocks until cancelled."""
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return []

    return entered, cancelled, hang


async def test_leaving_early_cancels_the_run() -> None:
    """Breaking out of the stream cancels the run inside its tool call; no further model call is made."""
    entered, cancelled, hang = hanging()

    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    async with iter_tool_loop(caller, Finder(), hang, "ctx", CONFIG) as run:
        async for event in run:
            if isinstance(event, ToolCallStarted):
                await entered.wait()
                break
    assert cancelled.is_set()
    assert run.done
    assert len(caller.requests) == 1
    with pytest.raises(UsageError, match="cancelled"):
        _ = run.result


async def test_cancelling_the_consumer_cancels_the_run() -> None:
    """A consumer task cancelled while waiting for an event takes the run down with it."""
    entered, cancelled, hang = hanging()

    seen: list[str] = []

    async def consume() -> None:
        async with iter_tool_loop(ScriptedCaller([call_step(Query(query="a"))]), Finder(), hang, "ctx") as run:
            async for event in run:
                seen.append(event.kind)

    consumer = asyncio.create_task(consume())
    await entered.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert cancelled.is_set()
    assert seen[-1] == "tool_call"


async def kinds_of(stream: RunStream[ToolLoopResult[Doc]], kinds: list[str]) -> None:
    """Consume ``stream``, appending each event's kind to ``kinds``."""
    async with stream as run:
        async for event in run:
            kinds.append(event.kind)


async def test_a_wiring_mistake_surfaces_to_the_consumer() -> None:
    """A UsageError raised by the loop (a tool that cannot run live) is raised by the iteration."""
    caller = ScriptedCaller([call_step(Query(query="a"))])
    kinds: list[str] = []
    with pytest.raises(UsageError, match="run_tool_loop_tiered"):
        await kinds_of(iter_tool_loop(caller, Finder(), [search, delete], "ctx", CONFIG), kinds)
    assert kinds == []
    assert caller.requests == []


async def test_an_error_mid_run_follows_the_events_before_it() -> None:
    """The events before an exception are delivered, then the exception itself."""
    caller = ScriptedCaller([call_step(Query(query="a"))])
    stream = iter_tool_loop(caller, Finder(), search, "ctx", CONFIG)
    kinds: list[str] = []
    with pytest.raises(ScriptExhausted):
        await kinds_of(stream, kinds)
    assert kinds[:7] == ["run_start", "round_start", "llm_call", "tool_call", "tool_result", "round_start", "llm_call"]
    assert kinds[7:] in ([], ["run_abort"])  # run_abort once the loop core reports aborted runs
    with pytest.raises(UsageError, match="ScriptExhausted") as raised:
        _ = stream.result
    assert isinstance(raised.value.__cause__, ScriptExhausted)


async def test_an_unseen_error_is_raised_when_the_block_ends() -> None:
    """A run that raised while nobody iterated does not fail silently: leaving the block raises it."""
    started = asyncio.Event()

    class Started(Observer):
        def on_round_start(self, event: RoundStarted) -> None:
            started.set()

    async def enter_and_leave() -> None:
        async with iter_tool_loop(ScriptedCaller([]), Finder(), search, "ctx", CONFIG, observer=Started()) as run:
            await started.wait()
            assert run.done

    with pytest.raises(ScriptExhausted):
        await enter_and_leave()


async def test_iterating_without_entering_is_refused() -> None:
    """The stream must be entered first, so a run can never outlive its consumer unnoticed."""
    run = iter_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx")
    with pytest.raises(UsageError, match="async with"):
        await anext(run)
    with pytest.raises(UsageError, match="not finished"):
        _ = run.result


async def test_reading_the_result_early_is_refused() -> None:
    """``result`` before the run finished names the fix."""
    release = asyncio.Event()

    @tool(tier=Tier.READ_ONLY)
    async def gated(args: Query) -> list[Doc]:
        """Waits for the test to let it return."""
        await release.wait()
        return [Doc(id="g")]

    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    async with iter_tool_loop(caller, Finder(), gated, "ctx", CONFIG) as run:
        async for event in run:
            if event.kind == "tool_call":
                with pytest.raises(UsageError, match="iterate its events to the end"):
                    _ = run.result
                release.set()
    assert run.result.items == [Doc(id="g")]


async def test_a_stream_runs_once() -> None:
    """Entering a stream a second time is refused; each run needs its own stream."""
    stream = iter_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG)
    async with stream as run:
        await run.wait()
    with pytest.raises(UsageError, match="already run"):
        async with stream:
            pass
