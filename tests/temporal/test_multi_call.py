"""Steps of several calls on Temporal: each call an activity of its own (a local one for a live READ_ONLY read),
run concurrently; a gated call of the step waits for its approval and then runs once; the history replays."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentkit.temporal import RunStatus
from tests.temporal.agents import DONE, Brief, Doc, until
from tests.temporal.support import TemporalTest, local_activities, scheduled

pytestmark = pytest.mark.slow


def calls(*made: dict[str, Any]) -> dict[str, Any]:
    """The model's step making several calls at once."""
    return {"done": False, "calls": list(made), "rationale": "several at once"}


def named(tool: str, **args: str) -> dict[str, Any]:
    return {"tool": tool, "args": args}


async def test_a_steps_calls_are_an_activity_each_and_its_gated_call_runs_once_approved(temporal: TemporalTest) -> None:
    """A search, a note and a send in one step: the search a local activity, the note an activity task, the send a
    proposal; approved, the send runs once, as an activity with one attempt. Both legs replay."""
    step = calls(named("search", query="a"), named("note", to="ann", text="x"), named("send", to="bob", text="hi"))
    temporal.fake.add(step, DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.gather, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        assert sorted(temporal.tool_log()) == ["note ann x", "search a"]
        await handle.approve(proposal, by="alice")
        result = await handle.result()
    assert result.items == [Doc(id="doc:a"), Doc(id="note:ann"), Doc(id="sent:bob")]
    assert sorted(temporal.tool_log()) == ["note ann x", "search a", "send bob hi"]
    legs = await temporal.legs(handle.run_id)
    assert [scheduled(leg) for leg in legs] == [["agentkit.tool_call"], ["agentkit.tool_call"]]
    assert local_activities(legs[0]) == 1 + 1 + 1  # the recorded tool set, the model call, the search
    await temporal.replay(*legs)


async def test_a_steps_reads_run_at_the_same_time(temporal: TemporalTest) -> None:
    """Two searches of one step that each wait until both are held finish: they run at once, not one by one."""
    temporal.fake.add(calls(named("search", query="barrier:1"), named("search", query="barrier:2")), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.gather, Brief(topic="t"))
        result = await asyncio.wait_for(handle.result(), timeout=120)
    assert result.items == [Doc(id="doc:barrier:1"), Doc(id="doc:barrier:2")]
    await temporal.replay(*(await temporal.legs(handle.run_id)))


async def test_two_gated_calls_of_a_step_are_two_proposals_each_decided_on_its_own(temporal: TemporalTest) -> None:
    """A step that proposes two sends waits on both; each takes its own decision (bound to its digest): the amended
    approval of one runs that one, amended, and the rejection of the other runs nothing. Both legs replay."""
    step = calls(named("search", query="a"), named("send", to="bob", text="hi"), named("send", to="ann", text="yo"))
    temporal.fake.add(step, DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.gather, Brief(topic="t"))
        pending = (await until(handle, RunStatus.WAITING)).pending
        assert sorted(str(p.args["to"]) for p in pending) == ["ann", "bob"]
        bob = next(p for p in pending if p.args["to"] == "bob")
        ann = next(p for p in pending if p.args["to"] == "ann")
        state = await handle.approve(bob, by="alice", args={"text": "amended"})
        assert [p.args["to"] for p in state.pending] == ["ann"]  # still waiting: ann is not decided
        await handle.reject(ann, by="alice", reason="not ann")
        result = await handle.result()
    assert sorted(temporal.tool_log()) == ["search a", "send bob amended"]
    assert Doc(id="sent:bob") in result.items
    await temporal.replay(*(await temporal.legs(handle.run_id)))
