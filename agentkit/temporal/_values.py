"""The values that cross the Temporal boundary: workflow input and output, activity payloads, the
Update and Query shapes. All pydantic, so `temporalio.contrib.pydantic`'s converter carries them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, JsonValue

from agentkit._grants import Grant
from agentkit._outcome import Outcome, StopReason
from agentkit._state import RunCheckpoint, ToolEntry
from agentkit._tiers import Tier
from agentkit._trust import ArgOrigin, CallProvenance, RunProvenance

__all__ = [
    "SETTLED",
    "Decision",
    "DecisionRecord",
    "DurableOutcome",
    "GrantAsk",
    "GrantReply",
    "Leg",
    "ModelCall",
    "ModelReply",
    "PendingProposal",
    "Resolution",
    "RunStart",
    "RunState",
    "RunStatus",
    "RunSummary",
    "ToolCallInput",
    "ToolReply",
    "ToolSet",
    "Wait",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class RunStatus(StrEnum):
    """Where a durable run stands."""

    RUNNING = "running"
    """Rounds are being played (or the run is about to start)."""
    WAITING = "waiting"
    """Stopped at a proposal; waits for a decision (approve or reject) by Update."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """An approved call's activity was lost (its worker died); a human must say whether it ran."""
    FINISHED = "finished"
    """Ended; `RunState.outcome` holds the result."""
    FAILED = "failed"
    """Failed before it could play: no agent of its name on the worker, or a ctx that does not validate as
    the agent's `ctx_type`; `RunState.error` says why (`result()` raises `WorkflowFailureError`)."""
    REFUSED = "refused"
    """The worker's tools are not the ones the run recorded (a redeploy changed a tier, a trust or an egress,
    added or removed a tool, or changed a tool's args); `RunState.refused` says what differs. Nothing runs;
    the run fails as soon as an Update or a signal reaches it on such a worker."""


SETTLED = frozenset({RunStatus.FINISHED, RunStatus.FAILED, RunStatus.REFUSED})
"""The statuses a run does not leave on its own (a refused run fails at the first Update that reaches it)."""


class RunStart(BaseModel):
    """The workflow's input: which agent, and its ctx as JSON (validated by the agent's `ctx_type`);
    a leg after the first (continued as new at a wait) also carries the run's state (`leg`)."""

    model_config = _FROZEN
    agent: str
    ctx: JsonValue = None
    leg: Leg | None = None
    """`None`: the run's first leg. Else what the run goes on from."""


class PendingProposal(BaseModel):
    """A proposed call as the Query shows it; decide it by its `round` and `digest`."""

    model_config = _FROZEN
    round: int
    """The round that proposed it: the proposal's id within its run."""
    tool_name: str
    tier: Tier
    args: dict[str, JsonValue]
    rationale: str = ""
    digest: str
    """`call_digest(tool_name, args)`: a decision must quote it."""
    proposed_at: datetime
    """Workflow time when the run stopped at it."""
    provenance: CallProvenance | None = None
    """Whether untrusted content preceded it, and which argument values first appeared there (`None`: the
    agent's config has no `ProvenancePolicy`)."""


class Decision(BaseModel):
    """The argument of the `decide` Update: approve or reject one pending proposal."""

    model_config = _FROZEN
    round: int
    """The proposal's round (`PendingProposal.round`)."""
    digest: str
    """The proposal's digest: a decision binds to exactly that call."""
    approve: bool
    by: str
    """Who decided (a person or an account; not empty)."""
    reason: str = ""
    """Why: the approver's note, or the rejection's reason (the executor is shown it)."""
    args: dict[str, JsonValue] | None = None
    """An approval's amended args: the fields to change, as JSON data (validated as the tool's args type;
    the amended call runs, with its own digest, and the executor is told which fields changed)."""


class Resolution(BaseModel):
    """The argument of the `resolve` Update: a human's account of a call whose outcome was lost."""

    model_config = _FROZEN
    round: int
    digest: str
    ran: bool
    """Whether the call took effect, as the human established it."""
    by: str
    note: str = ""


class DecisionRecord(BaseModel):
    """A decision (or resolution) the run accepted, as it keeps it."""

    model_config = _FROZEN
    round: int
    tool_name: str
    digest: str
    kind: str
    """`approved`, `rejected`, `resolved_ran` or `resolved_not_ran`."""
    by: str
    reason: str = ""
    at: datetime
    """Workflow time when it was accepted."""


class DurableOutcome(BaseModel):
    """The workflow's result: the `TieredLoopResult` as JSON (items through the tools' item types)."""

    model_config = _FROZEN
    run_id: str
    outcome: Outcome
    stop_reason: StopReason
    error: str | None = None
    """The message of the error the run ended with."""
    error_type: str | None = None
    """Its class in `agentkit.errors` (`ToolError`, `ProviderError`...): the client rebuilds it."""
    error_fields: dict[str, JsonValue] = {}
    """Its own fields (`tool_name`, `transient`, `status`...)."""
    rounds: int
    requests: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: str | None = None
    """`result.cost`, as the decimal's text (`None` without prices)."""
    items: list[JsonValue]
    proposals: list[PendingProposal] = []
    """Proposals the run ended with (`AfterProposal.CONTINUE` runs end with them, undecided)."""
    decisions: list[DecisionRecord] = []
    checkpoint: RunCheckpoint
    provenance: RunProvenance | None = None
    """What the run read that a third party could write, and whether it preceded the answer (`None`: no
    `ProvenancePolicy`, or a run recorded before provenance)."""


