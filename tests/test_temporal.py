"""agentkit.temporal on a real Temporal dev server: the tool loop as a workflow over the same core,
proposals decided by a validated Update, replay, and the model/tool retry contract."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agentkit import LoopConfig, Outcome, StopReason, run_tool_loop_tiered
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import ActivityPolicy, DurableAgent, DurableRuns, RunStatus, build_worker, workflow_for
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.temporal_agents import (  # noqa: F401  # the fixtures fake, runs and agents
    DONE,
    Brief,
    Doc,
    Researcher,
    Search,
    agents_fixture,
    bare,
    fake_fixture,
    runs_fixture,
    step,
    tool_log,
    until,
)

pytestmark = pytest.mark.slow


async def test_durable_run_equals_the_in_process_run(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer
) -> None:
    """The workflow plays the same loop core: same items, ending, rounds and model requests as in-process."""
    script = [bare(query="a"), bare(query="b"), DONE]
    lookup = agents[1]
    fake.add(*script)
    async with OpenAICaller(base_url=fake.base_url, api_key="k") as caller:
        local = await run_tool_loop_tiered(caller, lookup.agent, lookup.tools, Brief(topic="t"), lookup.config)
    fake.add(*script)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        durable = await (await runs.start(lookup, Brief(topic="t"))).result()
    assert durable.items == local.items == [Doc(id="doc:a"), Doc(id="doc:b")]
    assert (durable.outcome, durable.stop_reason, durable.rounds) == (local.outcome, local.stop_reason, local.rounds)
    assert durable.usage == local.usage
    assert [r["messages"] for r in fake.requests[3:]] == [r["messages"] for r in fake.requests[:3]]


async def test_proposal_waits_and_approval_continues_the_run(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A gated call stops the run in WAITING with its proposal; approved by Update, it runs once as an
    activity and the executor sees its result in the next round."""
    fake.add(step("search", query="a"), step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        waiting = await until(handle, RunStatus.WAITING)
        [proposal] = waiting.pending
        assert (proposal.tool_name, proposal.args, proposal.round) == ("send", {"to": "bob", "text": "hi"}, 2)
        assert tool_log(tmp_path) == ["search a"]
        await handle.approve(proposal, by="alice", note="fine")
        result = await handle.result()
    assert result.items == [Doc(id="doc:a"), Doc(id="sent:bob")]
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 3)
    assert tool_log(tmp_path) == ["search a", "send bob hi"]
    assert "sent:bob" in fake.requests[-1]["messages"][-1]["content"]
    [record] = result.decisions
    assert (record.kind, record.by, record.reason, record.digest) == ("approved", "alice", "fine", proposal.digest)


