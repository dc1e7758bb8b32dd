"""Executions: an approved proposal claimed by one worker, run exactly once, its outcome recorded.

A claim is one transaction that reads the proposal with a lock and moves it from approved to
executing (of many workers racing, exactly one holds it); the claim carries a lease renewed, off
the event loop, while the tool runs (`agentkit.journal._lease`); the outcome is recorded with
retries on fresh connections, and the tool is never called again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar, overload

import tenacity
from pydantic import BaseModel, ValidationError

from agentkit._invoke import admit, check_ctx, invoke
from agentkit._observe import ApprovedCall, Observer, ObserverArg, ToolInvocation, observers_of, wrapping
from agentkit._proposals import call_digest, canonical_json
from agentkit._state import args_schema_digest
from agentkit._tools import NO_CTX, AnyTool, ContextTool, Tool
from agentkit.errors import (
    DigestMismatch,
    JournalError,
    NothingRan,
    OutcomeNotRecorded,
    ToolError,
    TransitionRefused,
    UsageError,
)
from agentkit.journal._inbox import AT, HINTS, Inbox
from agentkit.journal._lease import DEFAULT_LEASE, Renewal, check_lease
from agentkit.journal._records import Execution, ProposalRecord, ProposalState
from agentkit.journal._sql import (
    Connection,
    batch_text,
    claim_left_statement,
    claim_next_statement,
    claim_statement,
    claimed_upstream,
    leave_statement,
    log_transition,
    now,
    proposal_of,
)
from agentkit.journal._storage import CommitUnconfirmed, DatabaseFailed, named, worker_name

__all__ = [
    "DEFAULT_STUCK_AFTER",
    "LEFT_RETRY_FIRST",
    "LEFT_RETRY_MAX",
    "OUTCOME_ATTEMPTS",
    "Claim",
    "Executions",
    "Left",
]

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")
R = TypeVar("R")

DEFAULT_STUCK_AFTER = timedelta(minutes=10)
"""How long a claim may stay `executing` before `stuck()` lists it by default, however alive its worker."""

OUTCOME_ATTEMPTS: int = 10
"""How many times a worker tries to record a tool's outcome before raising `OutcomeNotRecorded`:
over about fifteen seconds (waits doubling from 0.05 s, at most 4 s), each try on a fresh connection."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim(Generic[Args]):
    """A proposal this worker holds: `executing`, claimed with `token`, its args checked."""

    record: ProposalRecord
    args: Args
    token: str
    worker: str
    lease: timedelta


@dataclass(frozen=True, kw_only=True, slots=True)
class Left:
    """An approved proposal a claim set aside: its stored call does not check out against this worker's tool."""

    id: str
    tool_name: str
    why: str
    """The refusal, naming the row."""


LEFT_RETRY_FIRST = timedelta(minutes=1)
"""How long no worker claims a proposal after it was first left; each time it is left again, as long as it has
been left so far (doubling), at most `LEFT_RETRY_MAX`: a worker of another version may run it, and a row left
for good costs a claim now and then."""
LEFT_RETRY_MAX = timedelta(hours=1)

LEFT_PER_TRANSACTION = 64
"""Most rows one claim's transaction leaves before it commits (and the worker looks again): rows left behind
cost a commit per this many, and one transaction stays short."""


def _lease_ran_out(record: ProposalRecord) -> None:
    """Refuse to resolve a call whose worker still holds its lease: the call may be running, and would run twice."""
    at = now()
    if record.lease_until is None or record.lease_until <= at:
        return
    until, left = record.lease_until.isoformat(timespec="seconds"), (record.lease_until - at).total_seconds()
    raise TransitionRefused(
        f"cannot resolve proposal {record.id!r}: worker {record.claimed_by!r} holds its claim under a lease that "
        f"lasts until {until} ({left:.0f} s from now) and is renewed while the call runs, so the call may still be "
        "running and resolving it now could run it twice; nothing changed. Let that worker finish, or stop it; "
        "once the lease has run out (no worker renews it) you can resolve it, and `agentkit proposals stuck` "
        "(Journal.stuck()) lists it",
        id=record.id,
        state=record.state.value,
    )


