"""Blocking tools run in agentkit's own bounded threads: stuck ones starve nothing else, and a full set is an error."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Prompt, RoleSpec, StopReason, Tier, ToolRoundInfo, _tool_threads, tool
from agentkit._loops import run_tool_loop_sync
from agentkit._tools import FunctionTool
from agentkit.errors import ToolError, ToolTimeout
from agentkit.journal import Journal
from agentkit.testing import ScriptedCaller, call_step


class Wait(BaseModel):
    label: str


def blocking_tool(gate: threading.Event) -> FunctionTool[Wait, str]:
    """A blocking tool that returns only once ``gate`` is set (as a hung socket read would)."""

    @tool(tier=Tier.READ_ONLY, in_thread=True, name="stuck")
    def stuck(args: Wait) -> list[str]:
        gate.wait(timeout=60)
        return [args.label]

    return stuck


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Set at the end of the test, so every stuck thread returns."""
    event = threading.Event()
    yield event
    event.set()
    for thread in threading.enumerate():
        if thread.name == "agentkit-tool-stuck":
            thread.join(timeout=30)


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> _tool_threads.ToolThreads:
    """The process's blocking-tool threads, shrunk to two for the test."""
    threads = _tool_threads.ToolThreads(2)
    monkeypatch.setattr(_tool_threads, "_threads", threads)
    return threads


async def time_out(stuck: FunctionTool[Wait, str], label: str) -> None:
    """Call the tool and give up on it at once, as a tool timeout does; its thread stays busy."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(stuck.call(Wait(label=label)), 0.01)


async def test_timed_out_blocking_tools_never_starve_the_journal(journal: Journal, gate: threading.Event) -> None:
    """Six stuck, timed-out blocking tools hold none of the default executor's six threads: the journal answers."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(6))
    stuck = blocking_tool(gate)
    for n in range(6):
        await time_out(stuck, f"call {n}")
    # Before, each stuck tool held a default-executor thread, and both of these waited forever.
    assert await asyncio.wait_for(journal.pending(), 30) == []
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 30) == "free"


async def test_a_full_set_of_abandoned_tool_threads_is_a_clear_error(
    two_threads: _tool_threads.ToolThreads, gate: threading.Event
) -> None:
    """With every thread held by a call that timed out, a new call fails at once, naming the cause; nothing hangs."""
    stuck = blocking_tool(gate)
    await time_out(stuck, "a")
    await time_out(stuck, "b")
    with pytest.raises(ToolError, match="all 2 threads for blocking tools") as refused:
        await asyncio.wait_for(stuck.call(Wait(label="c")), 30)
    assert refused.value.tool_name == "stuck"
    gate.set()
    for thread in threading.enumerate():
        if thread.name == "agentkit-tool-stuck":
            thread.join(timeout=30)
    assert await asyncio.wait_for(stuck.call(Wait(label="d")), 30) == ["d"]  # freed threads are used again


async def test_a_call_waits_for_a_busy_tool_thread(
    two_threads: _tool_threads.ToolThreads, gate: threading.Event
) -> None:
    """While the threads are busy with calls still awaited, a further call waits its turn instead of failing."""
    stuck = blocking_tool(gate)
    calls = [asyncio.create_task(stuck.call(Wait(label=label))) for label in "abc"]
    for _ in range(20):
        await asyncio.sleep(0)
    assert not any(call.done() for call in calls)
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(*calls), 30) == [["a"], ["b"], ["c"]]


async def test_a_cancelled_wait_for_a_thread_passes_its_turn_on(
    two_threads: _tool_threads.ToolThreads, gate: threading.Event
) -> None:
    """A call cancelled while it waited for a thread neither runs nor keeps the next waiter from running."""
    stuck = blocking_tool(gate)
    running = [asyncio.create_task(stuck.call(Wait(label=label))) for label in "ab"]
    waiting = asyncio.create_task(stuck.call(Wait(label="cancelled")))
    last = asyncio.create_task(stuck.call(Wait(label="last")))
    for _ in range(20):
        await asyncio.sleep(0)
    waiting.cancel()
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(*running, last), 30) == [["a"], ["b"], ["last"]]
    assert waiting.cancelled()


class Quiet:
    """An executor that renders nothing interesting."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: None, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="s", dynamic="d")


def test_the_sync_loop_returns_while_a_timed_out_tool_thread_still_runs(gate: threading.Event) -> None:
    """``asyncio.run`` no longer waits for a stuck blocking tool: the TOOL_ERROR result comes back while it hangs."""

    @tool(tier=Tier.READ_ONLY, in_thread=True, name="stuck")
    def stuck(args: Wait) -> list[str]:
        gate.wait(timeout=10)
        return []

    caller = ScriptedCaller([call_step(Wait(label="x"))])
    result = run_tool_loop_sync(caller, Quiet(), stuck, None, LoopConfig(tool_timeout=0.05))
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolTimeout)
    # Before, the default executor held the thread and asyncio.run waited for it to return.
    assert any(t.name == "agentkit-tool-stuck" and t.is_alive() for t in threading.enumerate())
