"""Worker processes on a real Temporal dev server: decisions from another process through the CLI,
a worker SIGKILLed mid-run (in a tool call, or in a model call), an approved call whose outcome is lost,
two workers sharing runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentkit import Outcome, StopReason
from agentkit.temporal import DurableAgent, DurableRuns, RunStatus, build_worker
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.temporal_agents import (  # noqa: F401  # the fixtures fake, runs and agents
    DONE,
    MODEL_TIMEOUT,
    Brief,
    Doc,
    agents_fixture,
    bare,
    fake_fixture,
    runs_fixture,
    step,
    tool_log,
    until,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def worker(
    address: str, queue: str, fake: FakeOpenAIServer, tmp_path: Path, *, concurrency: int | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``agentkit worker --temporal`` in its own process, serving tests.temporal_agents:AGENTS."""
    env = {
        **os.environ,
        "AGENTKIT_TEST_MODEL_URL": fake.base_url,
        "AGENTKIT_TEST_TOOL_LOG": str(tmp_path / "tools.log"),
    }
    command = [sys.executable, "-m", "agentkit", "worker", "--temporal", address, "--task-queue", queue]
    command += ["--agents", "tests.temporal_agents:AGENTS"]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    output = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.out"
    with output.open("w") as sink:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(1200):
            if output.read_text().startswith("serving") or process.poll() is not None:
                break
            time.sleep(0.05)
        assert output.read_text().startswith("serving"), output.read_text()
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``agentkit temporal ...`` in another process (in a thread: an in-process worker keeps serving)."""
    command = [sys.executable, "-m", "agentkit", "temporal", *args, "--address", address]
    return await asyncio.to_thread(
        subprocess.run, command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )


async def logged(tmp_path: Path, line: str, *, seconds: float = 60) -> None:
    for _ in range(int(seconds / 0.05)):
        if line in tool_log(tmp_path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{line!r} never logged; log: {tool_log(tmp_path)}")


async def test_proposal_decided_from_another_process_through_the_cli(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    temporal_address: str,
) -> None:
    """`agentkit temporal show` lists the pending proposal; a wrong digest is refused (exit 1, nothing
    changed); `agentkit temporal approve` from another process continues the run."""
    fake.add(step("send", to="bob", text="hi"), DONE)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        handle = await runs.start(agents[0], Brief(topic="t"))
        await until(handle, RunStatus.WAITING)
        shown = await cli(temporal_address, "show", handle.run_id)
        assert shown.returncode == 0, shown.stderr
        [pending] = json.loads(shown.stdout)["pending"]
        decide = ["--round", str(pending["round"]), "--by", "alice"]
        wrong = await cli(temporal_address, "approve", handle.run_id, *decide, "--digest", "f" * 64)
        assert (wrong.returncode, "refused" in wrong.stderr) == (1, True), wrong.stderr
        assert (await handle.state()).status is RunStatus.WAITING
        approved = await cli(temporal_address, "approve", handle.run_id, *decide, "--digest", pending["digest"])
        assert approved.returncode == 0, approved.stderr
        result = await handle.result()
        listed = await cli(temporal_address, "list")
    assert result.items == [Doc(id="sent:bob")]
    assert tool_log(tmp_path) == ["send bob hi"]
    assert handle.run_id in listed.stdout or listed.returncode == 0  # visibility may lag behind the run


async def test_worker_killed_mid_run_is_finished_by_another_without_repeating_work(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    temporal_address: str,
) -> None:
    """SIGKILL a worker while a tool call is in flight; a second worker finishes the run: no completed
    model call is asked again (server-side count), no completed tool call runs again (tool-side count),
    and the result equals that of an uninterrupted run."""
    gate = tmp_path / "gate"
    script = [bare(query="a"), bare(query=str(gate)), bare(query="c"), DONE]
    lookup = agents[1]

    gate.touch()  # the uninterrupted run passes the gate at once
    fake.add(*script)
    async with build_worker(runs.client, agents, task_queue=runs.task_queue):
        reference = await (await runs.start(lookup, Brief(topic="t"))).result()
    reference_requests = len(fake.requests)
    gate.unlink()
    (tmp_path / "tools.log").unlink()

    fake.add(*script)
    with worker(temporal_address, runs.task_queue, fake, tmp_path) as first:
        handle = await runs.start(lookup, Brief(topic="t"))
        await logged(tmp_path, f"blocked search {gate}")
        first.send_signal(signal.SIGKILL)
        first.wait()
    gate.touch()
    with worker(temporal_address, runs.task_queue, fake, tmp_path):
        result = await handle.result()

    asked = fake.requests[reference_requests:]
    assert len(asked) == reference_requests == 4
    assert len({json.dumps(r["messages"]) for r in asked}) == len(asked), "a model call was asked twice"
    assert tool_log(tmp_path) == ["search a", f"blocked search {gate}", f"search {gate}", "search c"]
    assert result.items == reference.items == [Doc(id="doc:a"), Doc(id=f"doc:{gate}"), Doc(id="doc:c")]
    assert (result.outcome, result.stop_reason, result.rounds, result.usage) == (
        reference.outcome,
        reference.stop_reason,
        reference.rounds,
        reference.usage,
    )


async def test_model_call_whose_worker_dies_is_retried_on_another_after_the_workflow_task_timeout(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    temporal_address: str,
) -> None:
    """SIGKILL a worker while the model holds its first request; a second worker finishes the run long before
    the model timeout (10 minutes): the model call is a local activity in the dead worker's workflow task,
    which times out (10 s), so the other worker replays the run and asks the same request again, once."""
    fake.add(FakeReply.value(bare(query="a"), delay=3600), bare(query="a"), DONE)
    with worker(temporal_address, runs.task_queue, fake, tmp_path) as first:
        handle = await runs.start(agents[1], Brief(topic="t"))
        for _ in range(1200):
            if fake.requests:
                break
            await asyncio.sleep(0.05)
        assert len(fake.requests) == 1, "the first model request never arrived"
        first.send_signal(signal.SIGKILL)
        first.wait()
    with worker(temporal_address, runs.task_queue, fake, tmp_path):
        # A fifth of MODEL_TIMEOUT: only the workflow task's timeout can have ended the lost attempt by then.
        result = await asyncio.wait_for(handle.result(), MODEL_TIMEOUT / 5)
    assert len(fake.requests) == 3
    assert fake.requests[0]["messages"] == fake.requests[1]["messages"], "the lost attempt was not asked again"
    assert result.items == [Doc(id="doc:a")]
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert tool_log(tmp_path) == ["search a"]


async def test_approved_call_whose_worker_dies_is_outcome_unknown_never_rerun(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    temporal_address: str,
) -> None:
    """A run started with `agentkit temporal start`: its approved IRREVERSIBLE call, whose worker dies
    mid-call, is not retried: the run shows OUTCOME_UNKNOWN (wait_for sees it, in the leg the run continues
    as); a human resolves it (CLI) and the run goes on with that as the call's observation."""
    fake.add(step("send", to="bob", text="hang"), DONE)
    with worker(temporal_address, runs.task_queue, fake, tmp_path) as first:
        started = await cli(
            temporal_address, "start", "research", "--task-queue", runs.task_queue, "--ctx", '{"topic": "t"}'
        )
        assert started.returncode == 0, started.stderr
        handle = runs.get(agents[0], started.stdout.strip())
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        await logged(tmp_path, "started send bob")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with worker(temporal_address, runs.task_queue, fake, tmp_path):
        unknown = await handle.wait_for(RunStatus.OUTCOME_UNKNOWN, timeout=timedelta(seconds=60))
        assert unknown.unknown is not None
        assert unknown.unknown.digest == proposal.digest
        wrong = await cli(
            temporal_address,
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
        resolved = await cli(
            temporal_address, "resolve", handle.run_id, *resolve, "--not-ran", "--note", "no mail left"
        )
        assert resolved.returncode == 0, resolved.stderr
        result = await handle.result()
    assert tool_log(tmp_path) == ["started send bob"]  # started once, never re-run
    assert "ops established that it did not take effect: no mail left" in fake.requests[-1]["messages"][-1]["content"]
    assert [(r.kind, r.by) for r in result.decisions] == [("approved", "alice"), ("resolved_not_ran", "ops")]
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.NOTHING_RETRIEVED)


async def test_two_workers_share_the_runs_of_one_task_queue(
    runs: DurableRuns,
    agents: list[DurableAgent[Any, Any]],
    fake: FakeOpenAIServer,
    tmp_path: Path,
    temporal_address: str,
) -> None:
    """Two worker processes, one activity at a time each, on one task queue: two runs whose tool calls
    must be held at the same moment are served by both, and both finish."""
    fake.add(bare(query="barrier:1"), bare(query="barrier:1"), DONE, DONE)
    with (
        worker(temporal_address, runs.task_queue, fake, tmp_path, concurrency=1),
        worker(temporal_address, runs.task_queue, fake, tmp_path, concurrency=1),
    ):
        handles = [await runs.start(agents[1], Brief(topic=f"t{i}")) for i in range(2)]
        results = [await handle.result() for handle in handles]
    held = [line.split()[-1] for line in tool_log(tmp_path) if line.startswith("held")]
    assert len(set(held)) == 2, f"both workers held a call: {held}"
    assert [r.items for r in results] == [[Doc(id="doc:barrier:1")]] * 2
    assert len(fake.requests) == 4
