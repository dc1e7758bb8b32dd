"""agentkit.temporal on a real Temporal dev server: the tool loop as a workflow over the same core,
proposals decided by a validated Update, replay, which calls are local activities, and the model/tool
retry contract."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory, WorkflowUpdateFailedError

from agentkit import LoopConfig, Outcome, StopReason, run_tool_loop_tiered
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import ActivityPolicy, DurableAgent, RunStatus
from agentkit.testing import FakeReply
from tests.temporal.agents import DONE, Brief, Doc, Researcher, Search, bare, step, until
from tests.temporal.support import (
    TemporalTest,
    local_activities,
    patches,
    scheduled,
    workflow_tasks,
)

pytestmark = pytest.mark.slow


async def test_durable_run_equals_the_in_process_run(temporal: TemporalTest) -> None:
    """The workflow plays the same loop core: same items, ending, rounds and model requests as in-process."""
    script = [bare(query="a"), bare(query="b"), DONE]
    lookup = temporal.lookup
    temporal.fake.add(*script)
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        local = await run_tool_loop_tiered(caller, lookup.agent, lookup.tools, Brief(topic="t"), lookup.config)
    temporal.fake.add(*script)
    async with temporal.worker():
        durable = await (await temporal.runs.start(lookup, Brief(topic="t"))).result()
    assert durable.items == local.items == [Doc(id="doc:a"), Doc(id="doc:b")]
    assert (durable.outcome, durable.stop_reason, durable.rounds) == (local.outcome, local.stop_reason, local.rounds)
    assert durable.usage == local.usage
    assert [r["messages"] for r in temporal.fake.requests[3:]] == [r["messages"] for r in temporal.fake.requests[:3]]


async def test_proposal_waits_and_approval_continues_the_run(temporal: TemporalTest) -> None:
    """A gated call stops the run in WAITING with its proposal; approved by Update, it runs once as an
    activity and the executor sees its result in the next round."""
    temporal.fake.add(step("search", query="a"), step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        waiting = await until(handle, RunStatus.WAITING)
        [proposal] = waiting.pending
        assert (proposal.tool_name, proposal.args, proposal.round) == ("send", {"to": "bob", "text": "hi"}, 2)
        assert temporal.tool_log() == ["search a"]
        await handle.approve(proposal, by="alice", note="fine")
        result = await handle.result()
    assert result.items == [Doc(id="doc:a"), Doc(id="sent:bob")]
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 3)
    assert temporal.tool_log() == ["search a", "send bob hi"]
    assert "sent:bob" in temporal.fake.requests[-1]["messages"][-1]["content"]
    [record] = result.decisions
    assert (record.kind, record.by, record.reason, record.digest) == ("approved", "alice", "fine", proposal.digest)


async def test_rejection_reaches_the_executor_with_its_reason(temporal: TemporalTest) -> None:
    """A rejected proposal never runs; the executor is shown who rejected it and why."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.reject(proposal, by="carol", reason="not today")
        result = await handle.result()
    assert temporal.tool_log() == []
    assert "rejected by carol: not today" in temporal.fake.requests[-1]["messages"][-1]["content"]
    assert result.stop_reason is StopReason.NOTHING_RETRIEVED


