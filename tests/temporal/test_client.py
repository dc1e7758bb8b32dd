"""The Temporal client on a real dev server: a ctx that does not validate (refused by the client, or failing
the run, never a run stuck retrying its first task), starting by spec or by name, the result's error as
the agentkit error it was, waiting for a status without polling, and decisions that come after a run ended."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Coroutine
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from agentkit import LoopConfig, Outcome, StopReason, UsageError, run_tool_loop_tiered
from agentkit.errors import ProviderError
from agentkit.providers import ModelPrice, Prices
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import WORKFLOW_NAME, AgentSpec, DurableRuns, RunEnded, RunState, RunStatus
from agentkit.temporal._values import RunStart
from agentkit.testing import FakeReply
from tests.temporal.agents import DONE, Brief, Doc, bare, step
from tests.temporal.support import BOUND, TemporalTest

pytestmark = pytest.mark.slow

BAD_CTX = {"topik": "x"}
NAMED = "the ctx of durable agent 'research' does not validate as Brief: topic: Field required"


async def failure_of(runs: DurableRuns, run_id: str) -> ApplicationError:
    """The ApplicationError a run failed with, within ``BOUND`` seconds (before the fix it never ended)."""
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(runs.get("research", run_id).result(), BOUND)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def refusal(decision: Coroutine[Any, Any, RunState]) -> str:
    """The message of the refusal (``WorkflowUpdateFailedError``, a ``DecisionRefused``) ``decision`` gets."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await decision
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "DecisionRefused", cause
    return cause.message


async def test_a_ctx_that_does_not_validate_fails_the_run_naming_the_agent_and_the_errors(
    temporal: TemporalTest,
) -> None:
    """Started by name (no client-side type to check it against), a ctx that is not a Brief fails the run at
    once, not retried: an InvalidCtx error naming the agent and each validation error; the state shows
    FAILED with it, and neither the model nor a tool was called."""
    async with temporal.worker():
        run_id = await temporal.runs.start_named("research", BAD_CTX)
        cause = await failure_of(temporal.runs, run_id)
        state = await temporal.runs.state(run_id)
    assert (cause.type, cause.non_retryable) == ("InvalidCtx", True)
    assert NAMED in cause.message
    assert (state.status, state.error) == (RunStatus.FAILED, cause.message)
    assert temporal.fake.requests == []
    assert temporal.tool_log() == []


async def test_the_client_refuses_a_ctx_that_does_not_validate_before_starting(temporal: TemporalTest) -> None:
    """Given the agent or its spec, ``start`` validates the ctx as the workflow will and raises a UsageError
    naming the agent and the errors; no run was started."""
    spec = AgentSpec(name="research", ctx_type=Brief, item_type=Doc)
    for agent in (spec, temporal.research):
        run_id = f"refused-{type(agent).__name__}"
        with pytest.raises(UsageError, match=NAMED):
            await temporal.runs.start(agent, BAD_CTX, run_id=run_id)
        with pytest.raises(RPCError) as missing:
            await temporal.runs.client.get_workflow_handle(run_id).describe()
        assert missing.value.status is RPCStatusCode.NOT_FOUND


async def test_the_cli_starts_a_bad_ctx_into_a_failed_run_or_refuses_it_given_the_agents(
    temporal: TemporalTest,
) -> None:
    """`agentkit temporal start` with a ctx that does not validate: without --agents it starts the run, which
    fails naming the errors (`show` prints status failed and why); with --agents naming the specs it exits 2
    naming them, and starts nothing."""
    start = ["start", "research", "--task-queue", temporal.runs.task_queue, "--ctx", json.dumps(BAD_CTX)]
    async with temporal.worker():
        started = await temporal.cli(*start)
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.strip()
        cause = await failure_of(temporal.runs, run_id)
        shown = await temporal.cli("show", run_id)
        refused = await temporal.cli(*start, "--run-id", "refused-by-cli", "--agents", "tests.temporal.agents:SPECS")
    assert NAMED in cause.message
    assert shown.returncode == 0, shown.stderr
    assert (json.loads(shown.stdout)["status"], json.loads(shown.stdout)["error"]) == ("failed", cause.message)
    assert refused.returncode == 2
    assert NAMED in refused.stderr
    with pytest.raises(RPCError) as missing:
        await temporal.runs.client.get_workflow_handle("refused-by-cli").describe()
    assert missing.value.status is RPCStatusCode.NOT_FOUND
    assert temporal.fake.requests == []


