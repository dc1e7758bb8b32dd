"""Worker processes on a real Temporal dev server: decisions from another process through the CLI,
a worker SIGKILLed mid-run (in a READ_ONLY call, a local activity; in a REVERSIBLE call, an activity; in a
model call), an approved call whose outcome is lost, two workers sharing runs."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentkit import Outcome, StopReason
from agentkit.temporal import RunStatus
from agentkit.testing import FakeReply
from tests.temporal.agents import DONE, MODEL_TIMEOUT, Brief, Doc, bare, step, until
from tests.temporal.support import TemporalTest

pytestmark = pytest.mark.slow


async def test_proposal_decided_from_another_process_through_the_cli(temporal: TemporalTest) -> None:
    """`agentkit temporal show` lists the pending proposal; a wrong digest is refused (exit 1, nothing
    changed); `agentkit temporal approve` from another process continues the run."""
    temporal.fake.add(step("send", to="bob", text="hi"), DONE)
    async with temporal.worker():
        handle = await temporal.runs.start(temporal.research, Brief(topic="t"))
        await until(handle, RunStatus.WAITING)
        shown = await temporal.cli("show", handle.run_id)
        assert shown.returncode == 0, shown.stderr
        [pending] = json.loads(shown.stdout)["pending"]
        decide = ["--round", str(pending["round"]), "--by", "alice"]
        wrong = await temporal.cli("approve", handle.run_id, *decide, "--digest", "f" * 64)
        assert (wrong.returncode, "refused" in wrong.stderr) == (1, True), wrong.stderr
        assert (await handle.state()).status is RunStatus.WAITING
        approved = await temporal.cli("approve", handle.run_id, *decide, "--digest", pending["digest"])
        assert approved.returncode == 0, approved.stderr
        result = await handle.result()
        listed = await temporal.cli("list")
    assert result.items == [Doc(id="sent:bob")]
    assert temporal.tool_log() == ["send bob hi"]
    assert handle.run_id in listed.stdout or listed.returncode == 0  # visibility may lag behind the run


async def test_worker_killed_mid_read_only_call_is_finished_by_another(temporal: TemporalTest) -> None:
    """SIGKILL a worker while a READ_ONLY search is in flight: a local activity, in the workflow task that also
    made the run's earlier model calls and searches. A second worker finishes the run once that task has timed
    out, with the result of an uninterrupted run: what the lost task had done it does again (the same model
    prompts, the same searches), the search that was in flight completes once, and nothing after it twice."""
    gate = temporal.log.with_name("gate")
    temporal.answers.update({1: bare(query="a"), 2: bare(query=str(gate)), 3: bare(query="c"), 4: DONE})
    gate.touch()  # the uninterrupted run passes the gate at once
    async with temporal.worker():
        reference = await (await temporal.runs.start(temporal.lookup, Brief(topic="t"))).result()
    asked = len(temporal.fake.requests)
    gate.unlink()
    temporal.log.unlink()

    result = await temporal.killed_at(temporal.lookup, f"blocked search {gate}", gate)

    prompts = [json.dumps(r["messages"]) for r in temporal.fake.requests]
    assert set(prompts[asked:]) == set(prompts[:asked]), "the run asked the model what the uninterrupted run did not"
    searches = [line for line in temporal.tool_log() if not line.startswith("blocked")]
    assert list(dict.fromkeys(searches)) == ["search a", f"search {gate}", "search c"]
    assert (searches.count(f"search {gate}"), searches.count("search c")) == (1, 1)
    assert result.items == reference.items == [Doc(id="doc:a"), Doc(id=f"doc:{gate}"), Doc(id="doc:c")]
    assert (result.outcome, result.stop_reason, result.rounds, result.usage) == (
        reference.outcome,
        reference.stop_reason,
        reference.rounds,
        reference.usage,
    )


async def test_worker_killed_mid_activity_call_is_finished_by_another_without_repeating_work(
    temporal: TemporalTest,
) -> None:
    """SIGKILL a worker while a REVERSIBLE note (an activity of its own) is in flight; a second worker finishes
    the run: the task that scheduled the note was completed, so no completed model call is asked again
    (server-side count) and no completed tool call runs again (tool-side count); the note is retried once."""
    gate = temporal.log.with_name("gate")
    temporal.fake.add(step("search", query="a"), step("note", to=str(gate), text="x"), step("search", query="c"), DONE)
    result = await temporal.killed_at(temporal.editor, f"blocked note {gate}", gate)
    assert len(temporal.fake.requests) == 4
    assert len({json.dumps(r["messages"]) for r in temporal.fake.requests}) == 4, "a model call was asked twice"
    assert temporal.tool_log() == ["search a", f"blocked note {gate}", f"note {gate} x", "search c"]
    assert result.items == [Doc(id="doc:a"), Doc(id=f"note:{gate}"), Doc(id="doc:c")]
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 4)


async def test_model_call_whose_worker_dies_is_retried_on_another_after_the_workflow_task_timeout(
    temporal: TemporalTest,
) -> None:
    """SIGKILL a worker while the model holds its first request; a second worker finishes the run long before
    the model timeout (10 minutes): the model call is a local activity in the dead worker's workflow task,
    which times out (10 s), so the other worker replays the run and asks the same request again, once."""
    temporal.fake.add(FakeReply.value(bare(query="a"), delay=3600), bare(query="a"), DONE)
    with temporal.process() as first:
        handle = await temporal.runs.start(temporal.lookup, Brief(topic="t"))
        for _ in range(1200):
            if temporal.fake.requests:
                break
            await asyncio.sleep(0.05)
        assert len(temporal.fake.requests) == 1, "the first model request never arrived"
        first.send_signal(signal.SIGKILL)
        first.wait()
    with temporal.process():
        # A fifth of MODEL_TIMEOUT: only the workflow task's timeout can have ended the lost attempt by then.
        result = await asyncio.wait_for(handle.result(), MODEL_TIMEOUT / 5)
    assert len(temporal.fake.requests) == 3
    assert temporal.fake.requests[0]["messages"] == temporal.fake.requests[1]["messages"], (
        "the lost attempt was not asked again"
    )
    assert result.items == [Doc(id="doc:a")]
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert temporal.tool_log() == ["search a"]


async def test_approved_call_whose_worker_dies_is_outcome_unknown_never_rerun(temporal: TemporalTest) -> None:
    """A run started with `agentkit temporal start`: its approved IRREVERSIBLE call, whose worker dies
    mid-call, is not retried: the run shows OUTCOME_UNKNOWN (wait_for sees it, in the leg the run continues
    as); a human resolves it (CLI) and the run goes on with that as the call's observation."""
    temporal.fake.add(step("send", to="bob", text="hang"), DONE)
    with temporal.process() as first:
        started = await temporal.cli(
            "start", "research", "--task-queue", temporal.runs.task_queue, "--ctx", '{"topic": "t"}'
        )
        assert started.returncode == 0, started.stderr
        handle = temporal.runs.get(temporal.research, started.stdout.strip())
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        await temporal.logged("started send bob")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with temporal.process():
        unknown = await handle.wait_for(RunStatus.OUTCOME_UNKNOWN, timeout=timedelta(seconds=60))
        assert unknown.unknown is not None
        assert unknown.unknown.digest == proposal.digest
        wrong = await temporal.cli(
            "resolve",
            handle.run_id,
            "--round",
            str(proposal.round),
            "--digest",
            "0" * 64,
            "--by",
            "ops",
            "--ran",
        )
        assert (wrong.returncode, "refused" in wrong.stderr) == (1, True), wrong.stderr
        resolve = ["--round", str(proposal.round), "--digest", proposal.digest, "--by", "ops"]
        resolved = await temporal.cli("resolve", handle.run_id, *resolve, "--not-ran", "--note", "no mail left")
        assert resolved.returncode == 0, resolved.stderr
        result = await handle.result()
    assert temporal.tool_log() == ["started send bob"]  # started once, never re-run
    assert (
        "ops established that it did not take effect: no mail left"
        in temporal.fake.requests[-1]["messages"][-1]["content"]
    )
    assert [(r.kind, r.by) for r in result.decisions] == [("approved", "alice"), ("resolved_not_ran", "ops")]
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.NOTHING_RETRIEVED)


