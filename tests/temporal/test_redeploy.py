"""A waiting Temporal run picked up by a worker whose tools changed (a redeploy): the run's recorded tool
set is admitted against the worker's before anything runs, and a difference fails the run, naming it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from agentkit.temporal import RunEnded, RunStatus
from tests.temporal.agents import DONE, Brief, make_agents, step, until
from tests.temporal.support import TemporalTest

pytestmark = pytest.mark.slow

CHANGES = [
    ("retiered", "tool 'send' now declares Tier.READ_ONLY, the run had Tier.IRREVERSIBLE"),
    ("added", "tool 'count' was not in the run"),
    ("removed", "tool 'send' is missing"),
    ("egress", "tool 'send' now declares egress=True, the run had egress=False"),
]


@pytest.mark.parametrize(("redeploy", "named"), CHANGES)
async def test_waiting_run_refuses_a_worker_whose_tools_changed(
    temporal: TemporalTest, redeploy: str, named: str
) -> None:
    """A run waits on a proposed IRREVERSIBLE send; the worker is replaced by one whose tool set differs
    (send re-tiered READ_ONLY, a tool added, send removed, send declared egress). The rejection is refused
    naming the difference, the send never runs (tool-side log), no model call is made, and the run fails saying
    why, at once (not a workflow task retried forever). Waiting for it to wait raises RunEnded, and changes nothing."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
    redeployed = make_agents(temporal.fake.base_url, temporal.log, redeploy=redeploy)
    try:
        async with temporal.worker(redeployed):
            shown = await until(handle, RunStatus.REFUSED)
            with pytest.raises(RunEnded, match="is refused"):
                await handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=30))
            assert await handle.state() == shown  # waiting on it sent it nothing
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.reject(proposal, by="ops", reason="no")
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
    finally:
        await redeployed[0].caller.aclose()  # type: ignore[attr-defined]  # an OpenAICaller
    assert temporal.tool_log() == []
    assert len(temporal.fake.requests) == 1, "the redeployed worker made a model call"
    assert shown.refused is not None
    assert named in shown.refused
    assert named in str(refused.value.cause)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("ToolSetChanged", True)
    assert named in cause.message


async def test_waiting_run_goes_on_on_a_worker_with_the_same_tools(temporal: TemporalTest) -> None:
    """The same redeploy with the tool set unchanged (a new worker, tools built afresh) admits the run:
    the rejection is taken, the send never runs, and the executor finishes."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
    redeployed = make_agents(temporal.fake.base_url, temporal.log)
    try:
        async with temporal.worker(redeployed):
            await handle.reject(proposal, by="ops", reason="no")
            result = await handle.result()
    finally:
        await redeployed[0].caller.aclose()  # type: ignore[attr-defined]  # an OpenAICaller
    assert temporal.tool_log() == []
    assert [(d.kind, d.by) for d in result.decisions] == [("rejected", "ops")]
    assert "rejected by ops: no" in temporal.fake.requests[-1]["messages"][-1]["content"]


async def test_a_leg_that_made_calls_cannot_replay_on_other_tools(temporal: TemporalTest) -> None:
    """A leg whose history holds calls (a search, then the proposal) replays on the same tools, and on a
    worker whose send is READ_ONLY it does not replay at all: the check refuses before the recorded
    proposal could turn into a live call, as a nondeterminism error (the task fails; nothing runs)."""
    temporal.fake.add(step("search", query="a"), step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.reject(proposal, by="ops", reason="no")
        await handle.result()
    history = (await temporal.legs(handle.run_id))[0]
    same = make_agents(temporal.fake.base_url, temporal.log)
    retiered = make_agents(temporal.fake.base_url, temporal.log, redeploy="retiered")
    await temporal.replay(history, agents=same)
    with pytest.raises(Exception, match=r"[Nn]ondetermin"):
        await temporal.replay(history, agents=retiered)
    assert temporal.tool_log() == ["search a"]
