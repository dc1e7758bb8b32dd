"""Runs: each run's events and state as they happen, the runs listed, and a run resumed by one process.

A run's state (`RunCheckpoint`) is stored as rows appended to `agentkit_entries`, one per entry
(a round, a decision, an end), beside its header on the run's row: a round's write costs the size
of the round, not of the run. Reading a run back folds those rows into the state again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._events import Event, ProposalCaptured, RunAborted, RunFinished, RunStarted
from agentkit._state import RunCheckpoint
from agentkit.errors import ResumeRefused, RunClaimed
from agentkit.journal._events import event_data, round_of_event
from agentkit.journal._grants import record_proposal
from agentkit.journal._records import Checkpointed, Hold, ProposalRecord, RoundEntry, RunRecord
from agentkit.journal._sql import (
    Busy,
    Connection,
    Stored,
    abort_run,
    append_events,
    config_text,
    event_row,
    finish_run,
    folded,
    hold_runs_statement,
    insert_fork,
    insert_run,
    lineage_proposals,
    now,
    readable_state,
    recorded_rounds,
    round_of,
    run_of,
    state_of,
    store_state,
)
from agentkit.journal._storage import Storage, check_limit

if TYPE_CHECKING:
    from agentkit._config import LoopConfig

    pass

__all__ = ["Runs", "held"]

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")
Answer = DefaultedTypeVar("Answer", default=None)
R = TypeVar("R")


def held(run_id: str, holder: object, until: object) -> RunClaimed:
    """The error for a run another live process holds."""
    return RunClaimed(
        f"run {run_id!r} is held by {holder or 'another process'} (its lease runs until {until}): it is still "
        "running, or another process resumes it; nothing ran. Once that process is gone, its lease runs out and "
        "the run can be resumed",
        id=run_id,
        holder=str(holder or ""),
    )


@dataclass(frozen=True, slots=True)
class _RoundEvent:
    """One of a round's own events, waiting to be logged unless a state written with it holds its round."""

    event: Event
    round: int


def _latest_states(entries: Sequence[Event | Checkpointed]) -> dict[str, Checkpointed]:
    """Each run's latest state among `entries` (the one with the most entries): of a run's states in one write
    only it is written, as it holds every entry the others do."""
    latest: dict[str, Checkpointed] = {}
    for entry in entries:
        if isinstance(entry, Checkpointed):
            kept = latest.get(entry.run_id)
            if kept is None or len(kept.checkpoint.entries) <= len(entry.checkpoint.entries):
                latest[entry.run_id] = entry
    return latest


_REMEMBERED = 10_000
"""Most runs whose stored state a journal object keeps track of (one entry per run in progress)."""