async def test_a_granted_call_lost_after_a_persons_decision_ends_the_run_and_never_runs_again(
    temporal: TemporalTest,
) -> None:
    """Round 1's send to carl waits for a person and runs once approved; round 2's send to bob, which a standing
    grant approves, loses its worker mid-call. No person decided it and carl's call ran, so neither is shown as
    lost: the run ends (OutcomeLost, not retried) and nothing runs again."""
    temporal.fake.add(step("send", to="carl", text="hi"), step("send", to="bob", text="hang"), DONE)
    with temporal.process() as first:
        handle = await temporal.runs.start(temporal.agents[4], Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        await temporal.logged("started send bob")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with temporal.process(), pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=120)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("OutcomeLost", True)
    assert temporal.tool_log() == ["send carl hi", "started send bob"]


async def test_two_workers_share_the_runs_of_one_task_queue(temporal: TemporalTest) -> None:
    """Two worker processes, one activity at a time each, on one task queue: two runs whose REVERSIBLE note
    activities must be held at the same moment are served by both, and both finish."""
    temporal.fake.add(*[step("note", to="barrier:1", text="x")] * 2, DONE, DONE)
    with temporal.process(concurrency=1), temporal.process(concurrency=1):
        handles = [await temporal.runs.start(temporal.editor, Brief(topic=f"t{i}")) for i in range(2)]
        results = [await handle.result() for handle in handles]
    held = [line.split()[-1] for line in temporal.tool_log() if line.startswith("held")]
    assert len(set(held)) == 2, f"both workers held a call: {held}"
    assert [r.items for r in results] == [[Doc(id="note:barrier:1")]] * 2
    assert len(temporal.fake.requests) == 4
