"""What the journal returns: frozen records of runs, rounds, proposals and their transitions."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from agentkit._outcome import Outcome, StopReason
from agentkit._proposals import Evidence, validate_args
from agentkit._tiers import Tier
from agentkit._usage import Usage
from agentkit.errors import ToolError

__all__ = [
    "Checkpointed",
    "Execution",
    "Hold",
    "ProposalRecord",
    "ProposalState",
    "RoundEntry",
    "RunRecord",
    "RunState",
    "RunStatus",
    "Transition",
]

if TYPE_CHECKING:
    from agentkit._state import RunCheckpoint

Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")


class ProposalState(enum.StrEnum):
    """Where a proposal is in its lifecycle (see `docs/journal.md` for the diagram)."""

    PENDING = "pending"
    """Waiting for a human."""
    APPROVED = "approved"
    """A human approved it; a worker may execute it once."""
    REJECTED = "rejected"
    """A human refused it (final)."""
    EXECUTING = "executing"
    """A worker claimed it and is running the tool. Left here by a crashed worker: see `stuck()`."""
    EXECUTED = "executed"
    """The tool ran and returned a batch (final)."""
    FAILED = "failed"
    """The tool raised, or a human resolved an abandoned execution as not done (final)."""


class RunState(enum.StrEnum):
    """Whether the journal saw a run end, and how."""

    UNFINISHED = "unfinished"
    """Still running, or its process died before the end was recorded."""
    FINISHED = "finished"
    """The run's result (outcome, usage, trace) is recorded."""
    ABORTED = "aborted"
    """The run was cancelled or raised (a wiring mistake): it ended without a result."""