async def test_a_spec_or_a_name_starts_a_run_without_the_agent(temporal: TemporalTest) -> None:
    """A client with only the agent's spec gets typed items; one with only its name gets them as JSON."""
    temporal.fake.add(bare(query="a"), DONE, bare(query="b"), DONE)
    spec = AgentSpec(name="lookup", ctx_type=Brief, item_type=Doc)
    async with temporal.worker():
        typed = await (await temporal.runs.start(spec, Brief(topic="t"))).result()
        untyped = await (await temporal.runs.start("lookup", {"topic": "t"})).result()
    assert typed.items == [Doc(id="doc:a")]
    assert untyped.items == [{"id": "doc:b"}]
    assert (typed.stop_reason, untyped.stop_reason) == (StopReason.EXECUTOR_DONE, StopReason.EXECUTOR_DONE)


async def test_the_result_error_is_the_agentkit_error_the_run_ended_with(temporal: TemporalTest) -> None:
    """A model that answers 400 ends the run with a ProviderError; the durable result carries that error (class,
    message, status, transient) as the in-process result does, and raise_for_error raises it."""
    lookup = temporal.lookup
    temporal.fake.add(FakeReply.error(400))
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        local = await run_tool_loop_tiered(caller, lookup.agent, lookup.tools, Brief(topic="t"), lookup.config)
    temporal.fake.add(FakeReply.error(400))
    async with temporal.worker():
        durable = await (await temporal.runs.start(lookup, Brief(topic="t"))).result()
    assert isinstance(local.error, ProviderError)
    assert isinstance(durable.error, ProviderError)
    assert (str(durable.error), durable.error.status, durable.error.transient) == (str(local.error), 400, False)
    assert (durable.outcome, durable.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    with pytest.raises(ProviderError) as raised:
        durable.raise_for_error()
    assert raised.value is durable.error


async def test_wait_for_answers_once_the_run_waits_across_its_legs(temporal: TemporalTest) -> None:
    """Asked while a tool call is in flight, wait_for(WAITING) is the workflow's wait Update (kept in the first
    leg's history, which replays), outlives that leg (the run continues as new at the wait) and answers from
    the next with the pending proposal; once the run is decided and done, wait_for(FINISHED) gives the
    outcome."""
    gate = temporal.log.with_name("gate")
    temporal.fake.add(step("search", query=str(gate)), step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        await temporal.logged(f"blocked search {gate}")
        waiting_for = asyncio.ensure_future(handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND)))
        await temporal.accepted(handle.run_id)
        gate.touch()
        waiting = await waiting_for
        [proposal] = waiting.pending
        await handle.approve(proposal, by="alice")
        finished = await handle.wait_for(RunStatus.FINISHED, timeout=timedelta(seconds=BOUND))
    assert proposal.tool_name == "send"
    assert finished.outcome is not None
    assert finished.outcome.stop_reason is StopReason.EXECUTOR_DONE
    first_leg = (await temporal.legs(handle.run_id))[0]
    kinds = [event.event_type for event in first_leg.events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED in kinds, "wait_for polled instead of waiting"
    await temporal.replay(first_leg)


async def test_wait_for_a_status_the_run_will_not_reach_raises_run_ended(temporal: TemporalTest) -> None:
    """A run that finishes while wait_for(WAITING) waits on it, one already finished, and one that failed on
    its ctx each raise RunEnded saying where the run stands, at once rather than at the timeout."""
    temporal.fake.add(FakeReply.value(bare(query="a"), delay=1), DONE)
    timeout = timedelta(seconds=BOUND)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.lookup, Brief(topic="t"))
        with pytest.raises(RunEnded) as meanwhile:
            await handle.wait_for(RunStatus.WAITING, timeout=timeout)
        with pytest.raises(RunEnded) as already:
            await handle.wait_for(RunStatus.WAITING, RunStatus.OUTCOME_UNKNOWN, timeout=timeout)
        failed = await temporal.runs.start("research", BAD_CTX)
        with pytest.raises(RunEnded) as invalid:
            await failed.wait_for(RunStatus.WAITING, timeout=timeout)
    for ended in (meanwhile.value, already.value):
        assert (ended.run_id, ended.status) == (handle.run_id, "finished")
        assert "is finished (applied, executor_done); it will not reach" in str(ended)
    assert str(meanwhile.value).endswith("it will not reach waiting")
    assert str(already.value).endswith("it will not reach outcome_unknown or waiting")
    assert (invalid.value.status, NAMED in str(invalid.value)) == ("failed", True)


