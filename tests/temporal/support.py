"""What the Temporal tests' one fixture, ``temporal`` (``tests/temporal/conftest.py``), gives a test: the
session's dev server, a client on a task queue of the test's own, the agents of ``tests.temporal.agents`` over a
scripted model, and what the tests do with them (serve the agents in process or in worker processes, run the CLI,
replay histories, read the tools' log); and the readers of a run's history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.trace import Tracer
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from agentkit import Observer
from agentkit.temporal import DurableAgent, DurableResult, DurableRuns, build_worker, workflow_for
from agentkit.testing import FakeOpenAIServer
from tests.temporal.agents import Brief
from tests.temporal.server import stop

ROOT = Path(__file__).resolve().parents[2]
BOUND = 60.0
"""Seconds within which what a test waits for must have happened."""


@dataclass(frozen=True, kw_only=True)
class TemporalTest:
    """One test's Temporal: the dev server, a client on the test's task queue, its agents and their model."""

    address: str
    """The session's dev server (``temporal_address``)."""
    runs: DurableRuns
    """A client of the dev server on a task queue of the test's own."""
    fake: FakeOpenAIServer
    """The scripted model, on loopback HTTP."""
    agents: list[DurableAgent[Any, Any]]
    """``make_agents`` over ``fake``: ``research`` (search, send), ``lookup`` (search), ``editor`` (search,
    note, send)."""
    log: Path
    """The file the agents' tools log each call to, from any process."""
    answers: dict[int, Any]
    """The model's answers by round, for runs whose model calls may be asked again: a request whose prompt
    names round N (``Researcher`` renders it) gets ``answers[N]`` however often it is asked, as a model
    asked the same prompt again would answer. Empty: the answers of ``fake.add``'s script, in order."""

    @property
    def research(self) -> DurableAgent[Any, Any]:
        return self.agents[0]

    @property
    def lookup(self) -> DurableAgent[Any, Any]:
        return self.agents[1]

    @property
    def editor(self) -> DurableAgent[Any, Any]:
        return self.agents[2]

    @property
    def gather(self) -> DurableAgent[Any, Any]:
        return self.agents[3]

    def worker(
        self,
        agents: DurableAgent[Any, Any] | Sequence[DurableAgent[Any, Any]] | None = None,
        *,
        observer: Observer | None = None,
    ) -> Worker:
        """An in-process worker serving ``agents`` (the test's by default) on the test's task queue, its runs seen
        by ``observer``; run it with ``async with``."""
        served = self.agents if agents is None else agents
        return build_worker(self.runs.client, served, task_queue=self.runs.task_queue, observer=observer)

    async def traced(self, tracer: Tracer) -> TemporalTest:
        """This test's Temporal with a client (and so workers) that trace through ``tracer``, on the same task
        queue."""
        runs = await DurableRuns.connect(self.address, task_queue=self.runs.task_queue, tracer=tracer)
        return dataclasses.replace(self, runs=runs)

    @contextmanager
    def process(self, *, concurrency: int | None = None) -> Iterator[subprocess.Popen[str]]:
        """``agentkit worker --temporal`` in its own process on the test's task queue, serving
        ``tests.temporal.agents:AGENTS`` over ``fake`` (a test may SIGKILL it)."""
        env = {**os.environ, "AGENTKIT_TEST_MODEL_URL": self.fake.base_url, "AGENTKIT_TEST_TOOL_LOG": str(self.log)}
        command = [sys.executable, "-m", "agentkit", "worker", "--temporal", self.address]
        command += ["--task-queue", self.runs.task_queue, "--agents", "tests.temporal.agents:AGENTS"]
        if concurrency is not None:
            command += ["--concurrency", str(concurrency)]
        output = self.log.with_name(f"worker-{uuid.uuid4().hex[:6]}.out")
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
                stop(process, grace=20)

    async def killed_at(self, agent: DurableAgent[Any, Any], line: str, gate: Path) -> DurableResult[Any]:
        """Start a run of ``agent`` on a worker process, SIGKILL that worker once a tool has logged ``line``,
        then create ``gate`` and finish the run on another worker process: the run's result."""
        with self.process() as first:
            handle = await self.runs.start(agent, Brief(topic="t"))
            await self.logged(line)
            first.send_signal(signal.SIGKILL)
            first.wait()
        await asyncio.to_thread(gate.touch)
        with self.process():
            return await handle.result()

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``agentkit temporal ...`` against the dev server, in another process (in a thread: an in-process
        worker keeps serving)."""
        command = [sys.executable, "-m", "agentkit", "temporal", *args, "--address", self.address]
        return await asyncio.to_thread(
            subprocess.run, command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
        )

    def tool_log(self) -> list[str]:
        """The tool calls completed so far, by any process."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    async def logged(self, line: str) -> None:
        """Once a tool has logged ``line``."""
        for _ in range(int(BOUND / 0.05)):
            if line in self.tool_log():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{line!r} never logged; log: {self.tool_log()}")

    async def history(self, run_id: str, *, leg: str | None = None) -> WorkflowHistory:
        """The history of a run's last leg, or of the leg whose Temporal run id is ``leg``."""
        return await self.runs.client.get_workflow_handle(run_id, run_id=leg).fetch_history()

    async def legs(self, run_id: str) -> list[WorkflowHistory]:
        """The histories of every leg of a run (each after the first is continued as new), first leg first."""
        legs: list[WorkflowHistory] = []
        leg: str | None = None
        while True:
            history = await self.history(run_id, leg=leg)
            legs.insert(0, history)
            leg = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
            if leg is None:
                return legs

    async def accepted(self, run_id: str) -> None:
        """Once the run's history holds an accepted Update."""
        for _ in range(int(BOUND / 0.05)):
            history = await self.history(run_id)
            if any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in history.events):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the Update was never accepted")

    async def replay(self, *histories: WorkflowHistory, agents: Sequence[DurableAgent[Any, Any]] | None = None) -> None:
        """Replay ``histories`` on the workflow serving ``agents`` (the test's by default); a determinism error
        raises."""
        served = self.agents if agents is None else agents
        replayer = Replayer(
            workflows=[workflow_for({a.name: a for a in served})], data_converter=pydantic_data_converter
        )
        for history in histories:
            await replayer.replay_workflow(history)


def scheduled(history: WorkflowHistory) -> list[str]:
    """The activities a history scheduled as activities of their own (a local activity is a marker instead)."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def local_activities(history: WorkflowHistory) -> int:
    """The local activities a history recorded (their markers)."""
    return sum(
        e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        for e in history.events
    )


def patches(history: WorkflowHistory) -> list[str]:
    """The patches a history records (``workflow.patched``), by id, in order."""
    return [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


def workflow_tasks(history: WorkflowHistory) -> int:
    return sum(e.HasField("workflow_task_completed_event_attributes") for e in history.events)


def by_round(answers: dict[int, Any]) -> Callable[[dict[str, Any]], Any]:
    def respond(body: dict[str, Any]) -> Any:
        named = re.search(r"round (\d+):", str(body["messages"][-1]["content"])) if answers else None
        return answers.get(int(named.group(1))) if named else None

    return respond
