"""Amend and approve over Temporal: the decide Update carries amended args, validated in the workflow; the
amended call runs once as an activity, the original never, and the executor is told what changed."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateFailedError

from agentkit.temporal import Decision, RunStatus
from tests.temporal.agents import DONE, Brief, Doc, step, until
from tests.temporal.support import TemporalTest

pytestmark = pytest.mark.slow


async def test_amended_approval_runs_the_amended_call_once(temporal: TemporalTest) -> None:
    """Bad amendments are refused with the state untouched; a good one runs once, and the next round is told."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
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
            await temporal.runs.decide(handle.run_id, rejection)
        assert "a rejection takes none" in str(refused.value.cause)
        assert await handle.state() == before
        await handle.approve(proposal, by="alice", args={"text": "hello"})
        result = await handle.result()
    assert temporal.tool_log() == ["send bob hello"]
    assert result.items == [Doc(id="sent:bob")]
    # The executor's next round sees the call as it ran, amended.
    assert (
        'send({"to":"bob","text":"hello"}) -> [\'sent:bob\']' in temporal.fake.requests[-1]["messages"][-1]["content"]
    )