async def test_wait_for_a_run_closed_meanwhile_raises_run_ended(temporal: TemporalTest) -> None:
    """A waiting run terminated while wait_for(FINISHED) waits on it: RunEnded with Temporal's status."""
    temporal.fake.add(step("send", to="bob", text="hi"))
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        await handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))
        waiter = asyncio.ensure_future(handle.wait_for(RunStatus.FINISHED, timeout=timedelta(seconds=BOUND)))
        await asyncio.sleep(1)
        await temporal.runs.client.get_workflow_handle(handle.run_id).terminate("ops")
        with pytest.raises(RunEnded) as ended:
            await waiter
    assert (ended.value.status, "terminated while waiting" in str(ended.value)) == ("terminated", True)


async def test_wait_for_times_out_naming_the_status_the_run_is_in(temporal: TemporalTest) -> None:
    """A run waiting for a decision does not finish: wait_for(FINISHED) ends at its timeout with a TimeoutError
    naming the status; the run is unchanged and still takes its decision. No statuses is a UsageError."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        before = await handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))
        with pytest.raises(TimeoutError, match=r"did not reach finished within 0:00:01; it is waiting"):
            await handle.wait_for(RunStatus.FINISHED, timeout=timedelta(seconds=1))
        with pytest.raises(UsageError, match="needs the statuses"):
            await handle.wait_for()
        assert await handle.state() == before
        await handle.reject(before.pending[0], by="ops")
        result = await handle.result()
    assert [d.kind for d in result.decisions] == ["rejected"]


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class EarlierRun:
    """The workflow as workers of an earlier agentkit serve it: a ``state`` Query, no ``wait`` Update. It
    runs for two seconds of workflow time, then waits."""

    @workflow.init
    def __init__(self, start: RunStart) -> None:
        self.start, self.status = start, RunStatus.RUNNING

    @workflow.run
    async def run(self, start: RunStart) -> None:
        await workflow.sleep(2)
        self.status = RunStatus.WAITING
        await workflow.wait_condition(lambda: False)

    @workflow.query(name="state")
    def state(self) -> RunState:
        return RunState(run_id=workflow.info().workflow_id, agent=self.start.agent, status=self.status)


async def test_wait_for_looks_again_where_the_workers_predate_the_wait_update(temporal: TemporalTest) -> None:
    """Workers without the wait Update (a client upgraded before them) refuse it; wait_for then looks at the
    state until the status is reached, and answers it, rather than failing."""
    async with Worker(temporal.runs.client, task_queue=temporal.runs.task_queue, workflows=[EarlierRun]):
        handle = await temporal.runs.start("research", {"topic": "t"})
        state = await handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))
        await temporal.runs.client.get_workflow_handle(handle.run_id).terminate("done")
    assert state.status is RunStatus.WAITING


async def test_racing_decisions_have_one_winner_and_every_other_is_refused(temporal: TemporalTest) -> None:
    """Eight approvals and rejections of one proposal, half sent at once and half once the run has ended: one
    wins, and each other one gets the documented refusal naming the winner, never Temporal's RPCError."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await handle.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))).pending

        async def decide(n: int) -> RunState:
            if n >= 4:
                await handle.result()  # the run has ended: this decision comes too late, however it is sent
            if n % 2:
                return await handle.approve(proposal, by=f"approver-{n}")
            return await handle.reject(proposal, by=f"rejecter-{n}")

        answers = await asyncio.gather(*(decide(n) for n in range(8)), return_exceptions=True)
        result = await handle.result()
    [winner] = result.decisions
    assert sum(isinstance(answer, RunState) for answer in answers) == 1, answers
    refused = [answer for answer in answers if not isinstance(answer, RunState)]
    assert all(isinstance(answer, WorkflowUpdateFailedError) for answer in refused), refused
    for answer in refused:
        assert isinstance(answer, WorkflowUpdateFailedError)
        assert f"already decided ({winner.kind} by {winner.by})" in str(answer.cause), answer.cause
    assert temporal.tool_log() == (["send bob hi"] if winner.kind == "approved" else [])


