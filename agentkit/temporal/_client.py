"""The typed client: start durable runs, read their state, wait for it, decide their proposals, get their results."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from pydantic import BaseModel, JsonValue
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentkit._outcome import Outcome, StopReason
from agentkit._state import RunCheckpoint
from agentkit._trust import RunProvenance
from agentkit._usage import Usage, usage_of_counts
from agentkit.errors import AgentkitError, RunEnded, UsageError
from agentkit.temporal._agent import DurableAgent
from agentkit.temporal._errors import rebuild_error
from agentkit.temporal._spec import AgentSpec
from agentkit.temporal._tracing import started
from agentkit.temporal._values import (
    SETTLED,
    Decision,
    DecisionRecord,
    DurableOutcome,
    PendingProposal,
    Resolution,
    RunStart,
    RunState,
    RunStatus,
    RunSummary,
    Wait,
)
from agentkit.temporal._worker import connect
from agentkit.temporal._workflow import WORKFLOW_NAME

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["DurableResult", "DurableRuns", "RunHandle"]

Ctx = TypeVar("Ctx")
R = TypeVar("R")

WAIT_TIMEOUT = timedelta(minutes=5)
"""How long `wait_for` waits unless told (`timeout=None`: as long as it takes)."""
_POLL = 0.5
"""Seconds between looks when the run's workers predate the `wait` Update (a rolling deploy)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableResult(Generic[R]):
    """A finished durable run: the `TieredLoopResult`'s fields, items typed by the agent's tools."""

    run_id: str
    items: list[R]
    """Every item gathered, the approved calls' included, validated as the tools' item type."""
    outcome: Outcome
    stop_reason: StopReason
    error: AgentkitError | None
    """The error the run ended with, as in-process: its `agentkit.errors` class (a `ToolError` with its
    `tool_name`, a `ProviderError` with its `status`...) and its message, rebuilt from the run's
    result. `None` when it ended without one."""
    rounds: int
    usage: Usage
    proposed: tuple[PendingProposal, ...]
    """Proposals the run ended with, undecided (`AfterProposal.CONTINUE`)."""
    decisions: tuple[DecisionRecord, ...]
    """Every decision and resolution the run accepted."""
    checkpoint: RunCheckpoint
    cost: Decimal | None = None
    """What the run's model calls cost (`LoopConfig.prices`), as in-process; `None` without prices."""
    provenance: RunProvenance | None = None
    """What the run read that a third party could write, where each item came from, and whether untrusted
    content preceded the answer (`None`: the agent's config has no `ProvenancePolicy`)."""

    def raise_for_error(self) -> Self:
        """Raise `error` if the run ended in error; otherwise return the result itself."""
        if self.error is not None:
            raise self.error
        return self


