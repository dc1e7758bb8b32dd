"""Crash recovery: a run killed with SIGKILL mid-round resumes from its last completed round, on both backends.

The run is a real process (``multiprocessing``, spawn) talking to the fake OpenAI server over
loopback HTTP; the kill is a real SIGKILL. Model calls are counted server-side (the rounds each
request shows) and tool calls tool-side (a log each call appends to).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentkit import Prompt, RoleSpec, StopReason, Tier, Tool, ToolRoundInfo, run_tool_loop, run_tool_loop_tiered, tool
from agentkit.journal import Journal, JournalObserver, RunStatus, open_journal
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer
from tests.support import Query

SPAWN = multiprocessing.get_context("spawn")

pytestmark = pytest.mark.slow


class Reader:
    def role(self) -> RoleSpec:
        return RoleSpec(model="reader")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="read", dynamic=f"{ctx}: round {info.round}, {len(info.prior_calls)} calls so far")


def append(log: str, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def crash_tools(log: str, *, dying: JournalObserver | None = None) -> list[Tool[Any, str]]:
    """The run's tools; with ``dying``, ``inspect`` waits until the journal has everything, then hangs to be killed."""

    @tool(tier=Tier.READ_ONLY)
    def search(args: Query) -> list[str]:
        """Find documents."""
        append(log, f"search {args.query}")
        return [f"doc:{args.query}"]

    @tool(tier=Tier.READ_ONLY)
    def inspect(args: Query) -> list[str]:
        """Inspect a host."""
        append(log, f"inspect {args.query}")
        if dying is not None:
            assert dying.flush(timeout=60)
            append(log, "hanging")
            time.sleep(120)
        return [f"host:{args.query}"]

    return [search, inspect]


def crashing_run(url: str, base_url: str, log: str, plain: bool = False) -> None:
    """Search twice, then hang in round 3's tool, to be killed there (``plain``: in ``run_tool_loop``)."""
    observer = JournalObserver(open_journal(url, create=False), lease=timedelta(seconds=1))
    caller = OpenAICaller(base_url=base_url, api_key="test")
    tools = crash_tools(log, dying=observer)
    loop = run_tool_loop if plain else run_tool_loop_tiered
    asyncio.run(loop(caller, Reader(), tools, "hosts", observer=observer))


def step(tool: str, query: str) -> dict[str, Any]:
    return {"rationale": f"{tool} {query}", "done": False, "call": {"tool": tool, "args": {"query": query}}}


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def rounds_asked(server: FakeOpenAIServer) -> list[int]:
    """The round each request the server received was for, read from its prompt."""
    asked = []
    for request in server.requests:
        text = " ".join(str(m.get("content")) for m in request.get("messages", []))
        found = re.search(r"round (\d+),", text)
        assert found is not None, text
        asked.append(int(found.group(1)))
    return asked


@pytest.mark.parametrize("loop", ["tiered", "plain"])
async def test_a_run_killed_mid_round_resumes_from_its_last_completed_round(
    journal: Journal, journal_url: str, tmp_path: Path, loop: str
) -> None:
    """SIGKILL in round 3's tool: no completed model call is asked again, no executed tool call runs again; a
    plain ``run_tool_loop`` recorded by a journal recovers as a tiered one does."""
    log = tmp_path / "tools.log"
    script = [step("search", "a"), step("search", "b"), step("inspect", "db"), step("inspect", "db")]
    with FakeOpenAIServer([*script, {"rationale": "enough", "done": True, "call": None}]) as server:
        child = SPAWN.Process(target=crashing_run, args=(journal_url, server.base_url, str(log), loop == "plain"))
        child.start()
        deadline = time.monotonic() + 60
        while "hanging" not in lines(log):
            assert child.is_alive(), f"the run exited ({child.exitcode}) before it hung"
            assert time.monotonic() < deadline, "the run never reached round 3's tool"
            await asyncio.sleep(0.02)
        child.kill()
        child.join(timeout=30)

        reopened = open_journal(journal_url, create=False)
        try:
            [run] = await reopened.runs()
            assert (run.resumable, run.checkpoint_round) == (True, 2)
            while (await reopened.run(run.id)).status is RunStatus.RUNNING:  # the dead process's lease runs out
                assert time.monotonic() < deadline + 30
                await asyncio.sleep(0.05)
            assert (await reopened.run(run.id)).status is RunStatus.CRASHED
            caller = OpenAICaller(base_url=server.base_url, api_key="test")
            result = await reopened.resume(run.id, caller, Reader(), crash_tools(str(log)), "hosts")
            finished = await reopened.run(run.id)
            journaled_rounds = [r.round for r in await reopened.rounds(run.id)]
        finally:
            await reopened.close()
        server.assert_complete()

    asked = rounds_asked(server)
    assert asked == [1, 2, 3, 3, 4]  # round 3 never completed, so it alone is asked again
    assert Counter(asked)[1] == Counter(asked)[2] == 1
    assert lines(log) == ["search a", "search b", "inspect db", "hanging", "inspect db"]
    assert (result.run_id, result.rounds, result.stop_reason) == (run.id, 4, StopReason.EXECUTOR_DONE)
    assert result.items == ["doc:a", "doc:b", "host:db"]
    assert (finished.status, finished.stop_reason) == (RunStatus.FINISHED, StopReason.EXECUTOR_DONE)
    assert journaled_rounds == [1, 2, 3, 4]