async def test_a_decision_or_resolution_after_the_run_ended_is_refused(temporal: TemporalTest) -> None:
    """A resolution sent to a finished run, and a decision sent to a terminated one, get the documented refusal
    naming how the run ended; an unknown run id stays Temporal's NOT_FOUND."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE, step("send", to="eve", text="hi"))
    async with temporal.worker():
        finished = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await finished.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))).pending
        await finished.approve(proposal, by="alice")
        await finished.result()
        terminated = await temporal.runs.start(temporal.research, Brief(topic="t"))
        [waiting] = (await terminated.wait_for(RunStatus.WAITING, timeout=timedelta(seconds=BOUND))).pending
        await temporal.runs.client.get_workflow_handle(terminated.run_id).terminate("ops")
    resolved = await refusal(
        temporal.runs.resolve(finished.run_id, proposal.round, proposal.digest, ran=True, by="ops")
    )
    assert resolved == (
        f"run {finished.run_id!r} has ended (completed) and takes no resolution; the proposal of round 1 was "
        "already decided (approved by alice). Nothing changed"
    )
    decided = await refusal(terminated.approve(waiting, by="bob"))
    assert decided == f"run {terminated.run_id!r} has ended (terminated) and takes no decision. Nothing changed"
    with pytest.raises(RPCError) as unknown:
        await temporal.runs.approve("no-such-run", 1, proposal.digest, by="bob")
    assert unknown.value.status is RPCStatusCode.NOT_FOUND
    assert temporal.tool_log() == ["send bob hi"]


async def test_a_durable_run_keeps_usage_details_reasoning_and_cost(temporal: TemporalTest) -> None:
    """Through Temporal's payloads (the model activity's reply, the run's outcome, its state): the usage details,
    each round's reasoning and the cost of a priced run are those of the same run in-process."""
    prices = Prices({"m": ModelPrice(input=Decimal(1), output=Decimal(4), cached_input=Decimal("0.1"))})
    lookup = dataclasses.replace(temporal.lookup, config=LoopConfig(prices=prices))
    replies = [
        FakeReply.value(bare(query="a"), prompt_tokens=1000, cached_tokens=800, reasoning_tokens=30, reasoning="why"),
        FakeReply.value(DONE, prompt_tokens=1200, cached_tokens=1000, completion_tokens=50, reasoning_tokens=40),
    ]
    temporal.fake.add(*replies)
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        local = await run_tool_loop_tiered(caller, lookup.agent, lookup.tools, Brief(topic="t"), lookup.config)
    temporal.fake.add(*replies)
    async with temporal.worker([lookup]):
        durable = await (await temporal.runs.start(lookup, Brief(topic="t"))).result()
    assert durable.usage == local.usage
    assert (durable.usage.cached_input_tokens, durable.usage.reasoning_tokens) == (1800, 70)
    assert durable.cost == local.cost
    assert durable.cost is not None
    assert durable.checkpoint.entries[0].reasoning == "why"  # type: ignore[union-attr]  # the first entry is a round
    durable.checkpoint.verify()