class DurableRuns:
    """Durable runs on one Temporal task queue.

    Example:
        >>> runs = await DurableRuns.connect("localhost:7233", task_queue="agents")  # doctest: +SKIP
        >>> handle = await runs.start(research, "find the docs")  # doctest: +SKIP
        >>> result = await handle.result()  # DurableResult[Doc]  # doctest: +SKIP
    """

    def __init__(self, client: Client, *, task_queue: str, tracer: Tracer | None = None) -> None:
        self.client = client
        """The Temporal client (it must use `temporalio.contrib.pydantic.pydantic_data_converter`)."""
        self.task_queue = task_queue
        self.tracer = tracer
        """With one, each run is started in an `invoke_agent <agent>` span (see `connect`)."""

    @classmethod
    async def connect(
        cls, address: str, *, task_queue: str, namespace: str = "default", tracer: Tracer | None = None
    ) -> DurableRuns:
        """Connect to Temporal at `address` with the pydantic data converter.

        With a `tracer`, the client traces through temporalio's OpenTelemetry interceptor, and each run
        is started in an `invoke_agent <agent>` span (CLIENT) that the run's workflow and activity spans,
        and agentkit's spans in its activities (`build_worker(observer=OTelObserver())`), descend from:
        one trace per run, across workers and legs.
        """
        return cls(await connect(address, namespace=namespace, tracer=tracer), task_queue=task_queue, tracer=tracer)

    @overload
    async def start(
        self,
        agent: DurableAgent[Ctx, R] | AgentSpec[Ctx, R],
        ctx: Ctx,
        *,
        run_id: str | None = None,
        execution_timeout: timedelta | None = None,
    ) -> RunHandle[R]: ...
    @overload
    async def start(
        self,
        agent: str,
        ctx: object = None,
        *,
        run_id: str | None = None,
        execution_timeout: timedelta | None = None,
    ) -> RunHandle[JsonValue]: ...
    async def start(
        self,
        agent: DurableAgent[Any, Any] | AgentSpec[Any, Any] | str,
        ctx: Any = None,
        *,
        run_id: str | None = None,
        execution_timeout: timedelta | None = None,
    ) -> RunHandle[Any]:
        """Start a run of `agent` on `ctx`; `run_id` (the workflow id) defaults to a fresh one.

        `agent` is the `DurableAgent`, its `AgentSpec` (a client needs no more: no caller, no tools),
        or its name alone: then `ctx` is any JSON value (the workers validate it) and the handle's items
        are JSON values.

        Raises:
            UsageError: `ctx` does not validate as the agent's `ctx_type` (as the workflow would read it),
                or is not JSON; the message names the agent and each error. Nothing was started.
        """
        spec = _spec_of(agent)
        ctx_json = spec.ctx_json(ctx)
        run_id = await self.start_named(spec.name, ctx_json, run_id=run_id, execution_timeout=execution_timeout)
        return RunHandle(self, spec, run_id)

    async def start_named(
        self, agent: str, ctx: Any, *, run_id: str | None = None, execution_timeout: timedelta | None = None
    ) -> str:
        """Start a run of the agent named `agent` with `ctx` as JSON; its run id (`start(name, ctx)`
        gives a handle). The workers validate `ctx`: one that does not validate fails the run
        (`RunStatus.FAILED`, an `ApplicationError` of type `InvalidCtx` naming each error)."""
        run_id = run_id or f"agentkit-{uuid.uuid4().hex}"
        with started(self.tracer, agent, run_id):
            await self.client.start_workflow(
                WORKFLOW_NAME,
                RunStart(agent=agent, ctx=ctx),
                id=run_id,
                task_queue=self.task_queue,
                execution_timeout=execution_timeout,
            )
        return run_id

    @overload
    def get(self, agent: DurableAgent[Any, R] | AgentSpec[Any, R], run_id: str) -> RunHandle[R]: ...
    @overload
    def get(self, agent: str, run_id: str) -> RunHandle[JsonValue]: ...
    def get(self, agent: DurableAgent[Any, Any] | AgentSpec[Any, Any] | str, run_id: str) -> RunHandle[Any]:
        """The handle of an existing run of `agent` (the agent, its spec, or its name: items as JSON)."""
        return RunHandle(self, _spec_of(agent), run_id)

    def _handle(self, run_id: str) -> WorkflowHandle[Any, DurableOutcome]:
        return self.client.get_workflow_handle(run_id, result_type=DurableOutcome)

    async def state(self, run_id: str) -> RunState:
        """The run's state and its pending proposals (the workflow's `state` Query)."""
        state: RunState = await self._handle(run_id).query("state", result_type=RunState)
        return state

    async def approve(
        self,
        run_id: str,
        round: int,
        digest: str,
        *,
        by: str,
        note: str = "",
        args: BaseModel | Mapping[str, Any] | None = None,
    ) -> RunState:
        """Approve the proposal of `round` whose digest is `digest`; the state after it.

        `args` amends the call as it is approved: a value of the tool's args type, or a mapping of
        the fields to change. The workflow validates them as the tool's args type; the amended call
        runs once, with its own digest, and the executor is told which fields changed.

        Raises:
            temporalio.client.WorkflowUpdateFailedError: the decision was refused (wrong digest, no
                such pending proposal, already decided, no `by`, amended args that do not validate, a run
                that has ended, however late the decision came); nothing changed.
        """
        fields = None if args is None else dict(args.model_dump(mode="json") if isinstance(args, BaseModel) else args)
        decision = Decision(round=round, digest=digest, approve=True, by=by, reason=note, args=fields)
        return await self.decide(run_id, decision)

    async def reject(self, run_id: str, round: int, digest: str, *, by: str, reason: str = "") -> RunState:
        """Reject the proposal of `round`; the executor is shown `reason`. Refusals as `approve`."""
        return await self.decide(run_id, Decision(round=round, digest=digest, approve=False, by=by, reason=reason))

    async def decide(self, run_id: str, decision: Decision) -> RunState:
        """Send a decision (the workflow's validated `decide` Update). Refusals as `approve`."""
        return await self._update(run_id, "decide", decision)

    async def resolve(self, run_id: str, round: int, digest: str, *, ran: bool, by: str, note: str = "") -> RunState:
        """Settle an approved call whose outcome is unknown: say whether it took effect; the run goes on
        with that as the call's observation. The call itself is never run again.

        Raises:
            temporalio.client.WorkflowUpdateFailedError: the resolution was refused (wrong digest, no call of
                that round whose outcome is unknown, already resolved, no `by`, a run that has ended);
                nothing changed.
        """
        return await self._update(run_id, "resolve", Resolution(round=round, digest=digest, ran=ran, by=by, note=note))

    async def _update(self, run_id: str, name: str, sent: Decision | Resolution) -> RunState:
        """Send the Update `name`; one that reaches a run after it ended is refused as the validator refuses."""
        try:
            state: RunState = await self._handle(run_id).execute_update(name, sent, result_type=RunState)
        except RPCError as error:
            # Temporal answers NOT_FOUND for an Update that a run ended before taking, whether it came after
            # the end or was waiting for the run's worker meanwhile (the losers of a race to decide).
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            ended = error
        else:
            return state
        refusal = await self._ended_refusal(run_id, sent)
        if refusal is None:
            raise ended
        # Raised outside the handler: the refusal's cause is what it says, as for the validator's refusals.
        raise WorkflowUpdateFailedError(refusal)

    async def _ended_refusal(self, run_id: str, sent: Decision | Resolution) -> ApplicationError | None:
        """The refusal of `sent` by a run that has ended, as its validator words it (`DecisionRefused`); `None`
        when there is no such run (or it runs: Temporal's own error then stands)."""
        handle = self._handle(run_id)
        try:
            described = await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        if described.status in (None, WorkflowExecutionStatus.RUNNING):
            return None
        ended = described.status.name.lower().replace("_", " ")
        what = "decision" if isinstance(sent, Decision) else "resolution"
        said = ""
        if described.status is WorkflowExecutionStatus.COMPLETED:
            taken = [r for r in (await handle.result()).decisions if r.round == sent.round]
            if taken:
                said = f"; the proposal of round {sent.round} was already {_taken(taken)}"
        message = f"run {run_id!r} has ended ({ended}) and takes no {what}{said}. Nothing changed"
        return ApplicationError(message, type="DecisionRefused", non_retryable=True)

    async def wait_for(
        self,
        run_id: str,
        *statuses: RunStatus,
        timeout: timedelta | None = WAIT_TIMEOUT,  # noqa: ASYNC109  # the workflow's handler is bounded by it too
    ) -> RunState:
        """The run's state as soon as its status is one of `statuses` (`RunStatus.WAITING`,
        `RunStatus.OUTCOME_UNKNOWN`...), within `timeout` (5 minutes unless told; `None`: no bound).

        It does not poll: the workflow's `wait` Update answers once the status is reached, and a wait that
        outlives a leg of the run (continued as new at a wait for people) goes on on the next. Where the
        run's workers predate that Update, it looks at the state every half second instead.

        Raises:
            RunEnded: the run finished, failed or was refused (or was closed otherwise: timed out,
                terminated) before it reached one of `statuses`; the message says where it stands.
            TimeoutError: `timeout` passed first; the message names the status the run was in.
        """
        if not statuses:
            raise UsageError("wait_for needs the statuses to wait for, e.g. wait_for(run_id, RunStatus.WAITING)")
        wanted = frozenset(statuses)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout.total_seconds()
        state: RunState | None = None
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                state = await self.state(run_id)
                while state.status not in wanted:
                    if state.status in SETTLED:
                        raise _ended(state, wanted)
                    # The handler's own bound is a little after the client's, so the client's ends the wait.
                    left = None if deadline is None else max(deadline - loop.time(), 0.0) + 1.0
                    state = await self._next_state(run_id, wanted, Wait(statuses=tuple(statuses), seconds=left))
                return state
        except (TimeoutError, RPCTimeoutOrCancelledError):
            # The SDK words a cancelled Update as its own error; the timeout's cancellation is either.
            if not scope.expired():
                raise
            now = state.status.value if state is not None else "not yet seen"
            raise TimeoutError(f"run {run_id!r} did not reach {_names(wanted)} within {timeout}; it is {now}") from None

    async def _next_state(self, run_id: str, wanted: frozenset[RunStatus], wait: Wait) -> RunState:
        """The state the `wait` Update answers with; else the state once more, when the leg it reached
        ended before answering, or the run's workers do not know the Update."""
        try:
            state: RunState = await self._handle(run_id).execute_update("wait", wait, result_type=RunState)
        except WorkflowUpdateFailedError as failed:
            if getattr(failed.cause, "type", None) != "AcceptedUpdateCompletedWorkflow":
                await asyncio.sleep(_POLL)  # workers without the Update: look again, as a poll would
            return await self.state(run_id)
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
            return await self._closed(run_id, wanted)
        return state

    async def _closed(self, run_id: str, wanted: frozenset[RunStatus]) -> RunState:
        """The state of a run closed while it was waited on: its last state when that says it ended (or is
        what was waited for, or a next leg has begun); else `RunEnded` with Temporal's status."""
        state = await self.state(run_id)
        if state.status in wanted or state.status in SETTLED:
            return state
        described = await self._handle(run_id).describe()
        if described.status in (None, WorkflowExecutionStatus.RUNNING):
            return state
        closed = described.status.name.lower()
        raise RunEnded(
            f"run {run_id!r} was {closed.replace('_', ' ')} while {state.status.value}; it will not reach "
            f"{_names(wanted)}",
            run_id=run_id,
            status=closed,
        )

    async def outcome(self, run_id: str) -> DurableOutcome:
        """Wait for the run to end; its result as JSON values (`RunHandle.result` types the items)."""
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
    """One durable run of a known agent: typed result, state, waits and decisions."""

    def __init__(self, runs: DurableRuns, agent: DurableAgent[Any, R] | AgentSpec[Any, R], run_id: str) -> None:
        self.runs, self.agent, self.run_id = runs, agent, run_id
        self.spec: AgentSpec[Any, R] = _spec_of(agent)
        """What the handle knows of the agent: its name, ctx type and item type."""

    async def state(self) -> RunState:
        return await self.runs.state(self.run_id)

    async def wait_for(
        self,
        *statuses: RunStatus,
        timeout: timedelta | None = WAIT_TIMEOUT,  # noqa: ASYNC109  # as DurableRuns.wait_for
    ) -> RunState:
        """The run's state once its status is one of `statuses`; see `DurableRuns.wait_for`."""
        return await self.runs.wait_for(self.run_id, *statuses, timeout=timeout)

    async def approve(
        self, proposal: PendingProposal, *, by: str, note: str = "", args: BaseModel | Mapping[str, Any] | None = None
    ) -> RunState:
        """Approve this pending proposal (bound to its digest), amended by `args` (see `DurableRuns.approve`)."""
        return await self.runs.approve(self.run_id, proposal.round, proposal.digest, by=by, note=note, args=args)

    async def reject(self, proposal: PendingProposal, *, by: str, reason: str = "") -> RunState:
        """Reject this pending proposal, with the reason the executor is shown."""
        return await self.runs.reject(self.run_id, proposal.round, proposal.digest, by=by, reason=reason)

    async def result(self) -> DurableResult[R]:
        """Wait for the run to end; its result with items typed by the agent's tools and its error rebuilt.

        Raises:
            temporalio.client.WorkflowFailureError: the run failed (its agent unknown to the workers, its
                ctx invalid, its tools changed under it); the cause's `type` and message say which.
        """
        outcome = await self.runs.outcome(self.run_id)
        items: list[R] = self.spec.items_adapter.validate_python(outcome.items)
        error = None
        if outcome.error is not None:
            # A result recorded before errors carried their type rebuilds as the root, message kept.
            error = rebuild_error(outcome.error_type or "AgentkitError", outcome.error, outcome.error_fields)
        return DurableResult(
            run_id=outcome.run_id,
            items=items,
            outcome=outcome.outcome,
            stop_reason=outcome.stop_reason,
            error=error,
            rounds=outcome.rounds,
            usage=usage_of_counts(outcome),
            cost=None if outcome.cost is None else Decimal(outcome.cost),
            proposed=tuple(outcome.proposals),
            decisions=tuple(outcome.decisions),
            checkpoint=outcome.checkpoint,
            provenance=outcome.provenance,
        )


def _spec_of(agent: DurableAgent[Any, R] | AgentSpec[Any, R] | str) -> AgentSpec[Any, Any]:
    if isinstance(agent, str):
        return AgentSpec.named(agent)
    if isinstance(agent, AgentSpec):
        return agent
    return agent.spec


def _taken(records: list[DecisionRecord]) -> str:
    """What a run did with a round's proposal, as the validator says it: `decided (approved by alice)`,
    then `resolved (resolved_not_ran by ops)` for its lost call."""
    return ", then ".join(
        f"{'resolved' if r.kind.startswith('resolved') else 'decided'} ({r.kind} by {r.by})" for r in records
    )


def _names(statuses: frozenset[RunStatus]) -> str:
    return " or ".join(sorted(status.value for status in statuses))


def _ended(state: RunState, wanted: frozenset[RunStatus]) -> RunEnded:
    why = state.error or state.refused
    if state.outcome is not None:
        why = f"{state.outcome.outcome.value}, {state.outcome.stop_reason.value}"
    return RunEnded(
        f"run {state.run_id!r} is {state.status.value} ({why}); it will not reach {_names(wanted)}",
        run_id=state.run_id,
        status=state.status.value,
    )