async def test_rejection_reaches_the_executor_with_its_reason(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A rejected proposal never runs; the executor is shown who rejected it and why."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.reject(proposal, by="carol", reason="not today")
        result = await handle.result()
    assert tool_log(tmp_path) == []
    assert "rejected by carol: not today" in fake.requests[-1]["messages"][-1]["content"]
    assert result.stop_reason is StopReason.NOTHING_RETRIEVED


async def test_bad_updates_are_rejected_and_change_nothing(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A wrong digest, an unknown proposal, no decider and a second decision are refused; the state is untouched."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        before = await until(handle, RunStatus.WAITING)
        [proposal] = before.pending
        bad = [
            (proposal.round, "0" * 64, "alice", "is not that of the proposal"),
            (proposal.round + 5, proposal.digest, "alice", "no pending proposal of round 6"),
            (proposal.round, proposal.digest, " ", "must name who decided"),
        ]
        for round, digest, by, message in bad:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await runs.approve(handle.run_id, round, digest, by=by)
            assert message in str(refused.value.cause)
            assert await handle.state() == before
        await handle.approve(proposal, by="alice")
        with pytest.raises(WorkflowUpdateFailedError) as second:
            await runs.reject(handle.run_id, proposal.round, proposal.digest, by="mallory")
        assert "already decided (approved by alice)" in str(second.value.cause)
        result = await handle.result()
    assert tool_log(tmp_path) == ["send bob hi"]
    assert [(r.kind, r.by) for r in result.decisions] == [("approved", "alice")]


async def test_recorded_histories_replay_deterministically(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer
) -> None:
    """A run continues as new at its wait for a decision, so it has two legs; temporalio's Replayer replays
    both (a decided proposal included) without a determinism error, and replaying the first against a
    different loop (another round ceiling) is caught."""
    fake.add(step("search", query="a"), step("send", to="bob", text="hi"), step("search", query="b"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        await handle.result()
    histories = await leg_histories(runs, handle.run_id)
    assert len(histories) == 2
    replayer = Replayer(workflows=[workflow_for({a.name: a for a in agents})], data_converter=pydantic_data_converter)
    for history in histories:
        await replayer.replay_workflow(history)
    research = agents[0]
    shorter = DurableAgent(
        name=research.name,
        agent=research.agent,
        tools=research.tools,
        caller=research.caller,
        ctx_type=Brief,
        config=LoopConfig(max_rounds=1),
    )
    changed = Replayer(workflows=[workflow_for({"research": shorter})], data_converter=pydantic_data_converter)
    with pytest.raises(Exception, match=r"[Nn]ondetermin"):
        await changed.replay_workflow(histories[0])


async def leg_histories(runs: DurableRuns, run_id: str) -> list[WorkflowHistory]:
    """The histories of every leg of a run (each leg after the first is continued as new), first leg first."""
    legs: list[WorkflowHistory] = []
    leg: str | None = None
    while True:
        history = await runs.client.get_workflow_handle(run_id, run_id=leg).fetch_history()
        legs.insert(0, history)
        started = history.events[0].workflow_execution_started_event_attributes
        leg = started.continued_execution_run_id or None
        if leg is None:
            return legs


HISTORIES = Path(__file__).resolve().parent / "temporal_histories"
"""Histories recorded by earlier code (``activity-model-calls-leg*.json``: a run of ``research`` that searched,
had ``send`` approved and finished, recorded when every model attempt was an activity of its own)."""


def _scheduled(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def _workflow_tasks(history: WorkflowHistory) -> int:
    return sum(e.HasField("workflow_task_completed_event_attributes") for e in history.events)


async def test_a_round_is_one_workflow_task_with_its_model_call_a_local_activity(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer
) -> None:
    """Four rounds (three searches, then done) take four workflow tasks: each model call is a local activity,
    recorded with the task that schedules the round's tool call; only the tool calls are activities. The
    history replays."""
    fake.add(bare(query="a"), bare(query="b"), bare(query="c"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[1], Brief(topic="t"))
        result = await handle.result()
    assert (result.rounds, result.items) == (4, [Doc(id="doc:a"), Doc(id="doc:b"), Doc(id="doc:c")])
    history = await runs.client.get_workflow_handle(handle.run_id).fetch_history()
    assert _scheduled(history) == ["agentkit.tool_call"] * 3
    assert _workflow_tasks(history) == result.rounds
    replayer = Replayer(workflows=[workflow_for({a.name: a for a in agents})], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)


async def test_a_run_recorded_with_model_calls_as_activities_replays(agents: list[DurableAgent[Any, Any]]) -> None:
    """Both legs of a run recorded when each model attempt was an activity of its own replay on this code
    without a determinism error: a run without the local-model patch in its history plays its model calls as
    activities, as it ran. Without the patch, its first model call would be a local activity where the
    history has an activity, and the replay would fail."""
    replayer = Replayer(workflows=[workflow_for({a.name: a for a in agents})], data_converter=pydantic_data_converter)
    legs = [
        WorkflowHistory.from_json(
            "recorded-before-local-model", (HISTORIES / f"activity-model-calls-leg{n}.json").read_text()
        )
        for n in (1, 2)
    ]
    assert [_scheduled(leg) for leg in legs] == [
        ["agentkit.model_call", "agentkit.tool_call", "agentkit.model_call"],
        ["agentkit.tool_call", "agentkit.model_call", "agentkit.tool_call", "agentkit.model_call"],
    ]
    for leg in legs:
        await replayer.replay_workflow(leg)


async def test_throttled_model_call_is_never_retried(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer
) -> None:
    """HTTP 429 ends the run as THROTTLED after one request: no activity retry, no fallback."""
    fake.add(FakeReply.error(429, retry_after=3))
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        result = await (await runs.start(agents[1], Brief(topic="t"))).result()
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    assert len(fake.requests) == 1


async def test_transient_model_failure_is_retried_per_policy(
    runs: DurableRuns, agents: list[DurableAgent[Any, Any]], fake: FakeOpenAIServer
) -> None:
    """A 500 is retried (generate_structured's policy, each attempt an activity, a workflow timer between),
    and the run's history, backoff timer included, replays."""
    fake.add(FakeReply.error(500), bare(query="a"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[1], Brief(topic="t"))
        result = await handle.result()
    assert result.items == [Doc(id="doc:a")]
    assert result.usage.requests == len(fake.requests) == 3
    history = await runs.client.get_workflow_handle(handle.run_id).fetch_history()
    replayer = Replayer(workflows=[workflow_for({a.name: a for a in agents})], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)


class Opaque:
    """An item type JSON cannot carry."""

    def __init__(self, handle: object) -> None:
        self.handle = handle


def test_durable_agent_refuses_what_cannot_cross_processes(agents: list[DurableAgent[Any, Any]]) -> None:
    """A tool whose items cannot round-trip through JSON, and a process-clock deadline, are refused when
    the DurableAgent is built, naming the problem."""
    from agentkit import Tier, UsageError, tool

    @tool(tier=Tier.READ_ONLY)
    def grab(args: Search) -> list[Opaque]:
        """Grab."""
        return [Opaque(args)]

    caller = agents[0].caller
    with pytest.raises(UsageError, match="'grab' returns Opaque items"):
        DurableAgent[Brief, Any](name="x", agent=Researcher(), tools=grab, caller=caller, ctx_type=Brief)
    with pytest.raises(UsageError, match="execution_timeout"):
        DurableAgent(
            name="x",
            agent=Researcher(),
            tools=agents[1].tools,
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
async def test_tool_call_ends_as_in_process(
    runs: DurableRuns, fake: FakeOpenAIServer, query: str, attempts: int
) -> None:
    """The tool activity runs the call through the loop's own invoke: a ToolRetry is the same observation
    (the call as the model made it, though the tool changed its args), and a raised exception, a return
    that is not a batch and a timeout end the run with the same error (its class, message and tool name,
    rebuilt on the client), once Temporal's attempts of a live call are spent."""
    script = [bare(query=query), DONE] if query == "retry" else [bare(query=query)]
    tried: list[str] = []
    async with OpenAICaller(base_url=fake.base_url, api_key="k") as caller:
        probe = probing(caller, tried)
        fake.add(*script)
        local = await run_tool_loop_tiered(caller, probe.agent, probe.tools, Brief(topic="t"), probe.config)
        fake.add(*script)
        async with build_worker(runs.client, probe, task_queue=runs.task_queue):
            durable = await (await runs.start(probe, Brief(topic="t"))).result()
    assert type(durable.error) is type(local.error)
    assert str(durable.error) == str(local.error)
    assert getattr(durable.error, "tool_name", None) == getattr(local.error, "tool_name", None)
    assert (durable.outcome, durable.stop_reason, durable.rounds) == (local.outcome, local.stop_reason, local.rounds)
    half = len(script)
    assert [r["messages"] for r in fake.requests[half:]] == [r["messages"] for r in fake.requests[:half]]
    assert tried == [query] * (1 + attempts)