class Executions(Inbox):
    """Approved proposals claimed, run once and recorded; abandoned executions listed and resolved."""

    _outcome_attempts = OUTCOME_ATTEMPTS
    _outcome_wait = 0.05

    def _stuck(self, *, older_than: timedelta = DEFAULT_STUCK_AFTER) -> list[ProposalRecord]:
        at = now()
        with self._tx(write=False) as db:
            rows = db.query(
                "SELECT * FROM agentkit_proposals WHERE state = ? AND (claimed_at <= ? OR lease_until <= ?) "
                "ORDER BY claimed_at, id",
                (ProposalState.EXECUTING.value, db.to_db_time(at - older_than), db.to_db_time(at)),
            )
            return [proposal_of(db, row, lenient=True) for row in rows]

    def _resolve(self, id: str, resolved_by: str, state: ProposalState, note: str) -> ProposalRecord:
        by, why = named(resolved_by, "resolved_by"), named(note, "note")
        target = ProposalState(state)
        choices = (ProposalState.EXECUTED, ProposalState.FAILED, ProposalState.APPROVED)
        if target not in choices:
            raise UsageError(
                f"an abandoned execution resolves to one of {', '.join(c.value for c in choices)}; got {target.value!r}"
            )
        sets: dict[str, object] = {"resolved_by": by, "resolved_at": AT, "note": why}
        if target is ProposalState.APPROVED:
            sets |= {"claim": None, "claimed_by": None, "claimed_at": None, "lease_until": None}
        else:
            sets |= {"finished_at": AT, "claim": None, "lease_until": None}
            if target is ProposalState.FAILED:
                sets["error"] = f"resolved by {by}: {why}"
        return self._move(id, "resolve", (ProposalState.EXECUTING,), target, by, why, sets, guard=_lease_ran_out)

    def _claim(
        self, id: str, tool: AnyTool, worker: str, token: str | None = None, lease: timedelta = DEFAULT_LEASE
    ) -> Claim[Any]:
        """Check the stored call against `tool` and the digest, then claim it: approved -> executing.

        The row is read with a lock (PostgreSQL `FOR UPDATE`; SQLite's write lock is already held)
        and updated by primary key in the same transaction: of many workers racing, the first holds
        the row and every other reads it, once the first commits, as no longer approved.
        """
        token = token or uuid.uuid4().hex
        with self._claiming(token, worker), self._tx(write=True) as db:
            record = self._fetch(db, id, lock=True)
            if record.state is not ProposalState.APPROVED:
                raise TransitionRefused(
                    f"cannot execute proposal {id!r}: it is {record.state.value}, and only an approved proposal "
                    f"can be executed; {HINTS[record.state]}",
                    id=id,
                    state=record.state.value,
                )
            self._check_unclaimed_upstream(db, record)
            args = self._checked_args(record, tool)
            at = now()
            db.execute(claim_statement(), (worker, db.to_db_time(at), token, db.to_db_time(at + lease), id))
            log_transition(db, id, ProposalState.APPROVED, ProposalState.EXECUTING, worker, at, "")
            return Claim(record=self._fetch(db, id), args=args, token=token, worker=worker, lease=lease)

    def _claim_next(
        self, tools: Mapping[str, AnyTool], worker: str, lease: timedelta
    ) -> tuple[Claim[Any] | None, list[Left]]:
        """Claim the oldest approved proposal for one of `tools`, one statement a try; the claim (`None`: there
        was none, or no claim yet after `LEFT_PER_TRANSACTION` rows left: look again), and the rows left.

        The approved proposals nobody left come first; then the left ones whose `left_until` has come.
        A claimed row whose stored call does not check out against its tool (whatever the refusal: a
        tier that changed or does not read, another digest, args that do not validate) is handed back
        and left in the same transaction: it stays approved, no worker claims it before its
        `left_until`, and its `Left` says why. Raises `NothingRan` when the database failed.
        """
        token = uuid.uuid4().hex
        left: list[Left] = []
        with self._claiming(token, worker), self._tx(write=True) as db:
            at = now()
            claim = (worker, db.to_db_time(at), token, db.to_db_time(at + lease), *tools)
            while len(left) < LEFT_PER_TRANSACTION:
                # A savepoint, so that a row that does not check out is handed back as it was (its claim undone,
                # no approval announced) and set aside in the same transaction.
                db.execute("SAVEPOINT agentkit_claim")
                rows = db.query(claim_next_statement(db.dialect, tools=len(tools)), claim)
                if not rows:
                    rows = db.query(claim_left_statement(db.dialect, tools=len(tools)), (*claim, db.to_db_time(at)))
                if not rows:
                    break
                record = proposal_of(db, rows[0], lenient=True)
                try:
                    if record.unreadable is not None:
                        raise JournalError(record.unreadable)
                    self._check_unclaimed_upstream(db, record)
                    args = self._checked_args(record, tools[record.tool_name])
                except Exception as refused:  # a stored row is data: whatever its check raises refuses it alone
                    db.execute("ROLLBACK TO SAVEPOINT agentkit_claim")
                    left.append(self._leave(db, record, worker, at, str(refused) or type(refused).__name__))
                    continue
                log_transition(db, record.id, ProposalState.APPROVED, ProposalState.EXECUTING, worker, at, "")
                return Claim(record=record, args=args, token=token, worker=worker, lease=lease), left
        return None, left

    def _leave(self, db: Connection, record: ProposalRecord, worker: str, at: datetime, why: str) -> Left:
        """Set an approved proposal aside: no claim takes it for as long as it has been left (`LEFT_RETRY_FIRST`
        at first, `LEFT_RETRY_MAX` at most)."""
        first = record.left_at or at
        wait = min(max(at - first, LEFT_RETRY_FIRST), LEFT_RETRY_MAX)
        db.execute(leave_statement(), (worker, db.to_db_time(at), db.to_db_time(at + wait), why, record.id))
        return Left(id=record.id, tool_name=record.tool_name, why=why)

    @contextmanager
    def _claiming(self, token: str, worker: str) -> Iterator[None]:
        """Turn a database failure during a claim into `NothingRan`, handing back a claim whose commit is unknown."""
        try:
            yield
        except CommitUnconfirmed as error:
            released = False
            with suppress(JournalError):
                released = self._release(token, worker)
            hint = (
                "the claim was handed back"
                if released
                else "if the commit did reach the server, the proposal shows in stuck() once its lease runs out"
            )
            raise NothingRan(f"{error}; the tool was not run ({hint})", id="") from error
        except DatabaseFailed as error:
            raise NothingRan(f"{error}; the tool was not run and the proposal is still approved", id="") from error

    def _release(self, token: str, worker: str) -> bool:
        """Hand back a claim whose tool was never called: executing -> approved. `False`: no such claim."""
        at = now()
        with self._tx(write=True) as db:
            executing = ProposalState.EXECUTING.value
            rows = db.query("SELECT id FROM agentkit_proposals WHERE state = ? AND claim = ?", (executing, token))
            for row in rows:
                db.execute(
                    "UPDATE agentkit_proposals SET state = ?, claim = NULL, claimed_by = NULL, claimed_at = NULL, "
                    "lease_until = NULL WHERE id = ? AND claim = ?",
                    (ProposalState.APPROVED.value, row["id"], token),
                )
                note = "the claim's commit was not confirmed and the tool was not run; handed back"
                log_transition(db, row["id"], ProposalState.EXECUTING, ProposalState.APPROVED, worker, at, note)
            return bool(rows)

    def _renew(self, id: str, token: str, lease: timedelta) -> bool:
        """Extend a held claim's lease; `False`: the claim is no longer this worker's (a human resolved it)."""
        with self._tx(write=True) as db:
            until = db.to_db_time(now() + lease)
            changed = db.execute(
                "UPDATE agentkit_proposals SET lease_until = ? WHERE id = ? AND claim = ?", (until, id, token)
            )
            return changed == 1

    def _check_unclaimed_upstream(self, db: Connection, record: ProposalRecord) -> None:
        """Refuse an entry of a fork for a call the run it was forked from claimed or ran under its own entry.

        Raises:
            TransitionRefused: naming that entry; nothing was claimed or run.
        """
        other = claimed_upstream(db, record)
        if other is not None:
            raise TransitionRefused(
                f"cannot execute proposal {record.id!r}: its run {record.run_id!r} was forked from run "
                f"{other.run_id!r}, whose proposal {other.id} for the same call (round {record.round}) is "
                f"{other.state.value}; the call is not run again. Resuming the fork goes on with that outcome; "
                f"reject this entry (`agentkit proposals reject {record.id} --by NAME --reason TEXT`)",
                id=record.id,
                state=record.state.value,
            )

    def _checked_args(self, record: ProposalRecord, tool: AnyTool) -> Any:
        admit(tool, name=record.tool_name, tier=record.tier)
        if record.args_schema is not None and args_schema_digest(tool.args_type) != record.args_schema:
            raise DigestMismatch(
                f"proposal {record.id!r} was proposed and approved for args whose JSON schema has digest "
                f"{record.args_schema}; the tool's args type now has another ({args_schema_digest(tool.args_type)}): "
                "its code or its server changed what the call means since a person approved it, so it was not run. "
                "Reject it and propose the call again",
                id=record.id,
                tool_name=record.tool_name,
            )
        try:
            args = record.args_as(tool.args_type)
        except ValidationError as invalid:
            raise DigestMismatch(
                f"proposal {record.id!r}: the stored args no longer validate as {tool.args_type.__name__} "
                f"({invalid.error_count()} errors); it was not run. Reject it and propose the call again",
                id=record.id,
                tool_name=record.tool_name,
            ) from invalid
        if call_digest(tool.name, args) != record.digest:
            raise DigestMismatch(
                f"proposal {record.id!r}: the stored args do not reproduce the digest that was proposed and approved "
                "(they were altered); it was not run. Reject it and propose the call again",
                id=record.id,
                tool_name=record.tool_name,
            )
        # Validation drops keys the args type does not declare, so the digest alone would pass stored args
        # with an extra key added; the stored text must be exactly the validated call.
        if canonical_json(args) != record.args_json:
            raise DigestMismatch(
                f"proposal {record.id!r}: the stored args are not the canonical form of the approved call (a field "
                f"{tool.args_type.__name__} does not declare was added, or the text was altered); it was not run. "
                "Reject it and propose the call again",
                id=record.id,
                tool_name=record.tool_name,
            )
        return args

    def _finish(
        self, id: str, token: str, worker: str, *, batch: Sequence[object] | None, error: str | None
    ) -> ProposalRecord:
        """Record an execution's outcome for the worker holding claim `token`: executing -> executed or failed."""
        at = now()
        after = ProposalState.EXECUTED if error is None else ProposalState.FAILED
        batch_json, unstored = (None, None) if batch is None else batch_text(batch)
        # The claim token is set only while the proposal is executing under this claim, so ``id`` and
        # ``claim`` say it all; no state predicate, whose index a custom plan could prefer to the key.
        with self._tx(write=True) as db:
            changed = db.execute(
                "UPDATE agentkit_proposals SET state = ?, finished_at = ?, batch = ?, batch_size = ?, error = ?, "
                "claim = NULL, lease_until = NULL WHERE id = ? AND claim = ?",
                (after.value, db.to_db_time(at), batch_json, None if batch is None else len(batch), error, id, token),
            )
            if changed != 1:
                record = self._fetch(db, id)
                if record.state is after and record.claimed_by == worker and record.resolved_by is None:
                    return record  # an earlier try committed, though its commit was not confirmed
                raise JournalError(
                    f"proposal {id!r} ran ({after.value}{': ' + error if error else ''}) but a human resolved it "
                    "while it ran, so this outcome was not recorded; check the tool's effect and the proposal's history"
                )
            log_transition(db, id, ProposalState.EXECUTING, after, worker, at, error or "")
            record = self._fetch(db, id)
        if unstored is not None:
            raise JournalError(
                f"proposal {id!r}: the tool ran and the proposal is recorded {after.value}, but {unstored}; those "
                "are stored described (type and repr) in its batch. Return JSON-compatible items from the tool"
            )
        return record

    async def stuck(self, *, older_than: timedelta = DEFAULT_STUCK_AFTER) -> list[ProposalRecord]:
        """Proposals claimed for execution longer ago than `older_than` and still `executing`.

        Each carries `claimed_by` and `claimed_at`. A listed execution may be slow rather than
        dead: confirm that its worker is gone before `resolve`, or the call can run twice.
        """
        return await self._read(self._stuck, older_than=older_than)

    async def resolve(self, id: str, resolved_by: str, state: ProposalState, note: str) -> ProposalRecord:
        """A human's decision on an abandoned execution: executing -> executed, failed or approved (run again).

        Refused (`TransitionRefused`, naming when the lease ends) while the claim's lease is live: its worker
        may still be running the call.
        """
        return await self._call(self._resolve, id, resolved_by, state, note)

    @overload
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: object = ...,
        observer: ObserverArg = None,
    ) -> Execution[R]: ...
    @overload
    async def execute(
        self,
        id: str,
        tool: ContextTool[Args, R, Ctx],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: Ctx,
        observer: ObserverArg = None,
    ) -> Execution[R]: ...
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R] | ContextTool[Args, R, Any],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: object = NO_CTX,
        observer: ObserverArg = None,
    ) -> Execution[R]:
        """Run an approved proposal exactly once, whatever the number of workers racing for it.

        A tool that takes the run's ctx (a `ContextTool`) is called with `ctx`: the run that
        proposed the call is usually gone, so give the ctx the call needs (its clients, say). Without
        one the call is refused before the proposal is claimed.

        The claim carries a lease, renewed every third of `lease` while the tool runs; if this
        process dies, the proposal stays `executing` and `stuck()` lists it once the lease runs
        out. The outcome is recorded with up to `OUTCOME_ATTEMPTS` tries, each on a fresh
        connection; the tool is never called again. `observer`'s `around` wraps the call (an
        `OTelObserver`'s `execute_tool` span, saying who approved it).

        Raises:
            UnknownId: no such proposal.
            TransitionRefused: it is not approved (or another worker claimed it first), or it is a fork's
                entry for a call that the run it was forked from claimed or ran under its own entry.
            DigestMismatch: the stored args do not reproduce the approved digest; nothing ran.
            UsageError: `tool` is not the tool it was proposed for, or it takes the run's ctx and no
                `ctx` was given; nothing was claimed or run.
            MissingTierError: the tool declares no tier; nothing ran.
            TierChanged: the tool declares another tier than the one approved; nothing ran.
            JournalError: the database failed.
            NothingRan: the database failed before the claim held; the tool was not called.
            OutcomeNotRecorded: the tool ran, but its outcome could not be recorded; do not run it again.
        """
        lease = check_lease(lease)
        check_ctx(tool, ctx)
        who = worker or worker_name()
        claim = await self._call(self._claim, id, tool, who, uuid.uuid4().hex, lease)
        # From here on the proposal is ``executing``: if this process dies, it stays so, and a human decides.
        return await self._run_claimed(claim, tool, ctx, observers_of(observer))

    async def _run_claimed(
        self,
        claim: Claim[Args],
        tool: Tool[Args, R] | ContextTool[Args, R, Any],
        ctx: object,
        observers: tuple[Observer, ...] = (),
    ) -> Execution[R]:
        """Call the tool of a held claim once, its lease renewed meanwhile (off the event loop, so a sync tool
        that blocks the loop keeps its claim), then record the outcome."""
        renewal = Renewal(lambda: self._renew(claim.record.id, claim.token, claim.lease), claim.lease, name="claim")
        record = claim.record
        approved = ApprovedCall(approved_by=record.approved_by or "", digest=record.digest, proposal_id=record.id)
        call = ToolInvocation(run_id=record.run_id, round=record.round, tool=tool, args=claim.args, approval=approved)
        with renewal:
            outcome = await invoke(tool, claim.args, ctx=ctx, around=wrapping(observers, call))
        error = outcome.failure()
        batch = outcome.batch if error is None else None
        record = await self._record_outcome(claim, batch=batch, error=error)
        if error is not None:
            return Execution(proposal=record, error=error)
        return Execution(proposal=record, batch=tuple(batch or ()))

    async def _record_outcome(
        self, claim: Claim[Any], *, batch: Sequence[object] | None, error: ToolError | None
    ) -> ProposalRecord:
        """Record what the tool did, retrying on database failures with a fresh connection each time."""
        id, text = claim.record.id, None if error is None else str(error)
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self._outcome_attempts),
            wait=tenacity.wait_exponential(multiplier=self._outcome_wait, max=4.0),
            retry=tenacity.retry_if_exception_type(DatabaseFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._call(self._finish, id, claim.token, claim.worker, batch=batch, error=text)
        except DatabaseFailed as failed:
            outcome = ProposalState.EXECUTED if error is None else ProposalState.FAILED
            raise OutcomeNotRecorded(
                f"proposal {id!r} ran (its tool returned{': ' + text if text else ''}), but its outcome "
                f"({outcome.value}) could not be recorded after {self._outcome_attempts} tries: {failed}. It stays "
                "executing and shows in stuck() once its lease runs out; do not run it again: resolve it as "
                f"{outcome.value}",
                id=id,
                outcome=outcome.value,
                error=text,
            ) from failed
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover
