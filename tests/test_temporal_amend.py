"""Amend and approve over Temporal: the decide Update carries amended args, validated in the workflow; the
amended call runs once as an activity, the original never, and the executor is told what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from agentkit.temporal import Decision, DurableAgent, DurableRuns, RunStatus, build_worker
from agentkit.testing import FakeOpenAIServer
from tests.temporal_agents import (  # noqa: F401  # the fixtures fake, runs and agents
    DONE,
    Brief,
    Doc,
    agents_fixture,
    fake_fixture,
    runs_fixture,
    step,
    tool_log,
    until,
)

pytestmark = pytest.mark.slow


async def test_amended_approval_runs_the_amended_call_once(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Bad amendments are refused with the state untouched; a good one runs once, and the next round is told."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        before = await until(handle, RunStatus.WAITING)
        [proposal] = before.pending
        bad: list[tuple[dict[str, object], str]] = [
            ({"colour": "red"}, "'colour', which"),
            ({"to": 5}, "do not validate"),
        ]
        for args, message in bad:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.approve(proposal, by="alice", args=args)
            assert message in str(refused.value.cause)
        rejection = Decision(round=proposal.round, digest=proposal.digest, approve=False, by="a", args={"text": "x"})
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await runs.decide(handle.run_id, rejection)
        assert "a rejection takes none" in str(refused.value.cause)
        assert await handle.state() == before
        await handle.approve(proposal, by="alice", args={"text": "hello"})
        result = await handle.result()
    assert tool_log(tmp_path) == ["send bob hello"]
    assert result.items == [Doc(id="sent:bob")]
    # The executor's next round sees the call as it ran, amended.
    assert 'send({"to":"bob","text":"hello"}) -> [\'sent:bob\']' in fake.requests[-1]["messages"][-1]["content"]
