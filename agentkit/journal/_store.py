"""The journal over SQL: one implementation of the contract, shared by SQLite and PostgreSQL.

A backend supplies a ``Connection`` (transactions, queries, column types, time conversion); this
module holds every statement and every rule. Every operation is one transaction: on SQLite's
connections they take turns under a lock (reads on a connection and lock of their own, so a read
never queues behind a write); on PostgreSQL each takes a connection from the journal's pool.
Either way a journal object may be shared by the observer (in its writer thread), the inbox
methods (in the journal's own threads) and ``work``'s concurrent executions.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Self, TypeVar, overload

import tenacity
from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._invoke import admit, check_ctx, invoke
from agentkit.errors import ToolError, UsageError
from agentkit.events import Event, ProposalCaptured, RunAborted, RunFinished, RunStarted
from agentkit.journal._errors import (
    DigestMismatch,
    JournalError,
    JournalUnavailable,
    NothingRan,
    OutcomeNotRecorded,
    RunClaimed,
    TransitionRefused,
    UnknownId,
)
from agentkit.journal._events import event_data
from agentkit.journal._records import (
    Checkpointed,
    Execution,
    Hold,
    ProposalRecord,
    ProposalState,
    RoundEntry,
    RunRecord,
    Transition,
)
from agentkit.journal._schema import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE, render
from agentkit.journal._sql import (
    Busy,
    Connection,
    Lossless,
    abort_run,
    append_events,
    batch_text,
    checkpoint_text,
    claim_next_statement,
    claim_statement,
    event_row,
    finish_run,
    folded,
    hold_runs_statement,
    insert_proposal,
    insert_run,
    lock_proposal_statement,
    log_transition,
    now,
    proposal_of,
    round_of,
    run_of,
    store_checkpoint,
    transition_of,
)
from agentkit.proposals import ProposedAction, call_digest, canonical_json
from agentkit.tools import NO_CTX, AnyTool, ContextTool, NoCtx, Tool

if TYPE_CHECKING:
    from agentkit.agent import ToolAgent
    from agentkit.checkpoint import RunCheckpoint
    from agentkit.context import Summarizer
    from agentkit.journal._worker import Wakeups, Worked, WorkReport
    from agentkit.observe import ObserverArg
    from agentkit.results import TieredLoopResult
    from agentkit.structured import StructuredCaller

__all__ = ["DEFAULT_LEASE", "DEFAULT_STUCK_AFTER", "SQLJournal"]

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")
Answer = DefaultedTypeVar("Answer", default=None)
R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")

JOURNAL_THREADS = 4
"""Threads each journal object runs its database calls in, as many for reads again: its own, never
the event loop's default executor, so blocking tools that hold those threads cannot starve the
journal (and the reverse), and writes waiting for the database cannot hold up reads."""

DEFAULT_STUCK_AFTER = timedelta(minutes=10)
"""How long a claim may stay ``executing`` before ``stuck()`` lists it by default, however alive its worker."""

DEFAULT_LEASE = timedelta(seconds=30)
"""How long a claim stays valid unless its worker renews it; the worker renews it every third of that.

A worker that dies (SIGKILL, power loss, a lost network) stops renewing, and ``stuck()`` lists its
claim once the lease runs out.
"""

OUTCOME_ATTEMPTS: int = 10
"""How many times a worker tries to record a tool's outcome before raising ``OutcomeNotRecorded``:
over about fifteen seconds (waits doubling from 0.05 s, at most 4 s), each try on a fresh connection."""

_HINTS = {
    ProposalState.PENDING: "a human must approve it first",
    ProposalState.APPROVED: "it is approved and waits for a worker to execute it",
    ProposalState.REJECTED: "it was rejected, which is final; propose the call again if it is still wanted",
    ProposalState.EXECUTING: "a worker claimed it; once you confirmed that worker is gone (claimed_by), resolve() it",
    ProposalState.EXECUTED: "it was executed, which is final",
    ProposalState.FAILED: "its execution failed, which is final; propose the call again to retry",
}


class _DatabaseFailed(JournalError):
    """The database failed (a driver error): the transaction did not commit."""


class _CommitUnconfirmed(_DatabaseFailed):
    """The commit itself failed: the server may or may not have committed the transaction."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim(Generic[Args]):
    """A proposal this worker holds: ``executing``, claimed with ``token``, its args checked."""

    record: ProposalRecord
    args: Args
    token: str
    worker: str
    lease: timedelta


class Unrunnable(Exception):
    """The next approved proposal cannot be run by this tool set; the claim was rolled back, it stays approved."""

    def __init__(self, id: str, error: JournalError) -> None:
        super().__init__(str(error))
        self.id = id
        self.error = error


def held(run_id: str, holder: object, until: object) -> RunClaimed:
    """The error for a run another live process holds."""
    return RunClaimed(
        f"run {run_id!r} is held by {holder or 'another process'} (its lease runs until {until}): it is still "
        "running, or another process resumes it; nothing ran. Once that process is gone, its lease runs out and "
        "the run can be resumed",
        id=run_id,
        holder=str(holder or ""),
    )


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _check_id(value: object, what: str) -> None:
    # PostgreSQL would fail on comparing a text column with an integer; SQLite would coerce it.
    if not isinstance(value, str):
        raise UnknownId(
            f"no {what} {value!r}: {what} ids are strings (got {type(value).__name__}); pass the id as text",
            id=repr(value),
        )


