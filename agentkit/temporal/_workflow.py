"""The tool loop as a Temporal workflow, over the same loop core.

The workflow runs a `ToolLoop` (and its `resume` after each decision) with
two seams swapped for activities: the model caller (each attempt of `generate_structured` is a local
activity, run by the worker that plays the workflow task; its waits between attempts are workflow
timers) and the tools (a live READ_ONLY call is a local activity too, since it may run again; any
other call, an approved one included, is an activity of its own). A round of READ_ONLY calls then
takes no workflow task of its own: its model reply and its tool batch are markers of the task that
plays it, and a run's rounds share tasks until one calls anything else or waits.
Everything else (rendering, the step schema, gating by tier, the repeat guard, proposals,
checkpoints) is the in-process code, replayed deterministically from the activities' recorded
results: the run id is the workflow id, and the workflow's own clock stamps what it records.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar, NoReturn

from pydantic import TypeAdapter
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentkit._admission import admit_tools, tool_entries
from agentkit._approval import Approval, Rejection, amended, approve, reject
from agentkit._codec import Codec
from agentkit._proposals import ProposedAction, validate_args
from agentkit._provenance import provenance_at
from agentkit._results import TieredLoopResult
from agentkit._runner import ToolLoop, pending_proposals
from agentkit._state import DecisionEntry, RoundEntry, RunCheckpoint, ToolEntry
from agentkit._usage import usage_counts
from agentkit.errors import ApprovalError, ResumeRefused, ToolSetChanged, UsageError
from agentkit.temporal._activities import RECORD_TOOLS
from agentkit.temporal._agent import DurableAgent
from agentkit.temporal._errors import error_fields, error_kind
from agentkit.temporal._seams import ONCE, ActivityCaller, ActivityGrants, ActivityTool, Carried, InFlight
from agentkit.temporal._values import (
    SETTLED,
    Decision,
    DecisionRecord,
    DurableOutcome,
    Leg,
    PendingProposal,
    Resolution,
    RunStart,
    RunState,
    RunStatus,
    ToolSet,
    Wait,
)

WORKFLOW_NAME = "agentkit.run"

_LEGS = "agentkit-legs"
"""The patch that records a run's tool set in its history and continues the run as new at each wait for
people (runs started before it replay as they ran: no recorded tools, decisions taken in place)."""

_LOCAL_MODEL = "agentkit-local-model"
"""The patch that makes each model attempt a local activity (a marker in the workflow task that asked for
it) rather than an activity of its own with its own workflow task; runs recorded before it replay as they
ran, every attempt an activity."""

_LOCAL_READS = "agentkit-local-reads"
"""The patch that makes each live READ_ONLY tool call a local activity (a marker in the workflow task that
asked for it); runs recorded before it replay as they ran, every tool call an activity."""

_PAYLOADS = "agentkit-payload-budget"
"""The patch that refuses a tool batch that would take a run's items past its payload limit (`Carried`); runs
recorded before it replay as they ran."""

_GRANTS = "agentkit-grants"
"""The patch that asks the grant activity about each proposal of an agent with standing grants
(`DurableAgent.grants`); runs recorded before it replay as they ran, every proposal waiting for people."""

_GRANT_ASK_TIMEOUT = timedelta(seconds=30)

_log = logging.getLogger("agentkit.temporal")


def _refused(message: str) -> ApplicationError:
    return ApplicationError(message, type="DecisionRefused", non_retryable=True)


class AgentRun:
    """The workflow's body; `workflow_for` makes the registered class, which knows its agents."""

    agents: ClassVar[dict[str, DurableAgent[Any, Any]]] = {}

    @workflow.init
    def __init__(self, start: RunStart) -> None:
        # Set from the input before any handler runs: an Update may be applied in the same activation as
        # the start of a replay, before ``run`` has begun.
        self.run_id = workflow.info().workflow_id
        self.agent = start.agent
        self.start = start
        self.status = RunStatus.RUNNING
        self.rounds = 0
        self.requests = 0
        self.pending: dict[tuple[int, str], PendingProposal] = {}
        """The proposals the run waits on, by round and digest (a step of several calls may propose several)."""
        self.decided: dict[tuple[int, str], Decision] = {}
        self.unknown: PendingProposal | None = None
        self.resolution: Resolution | None = None
        self.records: list[DecisionRecord] = []
        self.outcome: DurableOutcome | None = None
        self.lost: list[str] = []
        self.tools: tuple[ToolEntry, ...] | None = None
        """The run's recorded tool set (`None`: a run recorded before tool sets were, replayed as it ran)."""
        self.refusal: ToolSetChanged | None = None
        """Why the worker's tools cannot carry on the run (`RunStatus.REFUSED`)."""
        self.error: str | None = None
        """Why the run failed before it could play (`RunStatus.FAILED`)."""
        self.budget = False
        """Whether the run counts its payloads (`_PAYLOADS`): one recorded before replays as it ran, unchecked."""
        leg, durable = start.leg, self.agents.get(start.agent)
        if leg is None or durable is None:
            return
        self.tools, self.records = leg.checkpoint.tools, list(leg.decisions)
        if self.admit(durable):
            if leg.unknown is not None:
                self.resolving(leg.checkpoint, leg.unknown)
            else:
                self.waiting(leg.checkpoint)

    @workflow.run
    async def run(self, start: RunStart) -> DurableOutcome:
        durable = self.agents.get(start.agent)
        if durable is None:
            self.fail(
                f"no durable agent named {start.agent!r} (this worker serves {sorted(self.agents)})", "UnknownAgent"
            )
        ctx = self.ctx_of(durable)
        leg = start.leg
        # First of the leg's commands: a patch marker may not follow a local activity's marker in one task.
        local = workflow.patched(_LOCAL_MODEL)
        local_reads = local and workflow.patched(_LOCAL_READS)
        self.budget = budget = local_reads and workflow.patched(_PAYLOADS)
        asks_grants = budget and durable.grants is not None and workflow.patched(_GRANTS)
        # A first leg recorded before legs existed replays as it ran then: no recorded tools, decided in place.
        if leg is None and workflow.patched(_LEGS):
            self.tools = await self.recorded_tools(durable)
            self.admit(durable)
        if self.refusal is not None:
            await self.refused(self.refusal)
        in_flight = InFlight()
        caller = ActivityCaller(start.agent, durable, in_flight, local=local)
        carried = Carried(durable.policy.payload_limit, leg.checkpoint if leg else None, enforced=budget)
        proxies = [
            ActivityTool(start.agent, durable, name, self.lost, in_flight, carried, local=local_reads)
            for name in durable.box.tools
        ]
        proxied: Any = proxies if durable.box.single is None else proxies[0]
        loop = ToolLoop(caller, durable.agent, proxied, durable.workflow_config(), observer=in_flight)
        if asks_grants:
            loop._asking_grants(ActivityGrants(start.agent, _GRANT_ASK_TIMEOUT))
        if leg is None:
            result = await loop.run(ctx, run_id=self.run_id)
        elif leg.unknown is not None:
            result = await self.on_resolution(leg.checkpoint, loop, ctx)
        else:
            result = await self.on_decisions(leg.checkpoint, loop, durable, ctx)
        while not result.checkpoint.finished:
            if self.tools is not None:
                # The wait for people starts a new leg whose history holds the state (see ``Leg``).
                self.continue_leg(result.checkpoint)
            self.waiting(result.checkpoint)
            result = await self.on_decisions(result.checkpoint, loop, durable, ctx)
        outcome = self.finished(durable, result)
        self.fits(outcome, durable, "outcome")
        self.outcome = outcome
        self.status = RunStatus.FINISHED
        return self.outcome

    def fits(self, value: DurableOutcome | RunStart, durable: DurableAgent[Any, Any], what: str) -> None:
        """Fail the run, saying why, when `value` (its outcome, or the next leg's input) is larger than one
        payload may be: Temporal would otherwise retry the workflow task that carries it forever. The size is
        the payload as the converter writes it, before any payload codec. A run recorded before its payloads
        were counted (without `_PAYLOADS`) is not checked: it replays as it ran."""
        if not self.budget:
            return
        limit = durable.policy.payload_limit
        [payload] = workflow.payload_converter().to_payloads([value])
        size = payload.ByteSize()
        if size > limit:
            self.fail(
                f"run {self.run_id!r} cannot carry its {what}: it takes {size:,} bytes, more than one Temporal payload "
                f"holds ({limit:,}, ActivityPolicy.payload_limit); its state is too large (its rounds' text and "
                "items). Return smaller batches, or raise the server's limit.blobSize.error and payload_limit together",
                "PayloadTooLarge",
            )

    def ctx_of(self, durable: DurableAgent[Any, Any]) -> Any:
        """The run's ctx, validated as the agent's `ctx_type` before anything runs; a ctx that does not
        validate fails the run, naming the agent and each error (not a workflow task retried forever)."""
        try:
            return durable.spec.ctx_of(self.start.ctx)
        except UsageError as wrong:
            self.fail(str(wrong), "InvalidCtx")

    def fail(self, message: str, kind: str) -> NoReturn:
        """Fail the run before it plays (`RunStatus.FAILED`, the message in `RunState.error`)."""
        self.status, self.error = RunStatus.FAILED, message
        raise ApplicationError(message, type=kind, non_retryable=True)

    async def recorded_tools(self, durable: DurableAgent[Any, Any]) -> tuple[ToolEntry, ...]:
        """The tool set of the worker that first runs the run, kept in its history (a local activity's
        result): a replay reads it back, not the replaying worker's."""
        given = ToolSet(agent=self.agent, tools=tool_entries(durable.box.tools))
        recorded: ToolSet = await workflow.execute_local_activity(
            RECORD_TOOLS, given, result_type=ToolSet, start_to_close_timeout=timedelta(seconds=10), retry_policy=ONCE
        )
        return recorded.tools

    def admit(self, durable: DurableAgent[Any, Any]) -> bool:
        """Admit the worker's tools against the run's recorded ones, before anything runs; on a difference
        the run is `REFUSED` (`refused` fails it)."""
        assert self.tools is not None
        try:
            admit_tools(self.run_id, self.tools, durable.box.tools)
        except ToolSetChanged as changed:
            self.status, self.refusal = RunStatus.REFUSED, changed
            _log.warning("%s", changed)
            return False
        return True

    async def refused(self, changed: ToolSetChanged) -> NoReturn:
        """Fail the run, naming what differs in its tools.

        Replaying, the run first waits for the live end of its history: a waiting leg has issued no
        command, so nothing is out of step, and the first decision sent to it (an Update, accepted so that
        it is kept in history) fails, with the run, naming the difference; a Query meanwhile shows
        `RunStatus.REFUSED`. A leg that had already made calls cannot replay on other tools at all: its
        task fails as a nondeterminism error, running nothing, until a worker with the run's tools takes it.
        """
        await workflow.wait_condition(lambda: not workflow.unsafe.is_replaying())
        # Not a workflow-task failure, which Temporal retries forever: the run fails and says why.
        raise ApplicationError(str(changed), list(changed.problems), type="ToolSetChanged", non_retryable=True)

    def continue_leg(self, checkpoint: RunCheckpoint, unknown: PendingProposal | None = None) -> NoReturn:
        """Continue the run as new from `checkpoint`: its next leg starts by waiting for people."""
        assert self.tools is not None
        leg = Leg(checkpoint=checkpoint, decisions=tuple(self.records), unknown=unknown)
        start = RunStart(agent=self.agent, ctx=self.start.ctx, leg=leg)
        self.fits(start, self.agents[self.agent], "state into its next leg")
        workflow.continue_as_new(start)

    def waiting(self, checkpoint: RunCheckpoint) -> None:
        """The run stopped at the checkpoint's proposals: they wait for decisions."""
        now = workflow.now()
        tools = self.agents[self.agent].box.tools
        self.pending = {
            (entry.round, entry.call_digest or ""): _pending(entry, now, checkpoint, tools)
            for entry in checkpoint.proposals
        }
        self.decided, self.rounds, self.requests = {}, checkpoint.rounds, checkpoint.usage.requests
        self.status = RunStatus.WAITING

    async def on_decisions(
        self, checkpoint: RunCheckpoint, loop: ToolLoop[Any, Any, Any, Any], durable: DurableAgent[Any, Any], ctx: Any
    ) -> TieredLoopResult[Any, Any]:
        """Wait for a decision on each pending proposal, then continue the run with them."""
        await workflow.wait_condition(lambda: len(self.decided) == len(self.pending))
        self.status = RunStatus.RUNNING
        decisions: list[Approval[Any] | Rejection[Any]] = []
        for stored, proposal in pending_proposals(checkpoint, Codec(durable.box.tools)):
            decision = self.decided[(stored.round, stored.call_digest or "")]
            if decision.approve:
                decisions.append(approve(proposal, approved_by=decision.by, note=decision.reason, args=decision.args))
            else:
                decisions.append(reject(proposal, rejected_by=decision.by, reason=decision.reason))
        pending, self.pending, self.lost[:] = self.pending, {}, []
        result: TieredLoopResult[Any, Any] = await loop.resume(ctx, checkpoint, decisions)
        if not self.lost:
            return result
        # The approved call's outcome is unknown: a human says whether it took effect; it never re-runs.
        lost = _lost_call(pending, result.checkpoint)
        if lost is None:
            # A call a standing grant approved later in the leg: no person decided it, none can account for it here.
            raise ApplicationError(
                "the outcome of a call a standing grant approved is unknown (its activity ended without one); it is "
                "not re-run, and the run ends here",
                type="OutcomeLost",
                non_retryable=True,
            )
        if self.tools is not None:
            self.continue_leg(checkpoint, lost)
        self.resolving(checkpoint, lost)
        return await self.on_resolution(checkpoint, loop, ctx)

    def resolving(self, checkpoint: RunCheckpoint, lost: PendingProposal) -> None:
        """The approved call `lost` ended without an outcome: a human's account of it is awaited."""
        self.rounds, self.requests = checkpoint.rounds, checkpoint.usage.requests
        self.unknown, self.resolution, self.status = lost, None, RunStatus.OUTCOME_UNKNOWN

    async def on_resolution(
        self, checkpoint: RunCheckpoint, loop: ToolLoop[Any, Any, Any, Any], ctx: Any
    ) -> TieredLoopResult[Any, Any]:
        """Wait for the account of the lost call, then go on with it as the call's observation."""
        await workflow.wait_condition(lambda: self.resolution is not None)
        assert self.resolution is not None
        self.unknown, self.status = None, RunStatus.RUNNING
        resolved = _resolved(checkpoint, self.resolution)
        try:
            after: TieredLoopResult[Any, Any] = await loop.resume(ctx, resolved)
        except ResumeRefused as refused:
            # Another call of the lost call's step was decided too (it may have run): resuming would need its
            # decision again, and could run it twice. The run ends here, saying so, rather than retry for ever.
            raise ApplicationError(
                f"the run cannot go on after the lost call's account: {refused}; nothing was run again",
                type="ResumeRefused",
                non_retryable=True,
            ) from refused
        return after

    def finished(self, durable: DurableAgent[Any, Any], result: TieredLoopResult[Any, Any]) -> DurableOutcome:
        items = TypeAdapter(list[durable.item_type]).dump_python(result.items, mode="json")  # type: ignore[name-defined]  # a run-time type
        now = workflow.now()
        proposals = [
            PendingProposal(
                round=p.round,
                tool_name=p.tool_name,
                tier=p.tier,
                args=p.args.model_dump(mode="json"),
                rationale=p.rationale,
                digest=p.digest,
                proposed_at=now,
                provenance=None if p.evidence is None else p.evidence.provenance,
            )
            for p in result.proposed
        ]
        return DurableOutcome(
            run_id=self.run_id,
            outcome=result.outcome,
            stop_reason=result.stop_reason,
            error=str(result.error) if result.error is not None else None,
            error_type=error_kind(result.error) if result.error is not None else None,
            error_fields=error_fields(result.error) if result.error is not None else {},
            rounds=result.rounds,
            **usage_counts(result.usage),
            cost=None if result.cost is None else str(result.cost),
            items=items,
            proposals=proposals,
            decisions=list(self.records),
            checkpoint=result.checkpoint,
            provenance=result.provenance,
        )

    @workflow.query(name="state")
    def state(self) -> RunState:
        return RunState(
            run_id=self.run_id,
            agent=self.agent,
            status=self.status,
            rounds=self.outcome.rounds if self.outcome else self.rounds,
            requests=self.outcome.requests if self.outcome else self.requests,
            pending=[p for key, p in sorted(self.pending.items()) if key not in self.decided],
            unknown=self.unknown,
            decisions=list(self.records),
            outcome=self.outcome,
            refused=str(self.refusal) if self.refusal is not None else None,
            error=self.error,
        )

    def check_decision(self, decision: Decision) -> PendingProposal:
        if self.refusal is not None:
            raise _refused(f"{self.refusal}; the decision changed nothing")
        if not decision.by.strip():
            raise _refused("a decision must name who decided (by=...); nothing changed")
        key = (decision.round, decision.digest)
        earlier = [r for r in self.records if (r.round, r.digest) == key]
        if key in self.decided or (earlier and key not in self.pending):
            said = f" ({earlier[-1].kind} by {earlier[-1].by})" if earlier else ""
            raise _refused(
                f"the proposal of round {decision.round} was already decided{said}; a proposal takes one "
                "decision. Nothing changed"
            )
        proposal = self.pending.get(key)
        if proposal is None or self.status is not RunStatus.WAITING:
            waiting = [f"round {r} {p.tool_name!r} digest {d[:12]!r}" for (r, d), p in sorted(self.pending.items())]
            of_round = [w for (r, _), w in zip(sorted(self.pending), waiting, strict=True) if r == decision.round]
            why = "a decision binds to the exact call" if of_round else "nothing of that round waits"
            raise _refused(
                f"run {self.run_id!r} has no pending proposal of round {decision.round} with digest "
                f"{decision.digest[:12]!r} ({why}; pending: {', '.join(waiting) or 'none'}); nothing changed"
            )
        if decision.args is not None:
            self.check_amendment(proposal, decision)
        return proposal

    def check_amendment(self, proposal: PendingProposal, decision: Decision) -> None:
        """Refuse amended args that a rejection carries, or that do not validate as the tool's args type."""
        if not decision.approve:
            raise _refused("amended args go with an approval; a rejection takes none. Nothing changed")
        durable = self.agents[self.agent]
        args_type = durable.box.tools[proposal.tool_name].args_type
        assert decision.args is not None
        proposed = validate_args(args_type, json.dumps(proposal.args, ensure_ascii=False))
        call = ProposedAction.create(tool_name=proposal.tool_name, tier=proposal.tier, args=proposed, round=0)
        try:
            amended(call, decision.args, amended_by=decision.by)
        except ApprovalError as refused:
            raise _refused(f"{refused}; nothing changed") from refused

    @workflow.update(name="decide")
    def decide(self, decision: Decision) -> RunState:
        proposal = self.check_decision(decision)
        self.decided[(decision.round, decision.digest)] = decision
        kind = "approved" if decision.approve else "rejected"
        self.records.append(_record(proposal, kind, decision.by, decision.reason))
        return self.state()

    @decide.validator
    def validate_decide(self, decision: Decision) -> None:
        if self.refusal is None:  # a refused run takes the Update, so that it is in history, and fails with it
            self.check_decision(decision)

    def check_resolution(self, resolution: Resolution) -> PendingProposal:
        if self.refusal is not None:
            raise _refused(f"{self.refusal}; the resolution changed nothing")
        if not resolution.by.strip():
            raise _refused("a resolution must name who resolved it (by=...); nothing changed")
        unknown = self.unknown
        if unknown is None or self.resolution is not None or unknown.round != resolution.round:
            raise _refused(
                f"run {self.run_id!r} has no call of round {resolution.round} whose outcome is unknown; nothing changed"
            )
        if resolution.digest != unknown.digest:
            raise _refused(
                f"digest {resolution.digest[:12]!r} is not that of the call of round {resolution.round}; "
                "nothing changed"
            )
        return unknown

    @workflow.update(name="resolve")
    def resolve(self, resolution: Resolution) -> RunState:
        unknown = self.check_resolution(resolution)
        self.resolution = resolution
        kind = "resolved_ran" if resolution.ran else "resolved_not_ran"
        self.records.append(_record(unknown, kind, resolution.by, resolution.note))
        return self.state()

    @resolve.validator
    def validate_resolve(self, resolution: Resolution) -> None:
        if self.refusal is None:  # as validate_decide
            self.check_resolution(resolution)

    @workflow.update(name="wait", unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def wait(self, wait: Wait) -> RunState:
        """The state once the run is in one of `wait.statuses` or settled (finished, failed, refused), or
        once `wait.seconds` have passed: what `RunHandle.wait_for` waits on, without polling. A leg that
        ends (continued as new at a wait, or finished) abandons it; the client asks the next leg."""
        wanted = set(wait.statuses) | SETTLED
        timeout = timedelta(seconds=wait.seconds) if wait.seconds is not None else None
        # The client's own timeout ends its wait; this one only keeps the handler from outliving it.
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self.status in wanted, timeout=timeout)
        return self.state()


