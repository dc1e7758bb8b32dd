"""The typed client: start durable runs, read their state, decide their proposals, get their results."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowHandle

from agentkit._outcome import Outcome, StopReason
from agentkit._state import RunCheckpoint
from agentkit._usage import Usage
from agentkit.temporal._agent import DurableAgent
from agentkit.temporal._values import (
    Decision,
    DecisionRecord,
    DurableOutcome,
    PendingProposal,
    Resolution,
    RunStart,
    RunState,
    RunSummary,
)
from agentkit.temporal._worker import connect
from agentkit.temporal._workflow import WORKFLOW_NAME

__all__ = ["DurableResult", "DurableRuns", "RunHandle"]

Ctx = TypeVar("Ctx")
R = TypeVar("R")


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableResult(Generic[R]):
    """A finished durable run: the ``TieredLoopResult``'s fields, items typed by the agent's tools."""

    run_id: str
    items: list[R]
    """Every item gathered, the approved calls' included, validated as the tools' item type."""
    outcome: Outcome
    stop_reason: StopReason
    error: str | None
    """The error's message, when the run ended with one."""
    rounds: int
    usage: Usage
    proposed: tuple[PendingProposal, ...]
    """Proposals the run ended with, undecided (``AfterProposal.CONTINUE``)."""
    decisions: tuple[DecisionRecord, ...]
    """Every decision and resolution the run accepted."""
    checkpoint: RunCheckpoint


class DurableRuns:
    """Durable runs on one Temporal task queue.

    Example:
        >>> runs = await DurableRuns.connect("localhost:7233", task_queue="agents")  # doctest: +SKIP
        >>> handle = await runs.start(research, "find the docs")  # doctest: +SKIP
        >>> result = await handle.result()  # DurableResult[Doc]  # doctest: +SKIP
    """

    def __init__(self, client: Client, *, task_queue: str) -> None:
        self.client = client
        """The Temporal client (it must use ``temporalio.contrib.pydantic.pydantic_data_converter``)."""
        self.task_queue = task_queue

    @classmethod
    async def connect(cls, address: str, *, task_queue: str, namespace: str = "default") -> DurableRuns:
        """Connect to Temporal at ``address`` with the pydantic data converter."""
        return cls(await connect(address, namespace=namespace), task_queue=task_queue)

    async def start(
        self,
        agent: DurableAgent[Ctx, R],
        ctx: Ctx,
        *,
        run_id: str | None = None,
        execution_timeout: timedelta | None = None,
    ) -> RunHandle[R]:
        """Start a run of ``agent`` on ``ctx``; ``run_id`` (the workflow id) defaults to a fresh one."""
        ctx_json = agent.ctx_adapter.dump_python(ctx, mode="json")
        run_id = await self.start_named(agent.name, ctx_json, run_id=run_id, execution_timeout=execution_timeout)
        return self.get(agent, run_id)

    async def start_named(
        self, agent: str, ctx: Any, *, run_id: str | None = None, execution_timeout: timedelta | None = None
    ) -> str:
        """Start a run of the agent named ``agent`` with ``ctx`` as JSON (the CLI's way); its run id."""
        run_id = run_id or f"agentkit-{uuid.uuid4().hex}"
        await self.client.start_workflow(
            WORKFLOW_NAME,
            RunStart(agent=agent, ctx=ctx),
            id=run_id,
            task_queue=self.task_queue,
            execution_timeout=execution_timeout,
        )
        return run_id

    def get(self, agent: DurableAgent[Any, R], run_id: str) -> RunHandle[R]:
        """The handle of an existing run of ``agent``."""
        return RunHandle(self, agent, run_id)

    def _handle(self, run_id: str) -> WorkflowHandle[Any, DurableOutcome]:
        return self.client.get_workflow_handle(run_id, result_type=DurableOutcome)

    async def state(self, run_id: str) -> RunState:
        """The run's state and its pending proposals (the workflow's ``state`` Query)."""
        state: RunState = await self._handle(run_id).query("state", result_type=RunState)
        return state

    async def approve(self, run_id: str, round: int, digest: str, *, by: str, note: str = "") -> RunState:
        """Approve the proposal of ``round`` whose digest is ``digest``; the state after it.

        Raises:
            temporalio.client.WorkflowUpdateFailedError: the decision was refused (wrong digest, no
                such pending proposal, already decided, no ``by``); nothing changed.
        """
        return await self.decide(run_id, Decision(round=round, digest=digest, approve=True, by=by, reason=note))

    async def reject(self, run_id: str, round: int, digest: str, *, by: str, reason: str = "") -> RunState:
        """Reject the proposal of ``round``; the executor is shown ``reason``. Refusals as ``approve``."""
        return await self.decide(run_id, Decision(round=round, digest=digest, approve=False, by=by, reason=reason))

    async def decide(self, run_id: str, decision: Decision) -> RunState:
        """Send a decision (the workflow's validated ``decide`` Update)."""
        state: RunState = await self._handle(run_id).execute_update("decide", decision, result_type=RunState)
        return state

    async def resolve(self, run_id: str, round: int, digest: str, *, ran: bool, by: str, note: str = "") -> RunState:
        """Settle an approved call whose outcome is unknown: say whether it took effect; the run goes on
        with that as the call's observation. The call itself is never run again."""
        resolution = Resolution(round=round, digest=digest, ran=ran, by=by, note=note)
        state: RunState = await self._handle(run_id).execute_update("resolve", resolution, result_type=RunState)
        return state

    async def outcome(self, run_id: str) -> DurableOutcome:
        """Wait for the run to end; its result as JSON values (``RunHandle.result`` types the items)."""
        return await self._handle(run_id).result()

    async def list(self, *, limit: int = 100) -> list[RunSummary]:
        """The most recent runs on this namespace, newest first (Temporal's visibility store, which
        may lag a moment behind)."""
        found: list[RunSummary] = []
        async for execution in self.client.list_workflows(f"WorkflowType = '{WORKFLOW_NAME}'", limit=limit):
            status = execution.status.name if execution.status is not None else "UNKNOWN"
            found.append(RunSummary(run_id=execution.id, status=status, started_at=execution.start_time))
        return found