def _check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"limit must be an integer >= 1; got {limit!r}")


def _named(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{what} must be a non-empty string (who or why, for the audit trail); got {value!r}")
    return value.strip()


class SQLJournal:
    """The journal contract over a SQL ``Connection``; ``SQLiteJournal`` and ``PostgresJournal`` build on it."""

    def __init__(self, conn: Connection, *, where: str, create: bool, reader: Connection | None = None) -> None:
        self._conn: Connection = Lossless(conn)
        self._reader: Connection | None = None if reader is None else Lossless(reader)
        self._where = where
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._outcome_attempts = OUTCOME_ATTEMPTS
        self._outcome_wait = 0.05
        self._closed = False
        self._threads = ThreadPoolExecutor(JOURNAL_THREADS, thread_name_prefix="agentkit-journal")
        self._read_threads = ThreadPoolExecutor(JOURNAL_THREADS, thread_name_prefix="agentkit-journal-read")
        try:
            self._migrate(create)
        except BaseException as error:
            self._close()
            self._threads.shutdown(wait=False)
            self._read_threads.shutdown(wait=False)
            if isinstance(error, JournalError) and not isinstance(error, JournalUnavailable):
                raise JournalUnavailable(f"cannot open the journal at {where}: {error}") from error
            raise

    @property
    def where(self) -> str:
        """The database this journal writes to (a path, or a URL without its password)."""
        return self._where

    # -- plumbing -------------------------------------------------------------------------------

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking database call (one that may write) in the journal's own threads."""
        return await self._in(self._threads, functools.partial(fn, *args, **kwargs))

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a read in threads of its own, so that writes waiting for the database never hold it up."""
        return await self._in(self._read_threads, functools.partial(fn, *args, **kwargs))

    async def _in(self, threads: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
        context = contextvars.copy_context()
        try:
            future = asyncio.get_running_loop().run_in_executor(threads, context.run, fn)
        except RuntimeError as closed:  # close() shut the threads down
            raise JournalError(f"the journal at {self._where} is closed; open it again") from closed
        return await future

    @contextmanager
    def _tx(self, *, write: bool, synced: bool = True, at_once: bool = False) -> Iterator[Connection]:
        """One transaction; ``at_once``: raise ``Busy`` (nothing done) rather than wait for this journal's
        connection or the database's write lock."""
        # Reads go to the read connection when there is one, so they never wait for a write's lock;
        # a pooled backend (PostgreSQL) needs no lock at all.
        reads_apart = not write and self._reader is not None
        lock = self._read_lock if reads_apart else self._lock
        guarded = reads_apart or self._conn.serialised
        if guarded and not lock.acquire(blocking=not at_once):
            raise Busy(f"the journal at {self._where} is in use by another thread")
        try:
            if self._closed:
                raise JournalError(f"the journal at {self._where} is closed; open it again")
            db = self._reader if reads_apart and self._reader is not None else self._conn
            try:
                db.begin(write=write, synced=synced, at_once=at_once)
            except db.errors as error:
                raise _DatabaseFailed(f"the journal at {self._where} failed to start a transaction: {error}") from error
            try:
                yield db
            except BaseException as error:
                with suppress(Exception):
                    db.rollback()
                if isinstance(error, db.errors):
                    raise _DatabaseFailed(f"the journal at {self._where} failed: {error}") from error
                raise
            try:
                db.commit()
            except db.errors as error:
                with suppress(Exception):
                    db.rollback()
                raise _CommitUnconfirmed(f"the journal at {self._where} failed to commit: {error}") from error
        finally:
            if guarded:
                lock.release()

    def _migrate(self, create: bool) -> None:
        # An up-to-date journal is only read: opening it never waits for, nor takes, the write lock.
        with self._tx(write=False) as db:
            if db.table_exists(VERSION_TABLE):
                rows = db.query(f"SELECT version FROM {VERSION_TABLE}")
                if rows and int(rows[0]["version"]) == SCHEMA_VERSION:
                    return
        with self._tx(write=True) as db:
            db.lock_schema()
            if db.table_exists(VERSION_TABLE):
                rows = db.query(f"SELECT version FROM {VERSION_TABLE}")
                version = int(rows[0]["version"]) if rows else 0
            elif create:
                version = 0
            else:
                raise JournalUnavailable(
                    f"{self._where} holds no agentkit journal (no {VERSION_TABLE} table); "
                    "point --db at a journal, or open it from code to create one"
                )
            if version > SCHEMA_VERSION:
                raise JournalUnavailable(
                    f"the journal at {self._where} has schema version {version}, newer than this agentkit "
                    f"understands ({SCHEMA_VERSION}); upgrade agentkit"
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    sql = render(statement, db.dialect, db.types)
                    if sql is not None:
                        db.execute(sql)
            if version == 0:
                db.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                db.execute(f"UPDATE {VERSION_TABLE} SET version = ?", (SCHEMA_VERSION,))

    def schema_version(self) -> int:
        """The schema version stored in the journal."""
        with self._tx(write=False) as db:
            return int(db.query(f"SELECT version FROM {VERSION_TABLE}")[0]["version"])

    # -- run events (synchronous: the observer's writer thread calls this) ------------------------

    def record(self, event: Event) -> None:
        """Write one run event, in one transaction, before returning (it may wait for the database).

        A run's start inserts its row, a proposal enters the inbox as ``pending``, and the run's
        end records its outcome, usage and every round of its trace. Every event is also appended
        to the event log, so a run whose process dies keeps every round it completed.
        """
        self.record_all((event,))

    def record_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        """Keep ``checkpoint`` as the run's latest (one statement on the run's row); one of an earlier
        round than the one stored is ignored."""
        self.record_all((Checkpointed(run_id, checkpoint),))

    def record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> None:
        """Write events and checkpoints, in order, in one transaction (``JournalObserver`` writes what
        queued up meanwhile this way: one commit, so one sync to disk, for all of it).

        With ``hold``, each run started here is held by that recorder until its lease runs out.
        """
        at = now()
        with self._tx(write=True, synced=False) as db:
            self._record(db, entries, hold, at)

    @property
    def records_at_once(self) -> bool:
        """Whether ``try_record_all`` writes without waiting (a local database file: ``SQLiteJournal``), so
        ``JournalObserver`` can write a run's record on the run's own thread; otherwise its writer thread does."""
        return False

    def try_record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> bool:
        """``record_all``, only if it can start at once: ``False``, with nothing written, while this journal's
        connection is in use or another connection (another process) holds the database's write lock."""
        at = now()
        try:
            with self._tx(write=True, synced=False, at_once=True) as db:
                self._record(db, entries, hold, at)
        except Busy:
            return False
        return True

    def _record(self, db: Connection, entries: Sequence[Event | Checkpointed], hold: Hold | None, at: datetime) -> None:
        stamp = db.to_db_time(at)
        # Of a run's checkpoints in one batch only the latest round's is written: it holds everything the others
        # do. (The one a run takes before its first round goes with that round's, when the round is quick.)
        latest: dict[str, Checkpointed] = {}
        for entry in entries:
            if isinstance(entry, Checkpointed):
                kept = latest.get(entry.run_id)
                if kept is None or kept.checkpoint.rounds <= entry.checkpoint.rounds:
                    latest[entry.run_id] = entry
        # The log's rows go in one statement at the end: nothing else reads the log, so their order is kept.
        rows: list[tuple[object, ...]] = []
        for entry in entries:
            if isinstance(entry, Checkpointed):
                if latest[entry.run_id] is entry:
                    text = entry.text or checkpoint_text(entry.checkpoint)
                    store_checkpoint(db, entry.run_id, entry.checkpoint, text)
                continue
            rows.append(self._write_event(db, entry, at, stamp, hold))
        if rows:
            append_events(db, rows)

    def _write_event(
        self, db: Connection, event: Event, at: datetime, stamp: object, hold: Hold | None = None
    ) -> tuple[object, ...]:
        """Write what the event changes besides the log (``hold``: see ``record_all``); its row for the log
        (``append_events``)."""
        round, data = event_data(event)
        match event:
            case RunStarted():
                insert_run(db, event, at, hold)
            case ProposalCaptured():
                data["proposal_id"] = insert_proposal(db, event.proposal, f"run:{event.run_id}", at)
            case RunFinished():
                finish_run(db, event, at)
            case RunAborted():
                abort_run(db, event, at)
            case _:
                pass
        return event_row(event, round, data, stamp)

    def hold_runs(self, run_ids: Sequence[str], *, holder: str, token: str, lease: timedelta) -> None:
        """Take, or renew, the hold on unfinished runs this process records: until ``lease`` from now.

        ``JournalObserver`` calls it as each run starts and every third of its lease after, so a run
        whose process died shows as crashed once the lease runs out. A run another process holds
        (one resuming it) is left alone.
        """
        if not run_ids:
            return
        with self._tx(write=True, synced=False) as db:
            until = db.to_db_time(now() + lease)
            db.execute(hold_runs_statement(len(run_ids)), (holder, token, until, *run_ids, token))

    # -- reading --------------------------------------------------------------------------------

    def _fetch(self, db: Connection, id: str, *, lock: bool = False) -> ProposalRecord:
        _check_id(id, "proposal")
        sql = lock_proposal_statement(db.dialect) if lock else "SELECT * FROM agentkit_proposals WHERE id = ?"
        rows = db.query(sql, (id,))
        if not rows:
            raise UnknownId(
                f"no proposal {id!r} in the journal at {self._where}; list them with `agentkit proposals list`", id=id
            )
        return proposal_of(db, rows[0])

    def _get(self, id: str) -> ProposalRecord:
        with self._tx(write=False) as db:
            return self._fetch(db, id)

    def _proposals(self, *, state: ProposalState | None = None, limit: int | None = None) -> list[ProposalRecord]:
        if limit is not None:
            _check_limit(limit)
        sql = "SELECT * FROM agentkit_proposals"
        params: list[object] = []
        if state is not None:
            sql += " WHERE state = ?"
            params.append(ProposalState(state).value)
        sql += " ORDER BY proposed_at, id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._tx(write=False) as db:
            return [proposal_of(db, row, lenient=True) for row in db.query(sql, params)]

    def _stuck(self, *, older_than: timedelta = DEFAULT_STUCK_AFTER) -> list[ProposalRecord]:
        at = now()
        with self._tx(write=False) as db:
            rows = db.query(
                "SELECT * FROM agentkit_proposals WHERE state = ? AND (claimed_at <= ? OR lease_until <= ?) "
                "ORDER BY claimed_at, id",
                (ProposalState.EXECUTING.value, db.to_db_time(at - older_than), db.to_db_time(at)),
            )
            return [proposal_of(db, row, lenient=True) for row in rows]

    def _history(self, id: str) -> list[Transition]:
        with self._tx(write=False) as db:
            self._fetch(db, id)
            rows = db.query("SELECT * FROM agentkit_transitions WHERE proposal_id = ? ORDER BY id", (id,))
            return [transition_of(db, row) for row in rows]

    def _runs(self, *, limit: int = 20) -> list[RunRecord]:
        _check_limit(limit)
        with self._tx(write=False) as db:
            rows = db.query(
                "SELECT * FROM agentkit_runs ORDER BY COALESCE(started_at, ended_at) DESC, id LIMIT ?", (limit,)
            )
            return [run_of(db, row, lenient=True) for row in rows]

    def _run_row(self, db: Connection, run_id: str) -> dict[str, Any]:
        _check_id(run_id, "run")
        rows = db.query("SELECT * FROM agentkit_runs WHERE id = ?", (run_id,))
        if not rows:
            raise UnknownId(
                f"no run {run_id!r} in the journal at {self._where}; list them with `agentkit journal runs`",
                id=run_id,
            )
        return rows[0]

    def _run(self, run_id: str) -> RunRecord:
        with self._tx(write=False) as db:
            return run_of(db, self._run_row(db, run_id))

    def _rounds(self, run_id: str) -> list[RoundEntry]:
        with self._tx(write=False) as db:
            self._run_row(db, run_id)
            rows = db.query("SELECT * FROM agentkit_rounds WHERE run_id = ? ORDER BY round", (run_id,))
            entries = [round_of(row) for row in rows]
            if [e.round for e in entries] == list(range(1, len(entries) + 1)) and entries:
                return entries
            # Rounds no trace recorded (the run has no result yet, or a leg of it died before its end and a
            # resumed leg wrote only its own) are rebuilt from the event log.
            traced = {e.round: e for e in entries}
            rebuilt = {e.round: e for e in folded(db, run_id) if e.round not in traced}
            return [v for _, v in sorted((traced | rebuilt).items())]

    # -- transitions ----------------------------------------------------------------------------

    def _move(
        self,
        id: str,
        verb: str,
        allowed: tuple[ProposalState, ...],
        after: ProposalState,
        actor: str,
        note: str,
        sets: Mapping[str, object],
    ) -> ProposalRecord:
        at = now()
        with self._tx(write=True) as db:
            before = self._fetch(db, id).state
            if before not in allowed:
                states = " or ".join(s.value for s in allowed)
                raise TransitionRefused(
                    f"cannot {verb} proposal {id!r}: it is {before.value}, and only a {states} proposal can be "
                    f"{verb.removesuffix('e')}ed; {_HINTS[before]}",
                    id=id,
                    state=before.value,
                )
            values = {name: db.to_db_time(at) if value is _AT else value for name, value in sets.items()}
            assignments = "".join(f", {name} = ?" for name in values)
            changed = db.execute(
                f"UPDATE agentkit_proposals SET state = ?{assignments} WHERE id = ? AND state = ?",
                (after.value, *values.values(), id, before.value),
            )
            if changed != 1:
                raise TransitionRefused(
                    f"cannot {verb} proposal {id!r}: it changed meanwhile; look again", id=id, state=""
                )
            log_transition(db, id, before, after, actor, at, note)
            return self._fetch(db, id)

    def _approve(self, id: str, approved_by: str) -> ProposalRecord:
        by = _named(approved_by, "approved_by")
        sets = {"approved_by": by, "approved_at": _AT}
        return self._move(id, "approve", (ProposalState.PENDING,), ProposalState.APPROVED, by, "", sets)

    def _reject(self, id: str, rejected_by: str, reason: str) -> ProposalRecord:
        by, why = _named(rejected_by, "rejected_by"), _named(reason, "reason")
        sets = {"rejected_by": by, "rejected_at": _AT, "reason": why}
        allowed = (ProposalState.PENDING, ProposalState.APPROVED)
        return self._move(id, "reject", allowed, ProposalState.REJECTED, by, why, sets)

    def _resolve(self, id: str, resolved_by: str, state: ProposalState, note: str) -> ProposalRecord:
        by, why = _named(resolved_by, "resolved_by"), _named(note, "note")
        target = ProposalState(state)
        choices = (ProposalState.EXECUTED, ProposalState.FAILED, ProposalState.APPROVED)
        if target not in choices:
            raise UsageError(
                f"an abandoned execution resolves to one of {', '.join(c.value for c in choices)}; got {target.value!r}"
            )
        sets: dict[str, object] = {"resolved_by": by, "resolved_at": _AT, "note": why}
        if target is ProposalState.APPROVED:
            sets |= {"claim": None, "claimed_by": None, "claimed_at": None, "lease_until": None}
        else:
            sets |= {"finished_at": _AT, "claim": None, "lease_until": None}
            if target is ProposalState.FAILED:
                sets["error"] = f"resolved by {by}: {why}"
        return self._move(id, "resolve", (ProposalState.EXECUTING,), target, by, why, sets)

    def _propose(self, action: ProposedAction[Any], *, proposed_by: str = "") -> ProposalRecord:
        actor = proposed_by or (f"run:{action.run_id}" if action.run_id else "api")
        with self._tx(write=True) as db:
            return self._fetch(db, insert_proposal(db, action, actor, now()))

    # -- execution ------------------------------------------------------------------------------

    def _claim(
        self, id: str, tool: AnyTool, worker: str, token: str | None = None, lease: timedelta = DEFAULT_LEASE
    ) -> Claim[Any]:
        """Check the stored call against ``tool`` and the digest, then claim it: approved -> executing.

        The row is read with a lock (PostgreSQL ``FOR UPDATE``; SQLite's write lock is already held)
        and updated by primary key in the same transaction: of many workers racing, the first holds
        the row and every other reads it, once the first commits, as no longer approved.
        """
        token = token or uuid.uuid4().hex
        with self._claiming(token, worker), self._tx(write=True) as db:
            record = self._fetch(db, id, lock=True)
            if record.state is not ProposalState.APPROVED:
                raise TransitionRefused(
                    f"cannot execute proposal {id!r}: it is {record.state.value}, and only an approved proposal "
                    f"can be executed; {_HINTS[record.state]}",
                    id=id,
                    state=record.state.value,
                )
            args = self._checked_args(record, tool)
            at = now()
            db.execute(claim_statement(), (worker, db.to_db_time(at), token, db.to_db_time(at + lease), id))
            log_transition(db, id, ProposalState.APPROVED, ProposalState.EXECUTING, worker, at, "")
            return Claim(record=self._fetch(db, id), args=args, token=token, worker=worker, lease=lease)

    def _claim_next(
        self, tools: Mapping[str, AnyTool], worker: str, lease: timedelta, skip: frozenset[str]
    ) -> Claim[Any] | None:
        """Claim the oldest approved proposal for one of ``tools`` in one statement; ``None``: there is none.

        Raises ``Unrunnable`` (rolled back, the proposal stays approved) when the stored call does
        not check out against the tool of that name, and ``NothingRan`` when the database failed.
        """
        token = uuid.uuid4().hex
        with self._claiming(token, worker), self._tx(write=True) as db:
            at = now()
            sql = claim_next_statement(db.dialect, tools=len(tools), skip=len(skip))
            params = (worker, db.to_db_time(at), token, db.to_db_time(at + lease), *tools, *sorted(skip))
            rows = db.query(sql, params)
            if not rows:
                return None
            record = proposal_of(db, rows[0])
            try:
                args = self._checked_args(record, tools[record.tool_name])
            except (JournalError, UsageError) as refused:
                error = refused if isinstance(refused, JournalError) else JournalError(str(refused))
                raise Unrunnable(record.id, error) from refused
            log_transition(db, record.id, ProposalState.APPROVED, ProposalState.EXECUTING, worker, at, "")
            return Claim(record=record, args=args, token=token, worker=worker, lease=lease)

    @contextmanager
    def _claiming(self, token: str, worker: str) -> Iterator[None]:
        """Turn a database failure during a claim into ``NothingRan``, handing back a claim whose commit is unknown."""
        try:
            yield
        except _CommitUnconfirmed as error:
            released = False
            with suppress(JournalError):
                released = self._release(token, worker)
            hint = (
                "the claim was handed back"
                if released
                else "if the commit did reach the server, the proposal shows in stuck() once its lease runs out"
            )
            raise NothingRan(f"{error}; the tool was not run ({hint})", id="") from error
        except _DatabaseFailed as error:
            raise NothingRan(f"{error}; the tool was not run and the proposal is still approved", id="") from error

    def _release(self, token: str, worker: str) -> bool:
        """Hand back a claim whose tool was never called: executing -> approved. ``False``: no such claim."""
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
        """Extend a held claim's lease; ``False``: the claim is no longer this worker's (a human resolved it)."""
        with self._tx(write=True) as db:
            until = db.to_db_time(now() + lease)
            changed = db.execute(
                "UPDATE agentkit_proposals SET lease_until = ? WHERE id = ? AND claim = ?", (until, id, token)
            )
            return changed == 1

    def _checked_args(self, record: ProposalRecord, tool: AnyTool) -> Any:
        admit(tool, name=record.tool_name, tier=record.tier)
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
        """Record an execution's outcome for the worker holding claim ``token``: executing -> executed or failed."""
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

    def _close(self) -> None:
        """Close the connection; later calls raise ``JournalError``."""
        with self._lock, self._read_lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._reader is not None:
                    self._reader.close()

    # -- the async contract ---------------------------------------------------------------------

    async def propose(self, action: ProposedAction[Any], *, proposed_by: str = "") -> ProposalRecord:
        """Put a proposal in the inbox as ``pending``.

        The same call (run, round, digest) proposed while its entry is still open (pending, approved
        or executing) gives that entry back; after it was rejected, executed or failed it is a new
        pending entry that needs its own approval.
        """
        return await self._call(self._propose, action, proposed_by=proposed_by)

    async def get(self, id: str) -> ProposalRecord:
        """The proposal with that id; ``UnknownId`` if there is none."""
        return await self._read(self._get, id)

    async def pending(self) -> list[ProposalRecord]:
        """Proposals waiting for a human, oldest first."""
        return await self._read(self._proposals, state=ProposalState.PENDING)

    async def proposals(self, *, state: ProposalState | None = None, limit: int | None = None) -> list[ProposalRecord]:
        """Proposals (in one state, if given), oldest first."""
        return await self._read(self._proposals, state=state, limit=limit)

    async def history(self, id: str) -> list[Transition]:
        """Every state change of the proposal, in order, with who and when."""
        return await self._read(self._history, id)

    async def approve(self, id: str, approved_by: str) -> ProposalRecord:
        """pending -> approved; any other state raises ``TransitionRefused`` and changes nothing."""
        return await self._call(self._approve, id, approved_by)

    async def reject(self, id: str, rejected_by: str, reason: str) -> ProposalRecord:
        """pending or approved -> rejected (final)."""
        return await self._call(self._reject, id, rejected_by, reason)

    async def stuck(self, *, older_than: timedelta = DEFAULT_STUCK_AFTER) -> list[ProposalRecord]:
        """Proposals claimed for execution longer ago than ``older_than`` and still ``executing``.

        Each carries ``claimed_by`` and ``claimed_at``. A listed execution may be slow rather than
        dead: confirm that its worker is gone before ``resolve``, or the call can run twice.
        """
        return await self._read(self._stuck, older_than=older_than)

    async def resolve(self, id: str, resolved_by: str, state: ProposalState, note: str) -> ProposalRecord:
        """A human's decision on an abandoned execution: executing -> executed, failed or approved (run again)."""
        return await self._call(self._resolve, id, resolved_by, state, note)

    @overload
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R],
        *,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        ctx: object = ...,
    ) -> Execution[R]: ...
    @overload
    async def execute(
        self,
        id: str,
        tool: ContextTool[Args, R, Ctx],
        *,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        ctx: Ctx,
    ) -> Execution[R]: ...
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R] | ContextTool[Args, R, Any],
        *,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        ctx: object = NO_CTX,
    ) -> Execution[R]:
        """Run an approved proposal exactly once, whatever the number of workers racing for it.

        A tool that takes the run's ctx (a ``ContextTool``) is called with ``ctx``: the run that
        proposed the call is usually gone, so give the ctx the call needs (its clients, say). Without
        one the call is refused before the proposal is claimed.

        The claim carries a lease, renewed every third of ``lease`` while the tool runs; if this
        process dies, the proposal stays ``executing`` and ``stuck()`` lists it once the lease runs
        out. The outcome is recorded with up to ``OUTCOME_ATTEMPTS`` tries, each on a fresh
        connection; the tool is never called again.

        Raises:
            UnknownId: no such proposal.
            TransitionRefused: it is not approved (or another worker claimed it first).
            DigestMismatch: the stored args do not reproduce the approved digest; nothing ran.
            UsageError: ``tool`` is not the tool it was proposed for, or it takes the run's ctx and no
                ``ctx`` was given; nothing was claimed or run.
            MissingTierError: the tool declares no tier; nothing ran.
            TierChanged: the tool declares another tier than the one approved; nothing ran.
            JournalError: the database failed.
            NothingRan: the database failed before the claim held; the tool was not called.
            OutcomeNotRecorded: the tool ran, but its outcome could not be recorded; do not run it again.
        """
        if lease <= timedelta(0):
            raise UsageError(f"lease must be a positive timedelta; got {lease!r}")
        check_ctx(tool, ctx)
        who = worker or _worker_name()
        claim = await self._call(self._claim, id, tool, who, uuid.uuid4().hex, lease)
        # From here on the proposal is ``executing``: if this process dies, it stays so, and a human decides.
        return await self._run_claimed(claim, tool, ctx)

    async def _run_claimed(
        self, claim: Claim[Args], tool: Tool[Args, R] | ContextTool[Args, R, Any], ctx: object
    ) -> Execution[R]:
        """Call the tool of a held claim once, renewing the lease meanwhile, then record the outcome."""
        async with self._renewing(
            lambda: self._call(self._renew, claim.record.id, claim.token, claim.lease), claim.lease
        ):
            outcome = await invoke(tool, claim.args, ctx=ctx)
        error = outcome.failure()
        batch = outcome.batch if error is None else None
        record = await self._record_outcome(claim, batch=batch, error=error)
        if error is not None:
            return Execution(proposal=record, error=error)
        return Execution(proposal=record, batch=tuple(batch or ()))

    @asynccontextmanager
    async def _renewing(self, renewal: Callable[[], Awaitable[bool]], lease: timedelta) -> AsyncIterator[None]:
        """Renew a held lease (a proposal's claim, a resumed run's hold) every third of ``lease`` meanwhile.

        ``renewal`` returns ``False`` once the hold is no longer this process's; renewing then stops.
        """

        async def renew() -> None:
            while True:
                await asyncio.sleep(lease.total_seconds() / 3)
                # A failed renewal is retried next time; a lost database shows as an expired lease.
                with suppress(JournalError):
                    if not await renewal():
                        return

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    async def _record_outcome(
        self, claim: Claim[Any], *, batch: Sequence[object] | None, error: ToolError | None
    ) -> ProposalRecord:
        """Record what the tool did, retrying on database failures with a fresh connection each time."""
        id, text = claim.record.id, None if error is None else str(error)
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self._outcome_attempts),
            wait=tenacity.wait_exponential(multiplier=self._outcome_wait, max=4.0),
            retry=tenacity.retry_if_exception_type(_DatabaseFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._call(self._finish, id, claim.token, claim.worker, batch=batch, error=text)
        except _DatabaseFailed as failed:
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

    async def work(
        self,
        tools: Sequence[Tool[Any, Any] | ContextTool[Any, Any, Ctx]],
        *,
        ctx: Ctx | NoCtx = NO_CTX,
        limit: int | None = None,
        stop: asyncio.Event | None = None,
        concurrency: int = 1,
        until_empty: bool = False,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        poll: float | None = None,
        report: Callable[[Worked], object] | None = None,
    ) -> WorkReport:
        """Run approved proposals for ``tools`` as they come, each exactly once; see ``docs/journal.md``.

        Each claim takes the oldest approved proposal whose tool name is in ``tools`` in one
        statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so workers never queue on one row;
        SQLite: under the write lock). Proposals for other tools are left for other workers. Up to
        ``concurrency`` calls run at once. With nothing to claim, the worker waits: on PostgreSQL
        for a notification that a proposal was approved (``LISTEN``; ``poll`` seconds at most, a
        safety net, default 30), on SQLite for ``poll`` seconds (default 0.5).

        Args:
            tools: The tools this worker runs, matched to proposals by name.
            ctx: What the tools that take the run's ctx are called with (every call gets this one
                object: the worker's clients, say). Required when one of ``tools`` takes a ctx.
            limit: Return after this many claims (``None``: no limit).
            stop: Set it to stop: no new claims; running calls finish and are recorded.
            concurrency: Calls run at once, at least 1.
            until_empty: Return once nothing is approved for these tools and nothing runs.
            worker: The name recorded as ``claimed_by`` (default ``host:pid``).
            lease: Each claim's lease (see ``DEFAULT_LEASE``).
            poll: Seconds between looks when no notification comes (see above).
            report: Called with each ``Worked`` as it happens (progress output).

        Returns:
            What was executed, failed, left unrecorded or left for a human.

        Raises:
            UsageError: no tools, two tools with one name, a tool with no tier, a tool that takes the
                run's ctx without ``ctx``, or a bad option. Raised before anything is claimed.
        """
        from agentkit.journal._worker import work

        return await work(
            self,
            tools,
            ctx=ctx,
            limit=limit,
            stop=stop,
            concurrency=concurrency,
            until_empty=until_empty,
            worker=worker or _worker_name(),
            lease=lease,
            poll=poll,
            report=report,
        )

    def _wakeups(self, poll: float | None) -> AbstractAsyncContextManager[Wakeups]:
        """How ``work`` waits for approvals: a short poll here; PostgreSQL listens for notifications."""
        from agentkit.journal._worker import Polling

        return Polling(0.5 if poll is None else poll)

    def _resume_state(self, run_id: str) -> tuple[RunRecord, str | None, list[ProposalRecord]]:
        """The run, its latest checkpoint (JSON) and its proposals, read in one transaction."""
        with self._tx(write=False) as db:
            row = self._run_row(db, run_id)
            record = run_of(db, row)
            rows = db.query("SELECT * FROM agentkit_proposals WHERE run_id = ? ORDER BY proposed_at, id", (run_id,))
            text = row.get("checkpoint")
            return record, text if isinstance(text, str) else None, [proposal_of(db, r) for r in rows]

    def _claim_run(self, run_id: str, digest: str, worker: str, token: str, lease: timedelta) -> None:
        """Hold the run to resume it from the checkpoint of ``digest``, reopening it (its ending is the resumed run's).

        Raises:
            RunClaimed: a live process holds the run (it runs, or another process resumes it), or the
                run moved on from that checkpoint meanwhile.
        """
        at = now()
        with self._tx(write=True) as db:
            changed = db.execute(
                "UPDATE agentkit_runs SET claimed_by = ?, claim = ?, lease_until = ?, ended_at = NULL, outcome = NULL, "
                "stop_reason = NULL, error = NULL WHERE id = ? AND checkpoint_digest = ? "
                "AND (claim IS NULL OR lease_until IS NULL OR lease_until <= ?)",
                (worker, token, db.to_db_time(at + lease), run_id, digest, db.to_db_time(at)),
            )
            if changed == 1:
                return
            row = self._run_row(db, run_id)
        if row.get("checkpoint_digest") != digest:
            raise RunClaimed(
                f"run {run_id!r} moved on from the checkpoint this resume read (another process resumed it "
                "meanwhile); nothing ran. Look at it again with `agentkit journal runs`",
                id=run_id,
                holder=str(row.get("claimed_by") or ""),
            )
        raise held(run_id, row.get("claimed_by"), row.get("lease_until"))

    def _renew_run(self, run_id: str, token: str, lease: timedelta) -> bool:
        """Extend a resumer's hold on a run; ``False``: the hold is gone (the run ended, releasing it)."""
        with self._tx(write=True) as db:
            until = db.to_db_time(now() + lease)
            return (
                db.execute(
                    "UPDATE agentkit_runs SET lease_until = ? WHERE id = ? AND claim = ?", (until, run_id, token)
                )
                == 1
            )

    def _release_run(self, run_id: str, token: str) -> None:
        with self._tx(write=True) as db:
            db.execute(
                "UPDATE agentkit_runs SET claim = NULL, lease_until = NULL WHERE id = ? AND claim = ?", (run_id, token)
            )

    @overload
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Args, R],
        tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
        ctx: Ctx,
        *,
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Answer] | None = None,
    ) -> TieredLoopResult[Args, R, Answer]: ...
    @overload
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, BaseModel, R],
        tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        ctx: Ctx,
        *,
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Answer] | None = None,
    ) -> TieredLoopResult[BaseModel, R, Answer]: ...
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Any, R],
        tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        ctx: Ctx,
        *,
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Any] | None = None,
    ) -> TieredLoopResult[Any, R, Any]:
        """Continue a run from its latest checkpoint, with the decisions recorded in the inbox; see ``docs/journal.md``.

        A run that stopped at a proposal goes on once each of its proposals is decided (approved,
        rejected, or already executed by a worker); a run whose process died (``RunStatus.CRASHED``)
        goes on from its last completed round. The run is held with a lease, renewed every third of
        ``lease`` while it runs, so exactly one process resumes it. Approved calls run through
        ``execute``'s claim, so each runs once whoever else tries. The continued run is recorded in
        this journal under the same run id (do not pass a ``JournalObserver`` of this journal too);
        its ending replaces the one recorded.

        Args:
            run_id: The run (from ``runs()`` or ``agentkit journal runs``).
            caller: The structured-call seam.
            agent: The executor.
            tools: The run's tool set: the same names, in the same order, at the same tiers.
            ctx: The caller's data for ``agent.render``, and for the tools that take the run's ctx.
            observer: More observers of the continued run.
            worker: The name the hold and the approved calls' claims record (default ``host:pid``).
            lease: How long the hold stays valid unless renewed.
            summarize: The run's ``ContextWindow.summarize``, given again (see ``resume_tool_loop``).
            answer: The run's answer type, given again (see ``resume_tool_loop``).

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the run is finished, has no checkpoint, waits on a decision (naming the
                proposal), has an approved call still executing, or cannot resume with these tools;
                nothing ran.
            RunClaimed: a live process holds the run, or another resumed it first; nothing ran.
        """
        from agentkit.journal._resume import resume

        if lease <= timedelta(0):
            raise UsageError(f"lease must be a positive timedelta; got {lease!r}")
        return await resume(
            self,
            run_id,
            caller,
            agent,
            tools,
            ctx,
            observer=observer,
            worker=worker or _worker_name(),
            lease=lease,
            summarize=summarize,
            answer=answer,
        )

    async def runs(self, *, limit: int = 20) -> list[RunRecord]:
        """The most recent runs, newest first (``limit`` >= 1, else ``UsageError``)."""
        return await self._read(self._runs, limit=limit)

    async def run(self, run_id: str) -> RunRecord:
        """One run; ``UnknownId`` if the journal never saw it."""
        return await self._read(self._run, run_id)

    async def rounds(self, run_id: str) -> list[RoundEntry]:
        """The run's rounds: from its trace once it finished, rebuilt from its events until then (and for
        the rounds of a leg that died before a resumed leg finished the run).

        Raises:
            UnknownId: the journal never saw the run.
        """
        return await self._read(self._rounds, run_id)

    async def close(self) -> None:
        """Close the connection."""
        if not self._closed:
            await self._call(self._close)
        self._threads.shutdown(wait=False)
        self._read_threads.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


_AT = object()
"""Placeholder in ``_move``'s assignments for "the time of this transition"."""
