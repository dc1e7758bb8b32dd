"""How the journal writes a run's record: a round's events with its state's new entries in one transaction,
only the entries it does not hold yet, nothing waiting longer than ``linger``, and (SQLite) records committed
unsynced, inbox transitions synced."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    RoleSpec,
    RunCheckpoint,
    StopReason,
    Tier,
    ToolLoopResult,
    ToolRoundInfo,
    UsageError,
    run_tool_loop_tiered,
    tool,
)
from agentkit._observe import Observer
from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome, ToolEntry
from agentkit.errors import ResumeRefused
from agentkit.events import Event, RunFinished, RunStarted
from agentkit.journal import Journal, JournalError, JournalObserver, RunState, SQLiteJournal
from agentkit.journal._records import Checkpointed, Hold
from agentkit.journal._sql import insert_rows
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Query, Target


class Doc(BaseModel):
    id: str
    score: float
    tags: dict[str, JsonValue]
    """Keys out of order, so the digest's sorted JSON differs from the stored one."""


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Find documents."""
    return [Doc(id=f"{args.query}-{n}", score=1 / (n + 1), tags={"z": 1, "a": [n]}) for n in range(3)]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[Doc]:
    """Delete a path."""
    raise AssertionError("an irreversible tool never runs in the loop")


class Planner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="planner-model")

    def render(self, ctx: None, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="plan", dynamic=f"round {info.round}")


class Capture(Observer):
    """Every event and checkpoint of a run, in order, as the journal observer would queue them."""

    def __init__(self) -> None:
        self.entries: list[Event | Checkpointed] = []
        self.checkpoints: list[RunCheckpoint] = []

    def on_event(self, event: Event) -> None:
        self.entries.append(event)

    def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        self.entries.append(Checkpointed(run_id, checkpoint))
        self.checkpoints.append(checkpoint)


async def captured_run() -> Capture:
    """Three searches, then done: a checkpoint at each round's end."""
    capture = Capture()
    steps = [call_step(Query(query=q), tool="search", rationale=f"look {q}") for q in ("a", "b", "c")]
    caller = ScriptedCaller([*steps, done_step("enough")])
    await run_tool_loop_tiered(caller, Planner(), [search], None, observer=capture)
    return capture