class Runs(Storage):
    """The runs a journal records, and the resuming of one."""

    # -- run events (synchronous: the observer's writer thread calls this) ------------------------

    def record(self, event: Event) -> None:
        """Write one run event, in one transaction, before returning (it may wait for the database).

        A run's start inserts its row, a proposal enters the inbox as `pending`, and the run's
        end records its outcome, usage and every round of its trace. The event is also appended
        to the event log (a round's event unless a state written with it holds the round), so a
        run whose process dies keeps every round it began.
        """
        self.record_all((event,))

    def record_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        """Append the entries of the run's state that the journal does not hold yet (a round's worth)."""
        self.record_all((Checkpointed(run_id, checkpoint),))

    def record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> None:
        """Write events and checkpoints, in order, in one transaction (`JournalObserver` writes what
        queued up meanwhile this way: one commit, so one sync to disk, for all of it).

        With `hold`, each run started here is held by that recorder until its lease runs out.
        """
        with self._tx(write=True, synced=False) as db:
            marks = self._record(db, entries, hold)
        self._remember(marks)

    @property
    def records_at_once(self) -> bool:
        """Whether `try_record_all` writes without waiting (a local database file: `SQLiteJournal`), so
        `JournalObserver` can write a run's record on the run's own thread; otherwise its writer thread does."""
        return False

    def try_record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> bool:
        """`record_all`, only if it can start at once: `False`, with nothing written, while this journal's
        connection is in use or another connection (another process) holds the database's write lock."""
        try:
            with self._tx(write=True, synced=False, at_once=True) as db:
                marks = self._record(db, entries, hold)
        except Busy:
            return False
        self._remember(marks)
        return True

    def _remember(self, marks: dict[str, Stored | None]) -> None:
        """Keep how far each run's stored state goes after a committed write (`None`: the run ended)."""
        stored = self._stored
        for run_id, mark in marks.items():
            if mark is None:
                stored.pop(run_id, None)
            else:
                if len(stored) >= _REMEMBERED and run_id not in stored:
                    stored.clear()  # runs whose end this journal never wrote (recorded elsewhere, or lost)
                stored[run_id] = mark

    def _record(
        self, db: Connection, entries: Sequence[Event | Checkpointed], hold: Hold | None
    ) -> dict[str, Stored | None]:
        """Write `entries` in `db`'s transaction; how far each run's stored state goes once it commits
        (`None`: the run ended), for `_remember`."""
        latest = _latest_states(entries)
        # The log's rows go in one statement at the end: nothing else reads the log, so their order is kept.
        # A round's own events (its start, model calls, tool call and result) wait there until the states are
        # written: those of a round that a state written in this transaction holds are not logged again.
        log: list[tuple[str, str, int | None, str] | _RoundEvent] = []
        """Rows for the log, and the round events that may join them."""
        held: dict[str, int] = {}
        """Per run, the last round that a state written here holds."""
        marks: dict[str, Stored | None] = {}
        at: datetime | None = None
        """The time the events of this write are recorded at, taken when the first of them needs it (a round's
        state with its own events, the usual write, needs none)."""
        for entry in entries:
            if isinstance(entry, Checkpointed):
                if latest.get(entry.run_id) is entry:
                    mark = store_state(db, entry.run_id, entry.checkpoint, self._stored.get(entry.run_id))
                    if mark is not None:
                        held[entry.run_id] = mark.round
                        marks[entry.run_id] = mark
                continue
            round = round_of_event(entry)
            if round is not None:
                log.append(_RoundEvent(entry, round))
                continue
            at = at or now()
            log.append(self._event(db, entry, at, hold, latest, marks, held))
        rows = [row for row in log if not isinstance(row, _RoundEvent) or row.round > held.get(row.event.run_id, 0)]
        if rows:
            stamp = db.to_db_time(at or now())
            append_events(
                db, [event_row(r.event, *event_data(r.event)) if isinstance(r, _RoundEvent) else r for r in rows], stamp
            )
        return marks

    def _event(
        self,
        db: Connection,
        event: Event,
        at: datetime,
        hold: Hold | None,
        latest: dict[str, Checkpointed],
        marks: dict[str, Stored | None],
        held: dict[str, int],
    ) -> tuple[str, str, int | None, str]:
        """Write a run's start, proposal or end (`_write_event`) in `_record`'s transaction, keeping `latest`,
        `marks` and `held` up to date with the state it wrote; its row for the log."""
        run_id = event.run_id
        # A state this transaction wrote for the run is the one its end's state continues; a run's start takes
        # the run's state in this batch with it (the batch's latest, written with the run's row).
        known = marks.get(run_id) or self._stored.get(run_id)
        state = latest.get(run_id) if isinstance(event, RunStarted) else None
        row, mark = self._write_event(db, event, at, hold, known, None if state is None else state.checkpoint)
        if isinstance(event, RunFinished | RunAborted):
            marks[run_id] = None
        elif mark is not None:
            marks[run_id] = mark
            if state is not None:
                del latest[run_id]  # written with the run's row (otherwise it is written as a round's state is)
        if mark is not None:
            held[run_id] = max(held.get(run_id, 0), mark.round)
        return row

    def _write_event(
        self,
        db: Connection,
        event: Event,
        at: datetime,
        hold: Hold | None = None,
        known: Stored | None = None,
        state: RunCheckpoint | None = None,
    ) -> tuple[tuple[str, str, int | None, str], Stored | None]:
        """Write what the event changes besides the log (`hold`: see `record_all`; `known`: what the journal
        last stored of the run's state, see `store_state`; `state`: the run's state, written with its start);
        its row for the log (`append_events`), and how far the run's stored state goes once it is written
        (`None`: the event wrote none)."""
        round, data = event_data(event)
        mark = None
        match event:
            case RunStarted():
                mark = insert_run(db, event, at, hold, state)
            case ProposalCaptured():
                data["proposal_id"] = record_proposal(db, event.proposal, f"run:{event.run_id}", at)
            case RunFinished():
                mark = finish_run(db, event, at, known)
            case RunAborted():
                abort_run(db, event, at)
            case _:
                pass
        return event_row(event, round, data), mark

    def hold_runs(self, run_ids: Sequence[str], *, holder: str, token: str, lease: timedelta) -> None:
        """Take, or renew, the hold on unfinished runs this process records: until `lease` from now.

        `JournalObserver` calls it as each run starts and every third of its lease after, so a run
        whose process died shows as crashed once the lease runs out. A run another process holds
        (one resuming it) is left alone.
        """
        if not run_ids:
            return
        with self._tx(write=True, synced=False) as db:
            until = db.to_db_time(now() + lease)
            db.execute(hold_runs_statement(len(run_ids)), (holder, token, until, *run_ids, token))

    def _runs(self, *, limit: int = 20) -> list[RunRecord]:
        check_limit(limit)
        with self._tx(write=False) as db:
            rows = db.query(
                "SELECT * FROM agentkit_runs ORDER BY COALESCE(started_at, ended_at) DESC, id LIMIT ?", (limit,)
            )
            return [run_of(db, row, lenient=True) for row in rows]

    def _run(self, run_id: str) -> RunRecord:
        with self._tx(write=False) as db:
            return run_of(db, self._run_row(db, run_id))

    def _rounds(self, run_id: str) -> list[RoundEntry]:
        with self._tx(write=False) as db:
            row = self._run_row(db, run_id)
            state = state_of(db, row)
            if state is not None:
                return recorded_rounds(db, run_id, state)
            # A run recorded before its state was (an earlier agentkit), or not a tool loop: its trace, and the
            # rounds no trace recorded rebuilt from the event log.
            rows = db.query("SELECT * FROM agentkit_rounds WHERE run_id = ? ORDER BY round", (run_id,))
            entries = [round_of(row) for row in rows]
            if [e.round for e in entries] == list(range(1, len(entries) + 1)) and entries:
                return entries
            traced = {e.round: e for e in entries}
            rebuilt = {e.round: e for e in folded(db, run_id) if e.round not in traced}
            return [v for _, v in sorted((traced | rebuilt).items())]

    def _readable_rounds(self, run_id: str) -> tuple[list[RoundEntry], str | None]:
        """The run's rounds as far as its stored state can be read, and what cannot be (`None`: all of it):
        what `agentkit journal show` prints of a damaged run, where `rounds` refuses."""
        with self._tx(write=False) as db:
            row = self._run_row(db, run_id)
            state, damage = readable_state(db, row)
            return recorded_rounds(db, run_id, state), damage

    def _resume_state(self, run_id: str) -> tuple[RunRecord, RunCheckpoint | None, list[ProposalRecord]]:
        """The run, its state and its proposals (a fork's with those it shares with its parents: see
        `lineage_proposals`), read in one transaction.

        Raises:
            ResumeRefused: the stored state cannot be read, or was written by an earlier agentkit.
        """
        with self._tx(write=False) as db:
            row = self._run_row(db, run_id)
            record = run_of(db, row)
            return record, state_of(db, row), lineage_proposals(db, row)

    def _claim_run(self, run_id: str, digest: str, worker: str, token: str, lease: timedelta) -> None:
        """Hold the run to resume it from its state of `digest`, reopening it (its ending is the resumed run's).

        Raises:
            RunClaimed: a live process holds the run (it runs, or another process resumes it), or the
                run moved on from that checkpoint meanwhile.
        """
        at = now()
        with self._tx(write=True) as db:
            changed = db.execute(
                "UPDATE agentkit_runs SET claimed_by = ?, claim = ?, lease_until = ?, ended_at = NULL, outcome = NULL, "
                "stop_reason = NULL, error = NULL WHERE id = ? AND state_digest = ? "
                "AND (claim IS NULL OR lease_until IS NULL OR lease_until <= ?)",
                (worker, token, db.to_db_time(at + lease), run_id, digest, db.to_db_time(at)),
            )
            if changed == 1:
                return
            row = self._run_row(db, run_id)
        if row.get("state_digest") != digest:
            raise RunClaimed(
                f"run {run_id!r} moved on from the checkpoint this resume read (another process resumed it "
                "meanwhile); nothing ran. Look at it again with `agentkit journal runs`",
                id=run_id,
                holder=str(row.get("claimed_by") or ""),
            )
        raise held(run_id, row.get("claimed_by"), row.get("lease_until"))

    def _renew_run(self, run_id: str, token: str, lease: timedelta) -> bool:
        """Extend a resumer's hold on a run; `False`: the hold is gone (the run ended, releasing it)."""
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

    async def runs(self, *, limit: int = 20) -> list[RunRecord]:
        """The most recent runs, newest first (`limit` >= 1, else `UsageError`)."""
        return await self._read(self._runs, limit=limit)

    async def run(self, run_id: str) -> RunRecord:
        """One run; `UnknownId` if the journal never saw it."""
        return await self._read(self._run, run_id)

    def _state(self, run_id: str) -> RunCheckpoint:
        with self._tx(write=False) as db:
            row = self._run_row(db, run_id)
            state = state_of(db, row)
        if state is None:
            raise ResumeRefused(
                f"run {run_id!r} has no state in the journal at {self._where}: it was not a tool loop, or it was "
                "recorded without a JournalObserver"
            )
        state.verify()
        return state

    def _fork(self, run_id: str, at_round: int, config: LoopConfig | None, fork_id: str) -> str:
        at = now()
        with self._tx(write=True) as db:
            row = self._run_row(db, run_id)
            state = state_of(db, row)
            if state is None:
                raise ResumeRefused(f"run {run_id!r} has no state in the journal at {self._where} to fork from")
            state.verify()
            fork = state.forked(fork_id, at_round=at_round, config=config)
            insert_fork(db, row, fork, None if config is None else config_text(config), at)
        return fork_id

    async def fork(self, run_id: str, *, at_round: int, config: LoopConfig | None = None) -> str:
        """A new run whose state is `run_id`'s up to round `at_round` (`0`: before round 1); its id.

        Resume it with `journal.resume(fork_id, ...)`, with another agent, prompt or model (and, with
        `config`, another `LoopConfig`), but the same tools: the calls that ran before the fork are
        inherited as done and never run again; a gated call the fork reaches is a new proposal, with its
        own approval. A proposal of the rounds the fork keeps that the run's state does not hold decided
        stays the run's: the fork shares its inbox entry (no new one is made), so it is decided once and
        runs at most once for the run and all its forks. Resuming the fork goes on with what the inbox
        recorded: the batch of a call a worker (`work`, `execute`) or another resume already ran, or its
        rejection; it waits, like the run's own resume, while the call is pending or executing. The fork
        records its parent and round (`RunRecord.parent`, `forked_at`).

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the journal holds no state for it, or one that does not verify.
            UsageError: `at_round` is not a round the run reached.
        """
        return await self._call(self._fork, run_id, at_round, config, uuid.uuid4().hex)

    async def state(self, run_id: str) -> RunCheckpoint:
        """The run's state, folded from the rows the journal holds, and verified (`agentkit journal export`
        writes it; `ReplayCaller.from_journal` replays it).

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the journal holds no state for it, or one that cannot be read or does not verify.
        """
        return await self._read(self._state, run_id)

    async def rounds(self, run_id: str) -> list[RoundEntry]:
        """The run's rounds, from its state (with each proposal's decision); a run recorded by an earlier
        agentkit, from its trace and its events.

        Raises:
            UnknownId: the journal never saw the run.
        """
        return await self._read(self._rounds, run_id)