class RunHandle(Generic[R]):
    """One durable run of a known agent: typed result, state and decisions."""

    def __init__(self, runs: DurableRuns, agent: DurableAgent[Any, R], run_id: str) -> None:
        self.runs, self.agent, self.run_id = runs, agent, run_id

    async def state(self) -> RunState:
        return await self.runs.state(self.run_id)

    async def approve(self, proposal: PendingProposal, *, by: str, note: str = "") -> RunState:
        """Approve this pending proposal (bound to its digest)."""
        return await self.runs.approve(self.run_id, proposal.round, proposal.digest, by=by, note=note)

    async def reject(self, proposal: PendingProposal, *, by: str, reason: str = "") -> RunState:
        """Reject this pending proposal, with the reason the executor is shown."""
        return await self.runs.reject(self.run_id, proposal.round, proposal.digest, by=by, reason=reason)

    async def result(self) -> DurableResult[R]:
        """Wait for the run to end; its result with items typed by the agent's tools."""
        outcome = await self.runs.outcome(self.run_id)
        items: list[R] = TypeAdapter(list[self.agent.item_type]).validate_python(outcome.items)  # type: ignore[name-defined]  # a run-time type
        return DurableResult(
            run_id=outcome.run_id,
            items=items,
            outcome=outcome.outcome,
            stop_reason=outcome.stop_reason,
            error=outcome.error,
            rounds=outcome.rounds,
            usage=Usage(
                requests=outcome.requests, input_tokens=outcome.input_tokens, output_tokens=outcome.output_tokens
            ),
            proposed=tuple(outcome.proposals),
            decisions=tuple(outcome.decisions),
            checkpoint=outcome.checkpoint,
        )