async def test_bad_updates_are_rejected_and_change_nothing(temporal: TemporalTest) -> None:
    """A wrong digest, an unknown proposal, no decider and a second decision are refused; the state is untouched."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        before = await until(handle, RunStatus.WAITING)
        [proposal] = before.pending
        bad = [
            (proposal.round, "0" * 64, "alice", "a decision binds to the exact call"),
            (proposal.round + 5, proposal.digest, "alice", "no pending proposal of round 6"),
            (proposal.round, proposal.digest, " ", "must name who decided"),
        ]
        for round, digest, by, message in bad:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await temporal.runs.approve(handle.run_id, round, digest, by=by)
            assert message in str(refused.value.cause)
            assert await handle.state() == before
        await handle.approve(proposal, by="alice")
        with pytest.raises(WorkflowUpdateFailedError) as second:
            await temporal.runs.reject(handle.run_id, proposal.round, proposal.digest, by="mallory")
        assert "already decided (approved by alice)" in str(second.value.cause)
        result = await handle.result()
    assert temporal.tool_log() == ["send bob hi"]
    assert [(r.kind, r.by) for r in result.decisions] == [("approved", "alice")]


async def test_recorded_histories_replay_deterministically(temporal: TemporalTest) -> None:
    """A run continues as new at its wait for a decision, so it has two legs; temporalio's Replayer replays
    both (a decided proposal included) without a determinism error, and replaying the first against a
    different loop (another round ceiling) is caught."""
    temporal.fake.add(step("search", query="a"), step("send", to="bob", text="hi"), step("search", query="b"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        await handle.result()
    histories = await temporal.legs(handle.run_id)
    assert len(histories) == 2
    await temporal.replay(*histories)
    research = temporal.research
    shorter = DurableAgent(
        name=research.name,
        agent=research.agent,
        tools=research.tools,
        caller=research.caller,
        ctx_type=Brief,
        config=LoopConfig(max_rounds=1),
    )
    with pytest.raises(Exception, match=r"[Nn]ondetermin"):
        await temporal.replay(histories[0], agents=[shorter])


HISTORIES = Path(__file__).resolve().parent / "histories"
"""Histories recorded by earlier code, each of a run of ``research`` that searched, had ``send`` approved and
finished: ``activity-model-calls-leg*.json`` when every model attempt was an activity of its own,
``activity-tool-calls-leg*.json`` when model attempts were local activities and every tool call an activity
(it searched again after the send)."""


def recorded(name: str) -> list[WorkflowHistory]:
    """Both legs of the recorded run ``name``."""
    return [WorkflowHistory.from_json(name, (HISTORIES / f"{name}-leg{n}.json").read_text()) for n in (1, 2)]


async def test_a_run_of_read_only_rounds_has_no_activity_task(temporal: TemporalTest) -> None:
    """Four rounds (three READ_ONLY searches, then done): every model call and every search is a local
    activity, a marker in the workflow task that made it, and none is an activity task; the rounds share
    workflow tasks (fewer tasks than rounds). The history replays."""
    temporal.fake.add(bare(query="a"), bare(query="b"), bare(query="c"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.lookup, Brief(topic="t"))
        result = await handle.result()
    assert (result.rounds, result.items) == (4, [Doc(id="doc:a"), Doc(id="doc:b"), Doc(id="doc:c")])
    assert temporal.tool_log() == ["search a", "search b", "search c"]
    history = await temporal.history(handle.run_id)
    assert scheduled(history) == []
    assert local_activities(history) == 1 + 4 + 3  # the recorded tool set, the model calls, the searches
    assert workflow_tasks(history) < result.rounds
    await temporal.replay(history)


async def test_a_live_reversible_call_and_an_approved_call_stay_activities_run_once(temporal: TemporalTest) -> None:
    """Only READ_ONLY calls are local: a live REVERSIBLE note is an activity task retried per the policy, and
    the approved IRREVERSIBLE send one with a single attempt; each runs once, the search is a local activity,
    and both legs replay."""
    temporal.fake.add(
        step("search", query="a"), step("note", to="ann", text="x"), step("send", to="bob", text="hi"), DONE
    )
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.editor, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        result = await handle.result()
    assert result.items == [Doc(id="doc:a"), Doc(id="note:ann"), Doc(id="sent:bob")]
    assert temporal.tool_log() == ["search a", "note ann x", "send bob hi"]
    legs = await temporal.legs(handle.run_id)
    assert [scheduled(leg) for leg in legs] == [["agentkit.tool_call"], ["agentkit.tool_call"]]
    attempts = [
        e.activity_task_scheduled_event_attributes.retry_policy.maximum_attempts
        for leg in legs
        for e in leg.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert attempts == [temporal.editor.policy.tool_attempts, 1]
    assert local_activities(legs[0]) == 1 + 3 + 1  # the recorded tool set, three model calls, the search
    await temporal.replay(*legs)


async def test_a_new_run_records_the_local_reads_patch(temporal: TemporalTest) -> None:
    """A run started on this code records the patch that makes its READ_ONLY calls local activities, and the
    one that checks its batches against the payload limit, so that a later replay plays them as it ran them."""
    temporal.fake.add(bare(query="a"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.lookup, Brief(topic="t"))
        await handle.result()
    history = await temporal.history(handle.run_id)
    assert patches(history) == [
        "agentkit-local-model",
        "agentkit-local-reads",
        "agentkit-payload-budget",
        "agentkit-legs",
    ]


async def test_a_run_recorded_with_model_calls_as_activities_replays(temporal: TemporalTest) -> None:
    """Both legs of a run recorded when each model attempt was an activity of its own replay on this code
    without a determinism error: a run without the local-model patch in its history plays its model calls as
    activities, as it ran. Without the patch, its first model call would be a local activity where the
    history has an activity, and the replay would fail."""
    legs = recorded("activity-model-calls")
    assert [scheduled(leg) for leg in legs] == [
        ["agentkit.model_call", "agentkit.tool_call", "agentkit.model_call"],
        ["agentkit.tool_call", "agentkit.model_call", "agentkit.tool_call", "agentkit.model_call"],
    ]
    await temporal.replay(*legs)


async def test_a_run_recorded_with_tool_calls_as_activities_replays(temporal: TemporalTest) -> None:
    """Both legs of a run recorded when model attempts were local activities and every tool call, READ_ONLY
    searches included, an activity of its own replay on this code: without the local-reads patch in its
    history, the run plays its searches as activities, as it ran. Without the patch check, its first search
    would be a local activity where the history schedules an activity, and the replay would fail."""
    legs = recorded("activity-tool-calls")
    assert [scheduled(leg) for leg in legs] == [["agentkit.tool_call"], ["agentkit.tool_call", "agentkit.tool_call"]]
    assert [local_activities(leg) for leg in legs] == [3, 2]  # the model calls (and the recorded tool set)
    assert [patches(leg) for leg in legs] == [["agentkit-local-model", "agentkit-legs"], ["agentkit-local-model"]]
    await temporal.replay(*legs)


async def test_throttled_model_call_is_never_retried(temporal: TemporalTest) -> None:
    """HTTP 429 ends the run as THROTTLED after one request: no activity retry, no fallback."""
    temporal.fake.add(FakeReply.error(429, retry_after=3))
    async with temporal.worker():
        result = await (await temporal.runs.start(temporal.lookup, Brief(topic="t"))).result()
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    assert len(temporal.fake.requests) == 1


async def test_transient_model_failure_is_retried_per_policy(temporal: TemporalTest) -> None:
    """A 500 is retried (generate_structured's policy, each attempt an activity, a workflow timer between),
    and the run's history, backoff timer included, replays."""
    temporal.fake.add(FakeReply.error(500), bare(query="a"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.lookup, Brief(topic="t"))
        result = await handle.result()
    assert result.items == [Doc(id="doc:a")]
    assert result.usage.requests == len(temporal.fake.requests) == 3
    await temporal.replay(await temporal.history(handle.run_id))


class Opaque:
    """An item type JSON cannot carry."""

    def __init__(self, handle: object) -> None:
        self.handle = handle


def test_durable_agent_refuses_what_cannot_cross_processes(temporal: TemporalTest) -> None:
    """A tool whose items cannot round-trip through JSON, and a process-clock deadline, are refused when
    the DurableAgent is built, naming the problem."""
    from agentkit import Tier, UsageError, tool

    @tool(tier=Tier.READ_ONLY)
    def grab(args: Search) -> list[Opaque]:
        """Grab."""
        return [Opaque(args)]

    caller = temporal.research.caller
    with pytest.raises(UsageError, match="'grab' returns Opaque items"):
        DurableAgent[Brief, Any](name="x", agent=Researcher(), tools=grab, caller=caller, ctx_type=Brief)
    with pytest.raises(UsageError, match="execution_timeout"):
        DurableAgent(
            name="x",
            agent=Researcher(),
            tools=temporal.lookup.tools,
            caller=caller,
            ctx_type=Brief,
            config=LoopConfig(deadline=5.0),
        )

    @tool(tier=Tier.READ_ONLY)
    def scoped(args: Search, ctx: Brief) -> list[str]:
        """Search within the brief."""
        return [ctx.model_dump_json(), args.model_dump_json()]

    with pytest.raises(UsageError, match="tool 'scoped' takes the run's ctx"):
        DurableAgent[Brief, Any](
            name="x",
            agent=Researcher(),
            tools=scoped,  # type: ignore[arg-type]  # refused by the types too; this pins the run-time refusal
            caller=caller,
            ctx_type=Brief,
        )


def probing(caller: OpenAICaller, tried: list[str]) -> DurableAgent[Brief, Doc]:
    """An agent whose one tool does what its query says: raises ``ToolRetry`` or ``ValueError``, returns
    a dict, or outlasts the 0.3 s tool timeout. It changes its args first, and counts its attempts."""
    from agentkit import Tier, ToolRetry, tool

    @tool(tier=Tier.READ_ONLY)
    async def probe(args: Search) -> list[Doc]:
        """Probe the corpus."""
        tried.append(args.query)
        query, args.query = args.query, "changed by the tool"
        match query:
            case "retry":
                raise ToolRetry(f"no document {query!r}; ask for another")
            case "raise":
                raise ValueError("corpus unreachable")
            case "dict":
                return {"id": query}  # type: ignore[return-value]  # the wrong return this pins
            case "slow":
                await asyncio.sleep(60)
        return [Doc(id=query)]

    config = LoopConfig(max_rounds=3, tool_timeout=0.3)
    policy = ActivityPolicy(retry_initial=timedelta(seconds=0.1))
    return DurableAgent(
        name="probe", agent=Researcher(), tools=probe, caller=caller, ctx_type=Brief, config=config, policy=policy
    )


@pytest.mark.parametrize(
    ("query", "attempts"), [("retry", 1), ("raise", 3), ("dict", 3), ("slow", 3)], ids=lambda v: str(v)
)
async def test_tool_call_ends_as_in_process(temporal: TemporalTest, query: str, attempts: int) -> None:
    """The tool activity runs the call through the loop's own invoke: a ToolRetry is the same observation
    (the call as the model made it, though the tool changed its args), and a raised exception, a return
    that is not a batch and a timeout end the run with the same error (its class, message and tool name,
    rebuilt on the client), once Temporal's attempts of a live call are spent."""
    script = [bare(query=query), DONE] if query == "retry" else [bare(query=query)]
    tried: list[str] = []
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        probe = probing(caller, tried)
        temporal.fake.add(*script)
        local = await run_tool_loop_tiered(caller, probe.agent, probe.tools, Brief(topic="t"), probe.config)
        temporal.fake.add(*script)
        async with temporal.worker(probe):
            durable = await (await temporal.runs.start(probe, Brief(topic="t"))).result()
    assert type(durable.error) is type(local.error)
    assert str(durable.error) == str(local.error)
    assert getattr(durable.error, "tool_name", None) == getattr(local.error, "tool_name", None)
    assert (durable.outcome, durable.stop_reason, durable.rounds) == (local.outcome, local.stop_reason, local.rounds)
    half = len(script)
    assert [r["messages"] for r in temporal.fake.requests[half:]] == [
        r["messages"] for r in temporal.fake.requests[:half]
    ]
    assert tried == [query] * (1 + attempts)