class Leg(BaseModel):
    """A run continued as new where it waits for people: its state, its recorded tools, its decisions.

    A leg's history then starts with everything the run needs, and a worker that replays it admits its
    tools against the state's before anything else (a waiting leg has issued no command yet, so a refusal
    fails the run cleanly instead of breaking the replay)."""

    model_config = _FROZEN
    checkpoint: RunCheckpoint
    """Where the run stopped: at a proposal (its decisions awaited), or before a lost call's resolution.
    It records the tool set the run's first leg ran with."""
    decisions: tuple[DecisionRecord, ...] = ()
    """Every decision and resolution the run accepted so far."""
    unknown: PendingProposal | None = None
    """An approved call whose outcome was lost: the leg waits for a human's resolution of it."""


class RunState(BaseModel):
    """The `state` Query's answer."""

    model_config = _FROZEN
    run_id: str
    agent: str
    status: RunStatus
    rounds: int = 0
    requests: int = 0
    pending: list[PendingProposal] = []
    """Proposals waiting for a decision (status `WAITING`)."""
    unknown: PendingProposal | None = None
    """The approved call whose outcome was lost (status `OUTCOME_UNKNOWN`)."""
    decisions: list[DecisionRecord] = []
    outcome: DurableOutcome | None = None
    refused: str | None = None
    """Status `REFUSED`: what differs between the worker's tools and the run's."""
    error: str | None = None
    """Status `FAILED`: why the run failed (an unknown agent, a ctx that does not validate)."""


class RunSummary(BaseModel):
    """One run as `DurableRuns.list` shows it (from Temporal's visibility store)."""

    model_config = _FROZEN
    run_id: str
    status: str
    """Temporal's execution status (`RUNNING`, `COMPLETED`, `FAILED`...)."""
    started_at: datetime | None = None


class ModelCall(BaseModel):
    """The model activity's input: one attempt of `generate_structured` for one agent."""

    model_config = _FROZEN
    agent: str
    schema_name: str
    request: dict[str, JsonValue]
    run_id: str = ""
    """The run (and round, and role) the attempt is for, for the worker's observers."""
    round: int = 0
    role: str = "executor"


class ModelReply(BaseModel):
    model_config = _FROZEN
    value: dict[str, JsonValue]
    requests: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    model: str
    response_id: str | None = None
    finish_reasons: tuple[str, ...] = ()
    reasoning: str | None = None


class ToolCallInput(BaseModel):
    """The tool activity's input."""

    model_config = _FROZEN
    agent: str
    tool_name: str
    args: dict[str, JsonValue]
    run_id: str = ""
    """The run and round the call is for, for the worker's observers."""
    round: int = 0
    approved_by: str | None = None
    """Who approved the call, when it is an approved one (`digest` is then the approved call's)."""
    digest: str | None = None


class GrantAsk(BaseModel):
    """The grant activity's input: a proposal the workflow's loop made, which a standing grant may approve."""

    model_config = _FROZEN
    agent: str
    tool_name: str
    tier: Tier
    args: dict[str, JsonValue]
    run_id: str
    round: int
    digest: str
    """The proposal's digest; with the run and round, the key its one use is counted under."""
    from_untrusted: tuple[ArgOrigin, ...] = ()
    """The proposal's argument values that first appeared in untrusted content: a grant approves it only if
    it allows each of them explicitly (`Grant.from_untrusted`)."""


class GrantReply(BaseModel):
    """The grant activity's answer: the grant that approves the call, its use counted; `None`: none does."""

    model_config = _FROZEN
    grant: Grant | None = None


class ToolReply(BaseModel):
    """The tool activity's answer: the batch, or the observation of a `ToolRetry` (failures are raised)."""

    model_config = _FROZEN
    batch: list[JsonValue]
    observation: str | None = None
    """The `ToolRetry` message: the tool said the call itself was wrong (the batch is then empty)."""


class ToolSet(BaseModel):
    """A run's tool set as it first ran (names, tiers, args schemas, trust and egress), recorded in its history."""

    model_config = _FROZEN
    agent: str
    tools: tuple[ToolEntry, ...]


class Wait(BaseModel):
    """The argument of the `wait` Update: the statuses waited for, and how long the client waits."""

    model_config = _FROZEN
    statuses: tuple[RunStatus, ...]
    seconds: float | None = None
    """The client's own timeout: the handler ends by then, so that it does not outlive the client's wait."""


RunStart.model_rebuild()
