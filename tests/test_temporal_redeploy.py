"""A waiting Temporal run picked up by a worker whose tools changed (a redeploy): the run's recorded tool
set is admitted against the worker's before anything runs, and a difference fails the run, naming it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from agentkit.temporal import DurableAgent, DurableRuns, RunEnded, RunStatus, build_worker, workflow_for
from agentkit.testing import FakeOpenAIServer
from tests.temporal_agents import (  # noqa: F401  # the fixtures fake, runs and agents
    DONE,
    Brief,
    agents_fixture,
    fake_fixture,
    make_agents,
    runs_fixture,
    step,
    tool_log,
    until,
)

pytestmark = pytest.mark.slow

CHANGES = [
    ("retiered", "tool 'send' now declares Tier.READ_ONLY, the run had Tier.IRREVERSIBLE"),
    ("added", "tool 'count' was not in the run"),
    ("removed", "tool 'send' is missing"),
]


@pytest.mark.parametrize(("redeploy", "named"), CHANGES)
async def test_waiting_run_refuses_a_worker_whose_tools_changed(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    redeploy: str,
    named: str,
) -> None:
    """A run waits on a proposed IRREVERSIBLE send; the worker is replaced by one whose tool set differs
    (send re-tiered READ_ONLY, a tool added, send removed). The rejection is refused naming the difference,
    the send never runs (tool-side log), no model call is made, and the run fails saying why, at once
    (not a workflow task retried forever). Waiting for it to wait raises RunEnded, and changes nothing."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
    redeployed = make_agents(fake.base_url, tmp_path / "tools.log", redeploy=redeploy)
    try:
        async with build_worker(runs.client, redeployed, task_queue=runs.task_queue):
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
    assert tool_log(tmp_path) == []
    assert len(fake.requests) == 1, "the redeployed worker made a model call"
    assert shown.refused is not None
    assert named in shown.refused
    assert named in str(refused.value.cause)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("ToolSetChanged", True)
    assert named in cause.message


async def test_waiting_run_goes_on_on_a_worker_with_the_same_tools(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The same redeploy with the tool set unchanged (a new worker, tools built afresh) admits the run:
    the rejection is taken, the send never runs, and the executor finishes."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
    redeployed = make_agents(fake.base_url, tmp_path / "tools.log")
    try:
        async with build_worker(runs.client, redeployed, task_queue=runs.task_queue):
            await handle.reject(proposal, by="ops", reason="no")
            result = await handle.result()
    finally:
        await redeployed[0].caller.aclose()  # type: ignore[attr-defined]  # an OpenAICaller
    assert tool_log(tmp_path) == []
    assert [(d.kind, d.by) for d in result.decisions] == [("rejected", "ops")]
    assert "rejected by ops: no" in fake.requests[-1]["messages"][-1]["content"]


async def test_a_leg_that_made_calls_cannot_replay_on_other_tools(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A leg whose history holds calls (a search, then the proposal) replays on the same tools, and on a
    worker whose send is READ_ONLY it does not replay at all: the check refuses before the recorded
    proposal could turn into a live call, as a nondeterminism error (the task fails; nothing runs)."""
    fake.add(step("search", query="a"), step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.reject(proposal, by="ops", reason="no")
        await handle.result()
    described = await runs.client.get_workflow_handle(handle.run_id).describe()
    first_leg = described.raw_description.workflow_execution_info.first_run_id
    history = await runs.client.get_workflow_handle(handle.run_id, run_id=first_leg).fetch_history()
    same = make_agents(fake.base_url, tmp_path / "tools.log")
    retiered = make_agents(fake.base_url, tmp_path / "tools.log", redeploy="retiered")
    converter = pydantic_data_converter
    await Replayer(workflows=[workflow_for({a.name: a for a in same})], data_converter=converter).replay_workflow(
        history
    )
    changed = Replayer(workflows=[workflow_for({a.name: a for a in retiered})], data_converter=converter)
    with pytest.raises(Exception, match=r"[Nn]ondetermin"):
        await changed.replay_workflow(history)
    assert tool_log(tmp_path) == ["search a"]
