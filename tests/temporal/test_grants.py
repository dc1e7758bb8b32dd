"""Standing grants on Temporal (`DurableAgent.grants`): a proposal a grant matches is approved in the workflow
by ``grant:<id>`` and runs once in its round, its use counted once by the grant activity (never again on
replay or retry); a call it does not allow waits for a person, as in process and on the journal."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from agentkit import ProposedAction, StopReason, Tier, UsageError
from agentkit.decisions import Equals, Grant, Grants, PathPrefix
from agentkit.temporal import RunStatus
from agentkit.temporal._activities import Activities
from agentkit.temporal._values import GrantAsk
from tests.temporal.agents import DONE, Brief, Doc, Send, step, until
from tests.temporal.support import TemporalTest, scheduled

pytestmark = pytest.mark.slow


def to_bob(max_uses: int = 1) -> Grant:
    return Grant(
        tool_name="send",
        where={"to": Equals(value="bob"), "text": PathPrefix(prefix="/notes")},
        max_uses=max_uses,
        allow_irreversible=True,
        granted_by="ops",
        reason="bob may get notes",
    )


async def test_a_grant_approves_a_call_in_the_workflow_once_and_replay_counts_nothing(temporal: TemporalTest) -> None:
    """Granted, the first send runs in its round as grant:<id> (one use); the second, past max_uses, waits;
    one `..` out of the folder waits too; both legs replay without asking again or counting a use."""
    grants = Grants([to_bob()])
    agent = dataclasses.replace(temporal.research, grants=grants)
    temporal.fake.add(
        step("send", to="bob", text="/notes/1"),
        step("send", to="bob", text="/notes/../secret"),
    )
    async with temporal.worker([agent]):
        handle = await temporal.runs.start(agent, Brief(topic="t"))
        [outside] = (await until(handle, RunStatus.WAITING)).pending
        assert (outside.args, temporal.tool_log()) == ({"to": "bob", "text": "/notes/../secret"}, ["send bob /notes/1"])
        temporal.fake.add(step("send", to="bob", text="/notes/2"), DONE)
        await handle.reject(outside, by="alice", reason="no")
        [spent] = (await until(handle, RunStatus.WAITING)).pending
        assert spent.args == {"to": "bob", "text": "/notes/2"}
        await handle.reject(spent, by="alice", reason="enough")
        result = await handle.result()
    [held] = grants
    assert grants.uses(held.id) == 1
    assert temporal.tool_log() == ["send bob /notes/1"]
    assert (result.stop_reason, result.items[0]) == (StopReason.EXECUTOR_DONE, Doc(id="sent:bob"))
    legs = await temporal.legs(handle.run_id)
    assert [leg.count("agentkit.use_grant") for leg in map(scheduled, legs)] == [2, 1, 0]
    assert "agentkit.tool_call" in scheduled(legs[0])
    await temporal.replay(*legs, agents=[agent])
    assert grants.uses(held.id) == 1


async def test_without_grants_a_run_asks_no_grant_activity(temporal: TemporalTest) -> None:
    """An agent without grants schedules no grant activity: its proposal waits, as runs recorded before did."""
    temporal.fake.add(step("send", to="bob", text="/notes/1"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.reject(proposal, by="alice")
        await handle.result()
    assert all("agentkit.use_grant" not in scheduled(leg) for leg in await temporal.legs(handle.run_id))


async def test_a_retried_grant_ask_counts_its_use_once(temporal: TemporalTest) -> None:
    """The grant activity asked twice for one call (a retry) answers the same grant and counts one use."""
    grants = Grants([to_bob(max_uses=2)])
    activities = Activities({"research": dataclasses.replace(temporal.research, grants=grants)})
    ask = GrantAsk(
        agent="research",
        tool_name="send",
        tier=Tier.IRREVERSIBLE,
        args={"to": "bob", "text": "/notes/1"},
        run_id="r",
        round=1,
        digest="d",
    )
    first, again = await activities.use_grant(ask), await activities.use_grant(ask)
    [held] = grants
    assert first.grant == again.grant == held
    assert grants.uses(held.id) == 1
    other = await activities.use_grant(ask.model_copy(update={"round": 2}))
    assert (other.grant, grants.uses(held.id)) == (held, 2)
    call = ProposedAction.create(
        tool_name="send", tier=Tier.IRREVERSIBLE, args=Send(to="bob", text="/notes/3"), round=3
    )
    assert grants.use(call, at=datetime.now(UTC)) is None


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"where": {"colour": Equals(value="red")}}, "'colour', which Send"),
        ({"allow_irreversible": False}, "only with"),
    ],
)
def test_a_durable_agent_refuses_grants_that_do_not_fit_its_tools(
    temporal: TemporalTest, changes: dict[str, object], complaint: str
) -> None:
    """A grant on a field the tool's args lack, or of an irreversible tool without the flag: a UsageError."""
    bad = to_bob().model_copy(update=changes)
    with pytest.raises(UsageError, match=complaint):
        dataclasses.replace(temporal.research, grants=Grants([bad]))


async def test_a_grant_ask_carries_the_values_from_untrusted_content(temporal: TemporalTest) -> None:
    """The grant activity judges the proposal with its provenance: a value that first appeared in untrusted
    content is approved only by a grant that allows it explicitly, as in process."""
    from agentkit.provenance import ArgOrigin, Origin

    grants = Grants([to_bob()])
    activities = Activities({"research": dataclasses.replace(temporal.research, grants=grants)})
    mark = ArgOrigin(path="to", value="bob", origin=Origin(round=1, tool_name="search", digest="d"))
    plain = GrantAsk(
        agent="research", tool_name="send", tier=Tier.IRREVERSIBLE, args={"to": "bob", "text": "/notes/1"},
        run_id="r", round=2, digest="d",
    )  # fmt: skip
    pinned = await activities.use_grant(plain.model_copy(update={"from_untrusted": (mark,)}))
    assert pinned.grant is not None  # `to` is pinned by an Equals constraint: the person chose the value
    text_mark = mark.model_copy(update={"path": "text", "value": "/notes/1"})
    unpinned = await activities.use_grant(plain.model_copy(update={"round": 3, "from_untrusted": (text_mark,)}))
    assert unpinned.grant is None  # `text` is only a PathPrefix: not allowed from untrusted content