class RunStatus(enum.StrEnum):
    """Where a run stands for resuming (`agentkit journal runs` shows it; `journal.resume` acts on it)."""

    RUNNING = "running"
    """Unfinished, and a live process holds it: its lease is being renewed."""
    WAITING = "waiting"
    """It stopped at a proposal that still waits for a human's decision."""
    READY = "ready"
    """It stopped at a proposal and every proposal is decided: `journal.resume` continues it."""
    CRASHED = "crashed"
    """Unfinished and nobody holds it (its process died: the lease ran out); it resumes from its last
    completed round when it has a checkpoint (`resumable`)."""
    ABORTED = "aborted"
    """It was cancelled or raised; it resumes from its last completed round when `resumable`."""
    FINISHED = "finished"
    """It ended (done, a ceiling, an error, ...); there is nothing to resume."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """One state change of a proposal: who moved it, when, and from where to where."""

    proposal_id: str
    """The proposal."""
    from_state: ProposalState | None
    """The state before (`None` when the proposal was recorded)."""
    to_state: ProposalState
    """The state after."""
    actor: str
    """Who made the change: a person, a worker (`host:pid`) or `run:<run_id>`."""
    at: datetime
    """When (UTC)."""
    note: str = ""
    """The rejection reason, the resolution note, or the error of a failed execution."""
    verified: str | None = None
    """For a person's decision: who the journal could vouch made it (PostgreSQL's `session_user`, the
    operating-system user with SQLite, or the reviewer an authenticating front end names); `actor`
    is the name given. `None` for the changes of workers, runs and grants."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposalRecord:
    """A proposal as the journal holds it: the call, its digest, its state and who moved it there."""

    id: str
    """The journal's id for the proposal."""
    state: ProposalState
    """Where it is in its lifecycle."""
    tool_name: str
    """The tool to call."""
    tier: Tier
    """The tool's declared tier when the call was proposed."""
    args_json: str
    """The call's arguments as canonical JSON (what the digest covers)."""
    digest: str
    """`call_digest(tool_name, args)` as proposed: execution refuses args that do not reproduce it."""
    rationale: str = ""
    """The executor's stated reason."""
    round: int
    """The round of the run that proposed it."""
    run_id: str = ""
    """The run that proposed it."""
    proposed_at: datetime
    """When it was proposed (UTC)."""
    approved_by: str | None = None
    approved_at: datetime | None = None
    rejected_by: str | None = None
    rejected_at: datetime | None = None
    reason: str | None = None
    """Why it was rejected."""
    claimed_by: str | None = None
    """The worker that claimed it for execution (`host:pid` unless the worker named itself)."""
    claimed_at: datetime | None = None
    """When that worker claimed it (UTC); with `claimed_by`, what an operator checks before resolving."""
    lease_until: datetime | None = None
    """Until when the claim is known alive (UTC): its worker renews the lease while the tool runs.

    A lease in the past on an `executing` proposal means its worker stopped renewing (it died, or
    lost the database): `stuck()` lists it.
    """
    finished_at: datetime | None = None
    """When the execution's outcome was recorded."""
    batch_json: str | None = None
    """The executed tool's batch as JSON (items that are not JSON are stored as their text)."""
    batch_size: int | None = None
    error: str | None = None
    """Why the execution failed."""
    resolved_by: str | None = None
    """The human who decided an abandoned execution."""
    resolved_at: datetime | None = None
    note: str | None = None
    """The resolution note."""
    left_by: str | None = None
    """The worker that last left it: the stored call did not check out against its tool (it stays approved)."""
    left_at: datetime | None = None
    """When a worker first left it (UTC)."""
    left_until: datetime | None = None
    """Until when no worker claims it (UTC), while it is left; then one tries it again (`None`: not left)."""
    left_note: str | None = None
    """Why it was last left: the refusal, naming the row."""
    unreadable: str | None = None
    """Set on a row a listing could not read (edited by hand or damaged): why, naming the row. Its
    unreadable fields hold placeholders (`Tier.IRREVERSIBLE`, the epoch); `get` and every change
    of it raise `JournalError` with this message."""
    args_type: str | None = None
    """The args type the call was proposed as, `module:qualname` (what an amendment is validated as)."""
    args_schema: str | None = None
    """SHA-256 of that type's JSON schema as the proposing process had it (`None`: proposed by an earlier
    agentkit). An amendment is validated only as a type whose schema has this digest, so a type made at
    run time (a `Literal` of ids) is never stood in for by the importable class it was made from."""
    original_args_json: str | None = None
    """Set when the approver amended the call: the args as proposed (`args_json` holds the amended ones)."""
    original_digest: str | None = None
    """Set when amended: the digest as proposed (`digest` is the amended call's, the one that may run)."""
    amended_by: str | None = None
    """Who amended the call (the approver)."""
    amended_fields: tuple[str, ...] = ()
    """The args fields the approver changed, sorted."""
    evidence: Evidence | None = None
    """What the executor had seen when it proposed the call: the rounds and calls before it, by reference
    (`None`: not recorded, as by an earlier agentkit)."""

    @property
    def args(self) -> dict[str, Any]:
        """The arguments as plain JSON data."""
        data: dict[str, Any] = json.loads(self.args_json)
        return data

    def args_as(self, args_type: type[Args]) -> Args:
        """The arguments validated as `args_type` (the tool's `args_type`)."""
        return validate_args(args_type, self.args_json)


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution(Generic[R]):
    """The ending of `Journal.execute`: the proposal as recorded, and what the tool returned."""

    proposal: ProposalRecord
    """The proposal after execution: `EXECUTED` or `FAILED`."""
    batch: tuple[R, ...] = ()
    """The tool's batch (empty when it failed)."""
    error: ToolError | None = None
    """Set exactly when the tool failed."""

    @property
    def ok(self) -> bool:
        """Whether the tool ran and returned a batch."""
        return self.error is None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """A run as the journal holds it."""

    id: str
    """The run's id (`ToolLoopResult.run_id`)."""
    state: RunState
    """`FINISHED` once the end was recorded."""
    agent: str
    """The executor's class name."""
    model: str
    """The primary model."""
    config: dict[str, Any]
    """The tools offered and the round ceiling, as JSON data."""
    loop_config: dict[str, Any] | None = None
    """The run's whole `LoopConfig` as JSON data (autonomy tier by name, budgets, deadline, tool
    timeout, after-proposal policy, retry policy); `None` when the run reported none (it was not
    a tool loop, or it was recorded by an agentkit before schema version 2)."""
    started_at: datetime | None
    """When it started (`None` if only its end was recorded)."""
    ended_at: datetime | None = None
    outcome: Outcome | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    rounds: int = 0
    """Rounds started (for an unfinished run: rounds seen so far)."""
    usage: Usage = field(default_factory=Usage)
    """Model usage (for an unfinished run: summed over the calls recorded so far)."""
    unreadable: str | None = None
    """Set on a row `runs()` could not read (edited by hand or damaged): why, naming the row; its
    unreadable fields hold placeholders. `run()` raises `JournalError` with this message."""
    status: RunStatus = RunStatus.FINISHED
    """Where the run stands for resuming: running, waiting on decisions, ready, crashed, aborted, finished."""
    resumable: bool = False
    """The journal holds a checkpoint `journal.resume` can continue from (for `WAITING` runs, once decided)."""
    checkpoint_round: int | None = None
    """The round of the latest checkpoint (`None`: none stored)."""
    claimed_by: str | None = None
    """The process that holds (or last held) the run: its recorder or resumer, `host:pid`."""
    lease_until: datetime | None = None
    """Until when that process's hold is known alive (UTC); past it, another process may resume the run."""
    parent: str | None = None
    """The run this one was forked from (`journal.fork`)."""
    forked_at: int | None = None
    """The parent's round it was forked after."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundEntry:
    """One round of a run as the journal holds it."""

    run_id: str
    """The run the round belongs to."""
    round: int
    """The round's number in the run, from 1 (a resumed leg goes on counting)."""
    done: bool = False
    """The executor said it was done."""
    rationale: str = ""
    """The executor's reason for its step, as the model gave it."""
    tool_name: str | None = None
    """The tool the step called, if it called one."""
    tier: Tier | None = None
    """That tool's tier when the round ran."""
    args_json: str | None = None
    """The call's arguments as canonical JSON."""
    executed: bool = False
    """The call's tool ran: in the round itself, or, for a proposal, once it was approved."""
    proposed: bool = False
    """The call went above the autonomy ceiling and was put in the inbox."""
    repeated: bool = False
    """The call repeated a recent one (the run ended STALEMATE)."""
    batch_size: int = 0
    """How many items the executed call returned (the approved call's, for a proposal)."""
    observation: str | None = None
    """What the executor was told of the call: a `ToolRetry` message, a refusal note, or for a decided
    proposal what its decision gave (a rejection's reason, the approved call's failure)."""
    error: str | None = None
    """The error that ended the run in this round, or that the approved call failed with."""
    llm_seconds: float = 0.0
    """Seconds in the round's model call, retries included."""
    tool_seconds: float = 0.0
    """Seconds in the tool call (the approved call's included)."""
    usage: Usage = field(default_factory=Usage)
    """The round's model usage."""
    from_trace: bool = True
    """Read from the run's state (or, for a run recorded by an earlier agentkit, its trace); `False`:
    rebuilt from the events of such a run without a result."""
    decision: Literal["approved", "rejected"] | None = None
    """A proposed round's decision, once a person made it (`executed` says whether the call then ran)."""
    decided_by: str | None = None
    """Who decided it."""


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """A run's checkpoint on its way to the journal, beside the run's events (`Journal.record_all`)."""

    run_id: str
    checkpoint: RunCheckpoint
    kind: Literal["checkpoint"] = "checkpoint"


@dataclass(frozen=True, kw_only=True, slots=True)
class Hold:
    """Who holds the runs a recorder starts, and for how long unless renewed (`Journal.hold_runs`)."""

    holder: str
    """`host:pid`."""
    token: str
    """The recorder's own token: only it renews the hold."""
    lease: timedelta