def counting(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The kinds in each transaction the observer writes (a ``record_all`` call, or a ``try_record_all`` that wrote)."""
    batches: list[list[str]] = []
    record_all = journal.record_all

    def counted(entries: Sequence[Event | Checkpointed], **kwargs: Any) -> None:
        batches.append([e.kind for e in entries])
        record_all(entries, **kwargs)

    monkeypatch.setattr(journal, "record_all", counted)
    try_record_all = journal.try_record_all

    def tried(entries: Sequence[Event | Checkpointed], **kwargs: Any) -> bool:
        written = try_record_all(entries, **kwargs)
        if written:
            batches.append([e.kind for e in entries])
        return written

    monkeypatch.setattr(journal, "try_record_all", tried)
    return batches


def queue(observer: JournalObserver, entries: Sequence[Event | Checkpointed]) -> None:
    for entry in entries:
        if isinstance(entry, Checkpointed):
            observer.on_checkpoint(entry.run_id, entry.checkpoint)
        else:
            observer.on_event(entry)


async def test_a_rounds_events_wait_for_its_checkpoint_and_go_with_it_in_one_transaction(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round's events are not written on their own; its checkpoint writes them with it, in one transaction.

    The run's start and its first checkpoint (before round 1, no call made yet) wait too, and go with round 1.
    """
    entries = (await captured_run()).entries
    ends = [i for i, e in enumerate(entries) if isinstance(e, Checkpointed)]
    before, round_1 = entries[: ends[0] + 1], entries[ends[0] + 1 : ends[1]]
    round_2 = entries[ends[1] + 1 : ends[2] + 1]
    batches = counting(journal, monkeypatch)
    with JournalObserver(journal, linger=3600) as observer:
        queue(observer, before)  # the run's start and its first checkpoint (round 0)
        queue(observer, round_1)
        await asyncio.sleep(0.2)
        assert batches == []  # nothing is due before round 1 ends
        queue(observer, [entries[ends[1]]])
        await observer.wait_flushed()
        assert batches == [
            ["run_start", "checkpoint", "round_start", "llm_call", "tool_call", "tool_result", "checkpoint"]
        ]
        [run] = await journal.runs()
        assert (run.checkpoint_round, run.resumable) == (1, True)
        queue(observer, round_2)  # ends with round 2's checkpoint: written at once, without a flush
        deadline = time.monotonic() + 30
        while len(batches) < 2:
            assert time.monotonic() < deadline, "round 2's checkpoint was not written at once"
            await asyncio.sleep(0.01)
        assert batches[1:] == [["round_start", "llm_call", "tool_call", "tool_result", "checkpoint"]]


async def test_a_flush_writes_what_waits_for_its_round(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flush`` does not wait for the round's end: what is queued is written at once."""
    entries = (await captured_run()).entries
    batches = counting(journal, monkeypatch)
    with JournalObserver(journal, linger=3600) as observer:
        observer.on_event(next(e for e in entries if not isinstance(e, Checkpointed)))
        assert observer.flush(timeout=30)
        assert batches == [["run_start"]]
        assert len(await journal.runs()) == 1


async def test_an_event_waits_at_most_linger(journal: Journal) -> None:
    """Without a round's end or a flush, an event is still written once it waited ``linger``."""
    entries = (await captured_run()).entries
    with JournalObserver(journal, linger=0.1) as observer:
        observer.on_event(next(e for e in entries if not isinstance(e, Checkpointed)))
        deadline = time.monotonic() + 30
        while not await journal.runs():
            assert time.monotonic() < deadline, "the event was never written"
            await asyncio.sleep(0.01)


def test_linger_is_checked(journal: Journal) -> None:
    """A negative or non-numeric linger is refused, naming it."""
    for bad in (-1, "1", True, float("nan")):
        with pytest.raises(UsageError, match="linger"):
            JournalObserver(journal, linger=bad)  # type: ignore[arg-type]  # the check is the point


def synchronous(journal: SQLiteJournal) -> int:
    """The writer connection's ``synchronous`` level (1 NORMAL, 2 FULL)."""
    [row] = journal._conn.query("PRAGMA synchronous")  # the level is the point
    return int(row["synchronous"])


@pytest.mark.parametrize("sync_records", [False, True])
async def test_records_commit_unsynced_and_inbox_transitions_synced(tmp_path: Path, sync_records: bool) -> None:
    """A run's record commits at NORMAL (FULL with sync_records=True); approving a proposal commits at FULL."""
    journal = SQLiteJournal(tmp_path / "journal.db", sync_records=sync_records)
    try:
        caller = ScriptedCaller([call_step(Target(path="/old"), tool="delete", rationale="stale"), done_step("asked")])
        with JournalObserver(journal) as observer:
            await run_tool_loop_tiered(caller, Planner(), [search, delete], None, observer=observer)
        assert synchronous(journal) == (2 if sync_records else 1)
        [pending] = await journal.pending()
        await journal.approve(pending.id, "ops@example.com")
        assert synchronous(journal) == 2
    finally:
        await journal.close()


async def test_a_runs_states_verify_and_read_back_equal() -> None:
    """Each state a run hands its observers verifies, and reads back equal from its JSON."""
    checkpoints = (await captured_run()).checkpoints
    assert [c.rounds for c in checkpoints] == [0, 1, 2, 3]
    for checkpoint in checkpoints:
        checkpoint.verify()
        stored = RunCheckpoint.model_validate_json(checkpoint.model_dump_json())
        assert stored == checkpoint
        stored.verify()


async def test_an_interrupt_while_writing_at_once_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt inside the hook's write goes back to the queue; the writer thread writes it all."""
    entries = (await captured_run()).entries
    journal = SQLiteJournal(tmp_path / "journal.db")
    try_record_all = journal.try_record_all
    calls = 0

    def interrupted(batch: Sequence[Event | Checkpointed], **kwargs: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyboardInterrupt
        return try_record_all(batch, **kwargs)

    monkeypatch.setattr(journal, "try_record_all", interrupted)
    interrupts = 0
    try:
        with JournalObserver(journal, linger=3600) as observer:
            for entry in entries:
                try:
                    queue(observer, [entry])
                except KeyboardInterrupt:  # round 1's checkpoint: its write at once was interrupted
                    interrupts += 1
            assert observer.flush(timeout=30)
            assert observer.failures == 0
        assert interrupts == 1
        [run] = await journal.runs()
        with journal._tx(write=False) as db:
            kinds = [row["kind"] for row in db.query("SELECT kind FROM agentkit_events ORDER BY id")]
        # The log keeps the start and the end, and the events of a round only where the writer's batch held no
        # state that holds it (how it split the queue after the interrupt decides which); in order.
        assert [k for k in kinds if k in ("run_start", "run_end")] == ["run_start", "run_end"]
        assert (kinds[0], kinds[-1]) == ("run_start", "run_end")
        assert (run.state, run.checkpoint_round) == (RunState.FINISHED, 4)  # the run's final checkpoint
        assert [r.round for r in await journal.rounds(run.id)] == [1, 2, 3, 4]
    finally:
        await journal.close()


async def test_of_a_runs_states_in_one_batch_the_latest_is_stored_and_the_run_is_held(journal: Journal) -> None:
    """Several of a run's states in one batch (the one before round 1 goes with round 1's) store the latest,
    whatever their order; an older state given later adds nothing; the run's start takes the recorder's hold."""
    entries = (await captured_run()).entries
    started = [e for e in entries if isinstance(e, RunStarted)]
    kept = [e for e in entries if isinstance(e, Checkpointed)]
    assert [c.checkpoint.rounds for c in kept[:4]] == [0, 1, 2, 3]
    hold = Hold(holder="here:1", token="t", lease=timedelta(minutes=5))
    journal.record_all([*started, kept[0], kept[2], kept[1]], hold=hold)
    [run] = await journal.runs()
    assert (run.checkpoint_round, run.resumable, run.claimed_by) == (2, True, "here:1")
    assert run.lease_until is not None
    assert run.lease_until > datetime.now(UTC)
    journal.record_all([kept[1], kept[3]])
    [run] = await journal.runs()
    assert run.checkpoint_round == 3
    _, stored, _ = journal._resume_state(run.id)
    assert stored == kept[3].checkpoint


async def test_a_state_that_does_not_continue_the_stored_one_is_refused(journal: Journal) -> None:
    """Another run's state under the same id (entries that do not follow the stored ones) is not written."""
    first, other = (await captured_run()).entries, (await captured_run()).entries
    started = [e for e in first if isinstance(e, RunStarted)]
    mine = [e for e in first if isinstance(e, Checkpointed)]
    theirs = [e for e in other if isinstance(e, Checkpointed)]
    journal.record_all([*started, mine[1]])
    with pytest.raises(JournalError, match="does not continue the one it holds"):
        journal.record_all([Checkpointed(mine[1].run_id, theirs[2].checkpoint)])
    [run] = await journal.runs()
    assert run.checkpoint_round == 1


async def test_a_run_started_again_is_held_only_if_nobody_else_holds_it(journal: Journal) -> None:
    """A run's start that finds its row (a resumed run starts again under its id) takes the recorder's hold
    only where no other holder (its resumer) has one."""
    started = [e for e in (await captured_run()).entries if isinstance(e, RunStarted)]
    journal.record_all(started)
    [run] = await journal.runs()
    assert run.claimed_by is None
    lease = timedelta(minutes=5)
    journal.record_all(started, hold=Hold(holder="here:1", token="t1", lease=lease))
    [run] = await journal.runs()
    assert run.claimed_by == "here:1"
    journal.record_all(started, hold=Hold(holder="there:2", token="t2", lease=lease))
    [run] = await journal.runs()
    assert run.claimed_by == "here:1"


def test_a_round_appends_only_its_own_entries(tmp_path: Path) -> None:
    """Each round's write inserts the state's new entries only (one row per entry), in one statement, and
    updates the run's row once, without reading it: the cost of a round, not of the run so far."""
    run = asyncio.run(captured_run())
    journal = SQLiteJournal(tmp_path / "one.db")
    statements: list[str] = []
    journal._conn.inner._db.set_trace_callback(statements.append)  # type: ignore[attr-defined]  # SQLite's own connection
    ends = [i for i, e in enumerate(run.entries) if isinstance(e, Checkpointed)]
    journal.record_all(run.entries[: ends[1] + 1])
    for start, end in itertools.pairwise(ends[1:]):
        statements.clear()
        journal.record_all(run.entries[start + 1 : end + 1])
        inserts = [s for s in statements if s.startswith("INSERT INTO agentkit_entries")]
        assert len(inserts) == 1
        assert inserts[0].count("(") - 1 == 1  # the one entry this round added
        assert sum(s.startswith("UPDATE agentkit_runs SET") for s in statements) == 1
        # The journal wrote the round before, so the run's row is not read first.
        assert not [s for s in statements if s.startswith("SELECT")]
    asyncio.run(journal.close())


def test_a_runs_start_and_end_each_write_its_row_once_without_reading_it(tmp_path: Path) -> None:
    """The first write of a run (its start with its first round's state) inserts the run's row with the state's
    header and appends the entries, reading nothing and updating nothing; the end is one update of the row (its
    ending, progress and release) and the last entries: a run's row is written once at each end."""
    run = asyncio.run(captured_run())
    journal = SQLiteJournal(tmp_path / "ends.db")
    statements: list[str] = []
    journal._conn.inner._db.set_trace_callback(statements.append)  # type: ignore[attr-defined]  # SQLite's own connection
    ends = [i for i, e in enumerate(run.entries) if isinstance(e, Checkpointed)]

    def written(entries: Sequence[Event | Checkpointed]) -> list[str]:
        statements.clear()
        journal.record_all(entries)
        kept = [s for s in statements if s not in ("BEGIN IMMEDIATE", "COMMIT") and not s.startswith("PRAGMA")]
        return [s.split(" (")[0].split(" SET")[0] for s in kept]

    assert written(run.entries[: ends[1] + 1]) == [
        "INSERT INTO agentkit_runs",
        "INSERT INTO agentkit_entries",
        "INSERT INTO agentkit_events",  # the run's start, in its log
    ]
    journal.record_all(run.entries[ends[1] + 1 : ends[-1] + 1])
    assert written(run.entries[ends[-1] + 1 :]) == [
        "UPDATE agentkit_runs",
        "INSERT INTO agentkit_entries",
        "INSERT INTO agentkit_events",  # the run's end, in its log
    ]
    record = asyncio.run(journal.run(run.entries[0].run_id))
    state = asyncio.run(journal.state(record.id))
    final = next(e for e in run.entries if isinstance(e, RunFinished)).result
    assert isinstance(final, ToolLoopResult)
    assert (record.state, record.claimed_by, record.checkpoint_round) == (RunState.FINISHED, None, 4)
    assert state == final.checkpoint
    asyncio.run(journal.close())


def logged(journal: Journal, run_id: str) -> list[str]:
    """The kinds in the run's event log, in order."""
    with journal._tx(write=False) as db:
        return [r["kind"] for r in db.query("SELECT kind FROM agentkit_events WHERE run_id = ? ORDER BY id", (run_id,))]


async def test_a_rounds_events_are_logged_only_until_a_state_written_with_them_holds_the_round(
    journal: Journal,
) -> None:
    """The events of a round that a state written in the same transaction holds are not logged again: the
    state's entry is the round's record. A round in flight (its events written, its state not yet) is in
    the log, and the run's rounds and usage include it until its state holds it."""
    run = (await captured_run()).entries
    run_id = run[0].run_id
    ends = [i for i, e in enumerate(run) if isinstance(e, Checkpointed)]  # before round 1, after rounds 1 to 3
    journal.record_all(run[: ends[1] + 1])
    assert logged(journal, run_id) == ["run_start"]
    in_flight = run[ends[1] + 1 : ends[2]]  # round 2's events; its state comes later
    journal.record_all(in_flight)
    assert logged(journal, run_id) == ["run_start", *(e.kind for e in in_flight)]
    rounds = await journal.rounds(run_id)
    assert [(r.round, r.tool_name) for r in rounds] == [(1, "search"), (2, "search")]
    record = await journal.run(run_id)
    assert (record.state, record.rounds, record.usage.requests) == (RunState.UNFINISHED, 2, 2)
    journal.record_all([run[ends[2]]])
    assert [r.round for r in await journal.rounds(run_id)] == [1, 2]
    assert (await journal.run(run_id)).usage.requests == 2
    journal.record_all(run[ends[2] + 1 :])
    assert logged(journal, run_id) == ["run_start", *(e.kind for e in in_flight), "run_end"]
    final = await journal.run(run_id)
    assert (final.state, final.rounds, [r.round for r in await journal.rounds(run_id)]) == (
        RunState.FINISHED,
        4,
        [1, 2, 3, 4],
    )


async def test_a_run_recorded_with_a_whole_checkpoint_refuses_its_rounds_but_lists_from_its_events(
    journal: Journal,
) -> None:
    """A run whose row holds an earlier agentkit's whole checkpoint (journal schema 4) and no state: asking
    for its rounds is refused, naming why; the run itself still reads, its rounds counted from its events."""
    run = [e for e in (await captured_run()).entries if not isinstance(e, Checkpointed)]
    run_id = run[0].run_id
    in_flight = [e for e in run if e.kind != "run_end"]
    journal.record_all(in_flight)
    with journal._tx(write=True) as db:
        db.execute("UPDATE agentkit_runs SET checkpoint = ? WHERE id = ?", ('{"version": 1}', run_id))
    with pytest.raises(ResumeRefused, match="earlier agentkit"):
        await journal.rounds(run_id)
    record = await journal.run(run_id)
    assert (record.state, record.rounds, record.unreadable) == (RunState.UNFINISHED, 4, None)


async def test_a_write_checks_the_runs_row_though_this_journal_wrote_its_last_round(tmp_path: Path) -> None:
    """A journal that wrote a run's last round does not read the run's row before writing the next, but the
    write applies only while the row still says what it wrote: a round another process wrote meanwhile is
    not written twice, and a row that no longer matches is refused, nothing written."""
    run = (await captured_run()).entries
    run_id = run[0].run_id
    ends = [i for i, e in enumerate(run) if isinstance(e, Checkpointed)]
    path = tmp_path / "journal.db"
    mine, other = SQLiteJournal(path), SQLiteJournal(path)
    try:
        mine.record_all(run[: ends[1] + 1])
        other.record_all(run[ends[1] + 1 : ends[2] + 1])  # round 2, written elsewhere
        mine.record_all(run[ends[1] + 1 : ends[2] + 1])  # and again here: the row already holds it
        state = await mine.state(run_id)
        assert len(state.entries) == len(run[ends[2]].checkpoint.entries)  # type: ignore[union-attr]  # a Checkpointed
        with sqlite3.connect(path) as db:
            db.execute("UPDATE agentkit_runs SET state_digest = 'edited' WHERE id = ?", (run_id,))
        with pytest.raises(JournalError, match="does not continue"):
            mine.record_all([run[ends[3]]])
        with sqlite3.connect(path) as db:
            (entries,) = db.execute("SELECT COUNT(*) FROM agentkit_entries WHERE run_id = ?", (run_id,)).fetchone()
        assert entries == len(state.entries)
        assert logged(mine, run_id) == ["run_start"]
    finally:
        await mine.close()
        await other.close()


async def test_a_runs_end_checks_the_runs_row_though_this_journal_wrote_its_last_round(tmp_path: Path) -> None:
    """The run's end writes its final state as a round does: without reading the run's row first when this
    journal wrote the last round, but only while the row still says so. An end another process wrote
    meanwhile is not written twice, and a row that no longer matches is refused, nothing written."""
    run = (await captured_run()).entries
    run_id = run[0].run_id
    last = max(i for i, e in enumerate(run) if isinstance(e, Checkpointed))
    end = run[last + 1 :]
    assert [e.kind for e in end if isinstance(e, RunFinished)] == ["run_end"]
    final = next(e for e in end if isinstance(e, RunFinished)).result
    assert isinstance(final, ToolLoopResult)
    path = tmp_path / "journal.db"
    mine, other = SQLiteJournal(path), SQLiteJournal(path)
    try:
        mine.record_all(run[: last + 1])
        other.record_all(end)  # the end, written elsewhere
        mine.record_all(end)  # and again here: the row already holds it
        assert len((await mine.state(run_id)).entries) == len(final.checkpoint.entries)
        assert (await mine.run(run_id)).state is RunState.FINISHED
    finally:
        await mine.close()
        await other.close()
    path = tmp_path / "edited.db"
    journal = SQLiteJournal(path)
    try:
        journal.record_all(run[: last + 1])
        stored = len((await journal.state(run_id)).entries)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE agentkit_runs SET state_digest = 'edited' WHERE id = ?", (run_id,))
        with pytest.raises(JournalError, match="does not continue"):
            journal.record_all(end)
        with sqlite3.connect(path) as db:
            (entries,) = db.execute("SELECT COUNT(*) FROM agentkit_entries WHERE run_id = ?", (run_id,)).fetchone()
        assert entries == stored < len(final.checkpoint.entries)
        assert (await journal.run(run_id)).state is RunState.UNFINISHED
    finally:
        await journal.close()


def test_sync_records_writes_from_the_writer_thread(tmp_path: Path) -> None:
    """``sync_records=True`` commits wait for the disk: never on the run's thread."""
    assert SQLiteJournal(tmp_path / "a.db").records_at_once is True
    assert SQLiteJournal(tmp_path / "b.db", sync_records=True).records_at_once is False


def test_rows_are_inserted_within_sqlite_s_oldest_parameter_limit(tmp_path: Path) -> None:
    """``insert_rows`` keeps each statement within 999 parameters (SQLite before 3.32)."""
    db = sqlite3.connect(tmp_path / "rows.db", isolation_level=None)
    db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    columns = [f"c{n}" for n in range(18)]
    db.execute(f"CREATE TABLE wide ({', '.join(columns)})")
    rows = [tuple(r * 100 + c for c in range(18)) for r in range(200)]

    class Plain:
        def execute(self, sql: str, params: Sequence[object] = ()) -> int:
            return db.execute(sql, params).rowcount

    insert_rows(Plain(), f"INSERT INTO wide ({', '.join(columns)}) VALUES", rows)  # type: ignore[arg-type]  # only execute is used
    assert db.execute("SELECT * FROM wide ORDER BY rowid").fetchall() == rows


class CountingCondition(threading.Condition):
    """A condition that counts its `notify_all` calls: each one wakes the observer's writer thread."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def notify_all(self) -> None:
        self.wakes += 1
        super().notify_all()


async def test_rounds_written_at_once_never_wake_the_writer_thread(tmp_path: Path) -> None:
    """SQLite, lock free: each round's hook writes its record itself, and wakes the writer thread neither when
    its first event is queued nor when its record is written (a switch of threads a round, for nothing)."""

    @tool(tier=Tier.READ_ONLY)
    def slow(args: Query) -> list[Doc]:
        """Search slowly: the writer thread has time to run, as it has while a round waits for its model."""
        time.sleep(0.001)
        return [Doc(id=args.query, score=1.0, tags={})]

    journal = SQLiteJournal(tmp_path / "journal.db")
    steps = [call_step(Query(query=f"q{n}"), tool="slow", rationale="look") for n in range(150)]
    try:
        # Rounds come far faster than linger, which the writer thread still waits at most for a next round's events.
        with JournalObserver(journal, linger=0.1) as observer:
            counting = CountingCondition()
            observer._cond = counting  # pyright: ignore[reportPrivateUsage]  # every wake of the writer goes through it
            result = await run_tool_loop_tiered(
                ScriptedCaller([*steps, done_step("enough")]),
                Planner(),
                [slow],
                None,
                LoopConfig(max_rounds=151),
                observer=observer,
            )
            assert counting.wakes <= 1  # at most for the run's start, which may find the writer asleep
            assert observer.failures == 0
        assert (await journal.run(result.run_id)).checkpoint_round == 151
    finally:
        await journal.close()


def written(path: Path) -> list[str]:
    """The kinds of the events a SQLite journal holds, in order, read over a connection of its own."""
    with sqlite3.connect(path) as other:
        return [kind for (kind,) in other.execute("SELECT kind FROM agentkit_events ORDER BY id")]


async def test_an_event_after_a_round_written_at_once_still_waits_at_most_linger(tmp_path: Path) -> None:
    """After a round's record was written at once, the writer thread is not woken for the next event, yet
    writes it once it waited ``linger``."""
    entries = (await captured_run()).entries
    ends = [i for i, e in enumerate(entries) if isinstance(e, Checkpointed)]
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        with JournalObserver(journal, linger=0.1) as observer:
            queue(observer, entries[: ends[1] + 1])  # round 1's end: written at once
            queue(observer, [entries[ends[1] + 1]])  # round 2's start, nothing due after it
            deadline = time.monotonic() + 30
            while written(tmp_path / "journal.db")[-1:] != ["round_start"]:
                assert time.monotonic() < deadline, "round 2's start was never written"
                await asyncio.sleep(0.01)
    finally:
        await journal.close()


_ENTRY = st.sampled_from(["ran", "ran-unkept", "retried", "proposed", "decided", "proposal-end", "done-end"])


def _state_of(run_id: str, kinds: Sequence[str]) -> list[RunCheckpoint]:
    """A run's states, one a step: each entry that `kinds` names appended in turn (rounds counting up)."""
    state = RunCheckpoint.start(run_id, LoopConfig(), [ToolEntry(name="search", tier=Tier.READ_ONLY, args="s")])
    states, round, proposed = [state], 0, None
    for kind in kinds:
        entry: RoundEntry | DecisionEntry | EndEntry
        if kind in ("ran", "ran-unkept", "retried", "proposed"):
            round += 1
            outcome = {"proposed": RoundOutcome.PROPOSED, "retried": RoundOutcome.RETRIED}.get(kind, RoundOutcome.RAN)
            batch = "[]" if kind == "ran" else None
            digest = f"call-{round}" if kind == "proposed" else None
            tier = Tier.IRREVERSIBLE if kind == "proposed" else Tier.READ_ONLY
            entry = RoundEntry(round=round, outcome=outcome, tool="search", tier=tier, args="{}", batch=batch)
            entry = entry.model_copy(update={"call_digest": digest})
            proposed = digest or proposed
        elif kind == "decided":
            if proposed is None:
                continue
            entry = DecisionEntry(round=round, call_digest=proposed, approved=True, by="ops", batch="[]")
            proposed = None
        else:
            reason = StopReason.PROPOSED if kind == "proposal-end" else StopReason.EXECUTOR_DONE
            entry = EndEntry(stop_reason=reason, outcome=Outcome.APPLIED)
        state = state.appended(entry)
        states.append(state)
    return states


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(_ENTRY, max_size=12), steps=st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_a_runs_row_says_its_round_and_resumability_as_its_whole_state_does(
    journal: Journal, kinds: list[str], steps: list[int]
) -> None:
    """However a run's states are written (a few entries a write, or many), its row's round and whether it
    can be resumed are what the whole state says, though each write reads only its new entries."""
    run_id = uuid.uuid4().hex
    states = _state_of(run_id, kinds)
    journal.record_all([RunStarted(run_id=run_id, agent="a", model="m", tools=("search",), max_rounds=30)])
    at = 0
    for step in itertools.cycle(steps):
        at = min(at + step, len(states) - 1)
        state = states[at]
        journal.record_all([Checkpointed(run_id, state)])
        run = asyncio.run(journal.run(run_id))
        assert (run.checkpoint_round, run.resumable) == (state.rounds, not state.finished and state.resumable)
        if at == len(states) - 1:
            break