def workflow_for(agents: dict[str, DurableAgent[Any, Any]]) -> type[AgentRun]:
    """The workflow class serving `agents` (one class per worker; its workflow name is `agentkit.run`).

    It is not sandboxed: the loop core it runs is replayed deterministically (run id from the
    workflow id, proposals and decisions stamped with workflow time, every model call and every live
    READ_ONLY tool call a local activity, every other tool call an activity), and the agents' `render`
    must be deterministic too.
    """
    served = type("AgentRun", (AgentRun,), {"agents": dict(agents), "__module__": __name__})
    defined: type[AgentRun] = workflow.defn(name=WORKFLOW_NAME, sandboxed=False)(served)
    return defined


def _pending(stored: RoundEntry, now: Any, state: RunCheckpoint, tools: Mapping[str, object]) -> PendingProposal:
    assert stored.tool is not None
    assert stored.tier is not None
    assert stored.args is not None
    return PendingProposal(
        round=stored.round,
        tool_name=stored.tool,
        tier=stored.tier,
        args=json.loads(stored.args),
        rationale=stored.rationale,
        digest=stored.call_digest or "",
        proposed_at=now,
        provenance=provenance_at(state, stored, tools),
    )


def _record(proposal: PendingProposal, kind: str, by: str, reason: str) -> DecisionRecord:
    return DecisionRecord(
        round=proposal.round,
        tool_name=proposal.tool_name,
        digest=proposal.digest,
        kind=kind,
        by=by,
        reason=reason,
        at=workflow.now(),
    )


def _lost_call(pending: Mapping[tuple[int, str], PendingProposal], after: RunCheckpoint) -> PendingProposal | None:
    """The pending proposal whose approved call lost its outcome: the one whose decision, the last the leg recorded,
    carries the error (the leg ended there); `None` when that call was not one people decided (a granted one)."""
    for entry in reversed(after.entries):
        if isinstance(entry, DecisionEntry) and entry.approved and entry.error is not None:
            return pending.get((entry.round, entry.call_digest))
    return None


def _resolved(checkpoint: RunCheckpoint, resolution: Resolution) -> RunCheckpoint:
    """The state with the lost call settled by the human's account, as that call's decision: its
    observation, no batch. Resuming from it goes on to the next round without running it."""
    said = "it took effect" if resolution.ran else "it did not take effect"
    note = f": {resolution.note}" if resolution.note else ""
    observation = (
        f"outcome unknown (its worker was lost, it was not re-run); {resolution.by} established that {said}{note}"
    )
    decision = DecisionEntry(
        round=resolution.round,
        call_digest=resolution.digest,
        approved=True,
        by=resolution.by,
        reason=resolution.note,
        observation=observation,
        elapsed=checkpoint.progress.elapsed,
    )
    return checkpoint.appended(decision)
