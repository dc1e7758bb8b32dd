"""JournalObserver: every run, round and proposal is in the journal as the run happens, on both backends.

The observer writes from its own thread; these tests also pin that a busy database never stalls
the event loop, and that a run's record is complete when the run returns.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Outcome,
    StopReason,
    Tier,
    UsageError,
    run_tool_loop_tiered,
    tool,
)
from agentkit._observe import Observer, dispatch
from agentkit._results import Usage
from agentkit._structured import RetryPolicy
from agentkit.events import Event, RunAborted, RunFinished
from agentkit.journal import (
    Journal,
    JournalError,
    JournalObserver,
    ProposalState,
    RunState,
    SQLiteJournal,
    open_journal,
)
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import Executor, Query, Recorder, Target


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    return [f"{args.query}-1", f"{args.query}-2"]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path."""
    raise AssertionError("an irreversible tool never runs in the loop")


class Planner(Executor[str]):
    """An executor that renders nothing interesting."""

    def __init__(self) -> None:
        super().__init__("planner-model", system="plan")


CONTINUE = LoopConfig(after_proposal=AfterProposal.CONTINUE)


def tokens(step: dict[str, Any], input_tokens: int, output_tokens: int) -> ScriptedReply:
    return ScriptedReply(value=step, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens))


def script() -> ScriptedCaller:
    """Search, propose a deletion, then stop: three rounds, one proposal, 60 tokens."""
    return ScriptedCaller(
        [
            tokens(call_step(Query(query="logs"), tool="search", rationale="look first"), 10, 5),
            tokens(call_step(Target(path="/var/old"), tool="delete", rationale="it is stale"), 12, 8),
            tokens(done_step("enough"), 20, 5),
        ]
    )


DETAILED = Usage(
    requests=1,
    input_tokens=1000,
    output_tokens=100,
    cached_input_tokens=800,
    cache_write_tokens=100,
    reasoning_tokens=40,
)


def detailed_script() -> ScriptedCaller:
    """A search, then done: each reply with cached, cache-written and reasoning tokens."""
    return ScriptedCaller(
        [
            ScriptedReply(value=call_step(Query(query="logs"), tool="search"), usage=DETAILED),
            ScriptedReply(value=done_step("enough"), usage=DETAILED),
        ]
    )


async def test_a_finished_runs_record_keeps_its_usage_details(journal: Journal, observer: JournalObserver) -> None:
    """`journal.run(id).usage` of a finished run has the cached, cache-written and reasoning tokens, not only totals."""
    result = await run_tool_loop_tiered(detailed_script(), Planner(), [search, delete], None, observer=observer)
    run = await journal.run(result.run_id)
    assert run.state is RunState.FINISHED
    assert run.usage == result.usage == DETAILED + DETAILED
    assert [r.usage for r in await journal.runs()] == [DETAILED + DETAILED]


async def test_a_run_end_recorded_on_its_own_keeps_its_usage_details(journal: Journal) -> None:
    """A run's end written without its start (the row made by the end) keeps the usage details too."""
    seen = Recorder()
    result = await run_tool_loop_tiered(detailed_script(), Planner(), [search, delete], None, observer=seen)
    [end] = [event for event in seen.events if isinstance(event, RunFinished)]
    journal.record(end)
    assert (await journal.run(result.run_id)).usage == result.usage == DETAILED + DETAILED


@pytest.fixture
def observer(journal: Journal) -> Iterator[JournalObserver]:
    """A JournalObserver on the test's journal, its writer thread stopped afterwards."""
    with JournalObserver(journal) as opened:
        yield opened


async def test_a_run_is_recorded_with_its_outcome_usage_and_config(journal: Journal, observer: JournalObserver) -> None:
    """The run row carries agent, model, tools, ceiling, outcome, stop reason, rounds and summed usage."""
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)
    run = await journal.run(result.run_id)
    assert run.state is RunState.FINISHED
    assert (run.agent, run.model) == ("Planner", "planner-model")
    assert run.config == {"tools": ["search", "delete"], "max_rounds": 4}
    assert (run.outcome, run.stop_reason, run.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 3)
    assert run.usage == result.usage == Usage(requests=3, input_tokens=42, output_tokens=18)
    assert run.started_at is not None
    assert run.ended_at is not None
    assert run.started_at <= run.ended_at
    assert [r.id for r in await journal.runs()] == [result.run_id]


async def test_the_run_records_its_whole_loop_config(journal: Journal, observer: JournalObserver) -> None:
    """Autonomy, budgets, deadline, tool timeout, after-proposal and retry policy are on the run record."""
    config = LoopConfig(
        autonomy=Tier.READ_ONLY,
        max_rounds=6,
        token_budget=5000,
        deadline=30.0,
        tool_timeout=2.5,
        after_proposal=AfterProposal.CONTINUE,
        retry=RetryPolicy(primary_attempts=3, fallback_attempts=0),
    )
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, config, observer=observer)
    recorded = (await journal.run(result.run_id)).loop_config
    assert recorded is not None
    assert recorded == recorded | {
        "autonomy": "READ_ONLY",
        "max_rounds": 6,
        "token_budget": 5000,
        "deadline": 30.0,
        "tool_timeout": 2.5,
        "after_proposal": "continue",
        "retry": {"primary_attempts": 3, "fallback_attempts": 0, "wait_initial": 0.2, "wait_max": 2.0},
    }


async def test_every_round_is_recorded_as_the_trace_says(journal: Journal, observer: JournalObserver) -> None:
    """Each round keeps its step, call, tier, batch size, timings and usage."""
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)
    rounds = await journal.rounds(result.run_id)
    assert [r.round for r in rounds] == [1, 2, 3]
    first, second, third = rounds
    assert (first.tool_name, first.tier, first.args_json) == ("search", Tier.READ_ONLY, '{"query":"logs"}')
    assert (first.executed, first.batch_size, first.rationale) == (True, 2, "look first")
    assert (second.tool_name, second.tier, second.proposed, second.executed) == (
        "delete",
        Tier.IRREVERSIBLE,
        True,
        False,
    )
    assert third.done
    assert [r.usage for r in rounds] == [rec.usage for rec in result.trace]
    assert [r.llm_seconds for r in rounds] == [rec.llm_seconds for rec in result.trace]
    assert all(r.from_trace for r in rounds)


async def test_a_proposal_lands_in_the_inbox_pending(journal: Journal, observer: JournalObserver) -> None:
    """The run's proposal is pending, with the run's id, its round and the same digest as the result's."""
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)
    [pending] = await journal.pending()
    [proposed] = result.proposed
    assert (pending.run_id, pending.round, pending.digest) == (result.run_id, 2, proposed.digest)
    assert (pending.tool_name, pending.rationale) == ("delete", "it is stale")
    # The caller storing the result's proposal again gets the same inbox entry.
    assert (await journal.propose(proposed)).id == pending.id


class Peek(Observer):
    """Reads the journal through a second connection when round 3 starts, once the observer flushed."""

    def __init__(self, url: str, journaled: JournalObserver) -> None:
        self.url = url
        self.journaled = journaled
        self.seen: list[tuple[int, bool, bool]] = []
        self.pending: list[str] = []

    def on_round_start(self, event: Any) -> None:
        if event.info.round != 3:
            return
        assert self.journaled.flush(timeout=30)
        other = open_journal(self.url, create=False)
        self.seen = [(r.round, r.executed, r.proposed) for r in other._rounds(event.run_id)]
        self.pending = [p.state.value for p in other._proposals()]
        other._close()


async def test_rounds_are_in_the_journal_while_the_run_is_still_going(
    journal_url: str, observer: JournalObserver
) -> None:
    """Another process reading mid-run (after a flush) sees the rounds done so far and the pending proposal."""
    peek = Peek(journal_url, observer)
    await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=[observer, peek])
    assert peek.seen[:2] == [(1, True, False), (2, False, True)]
    assert peek.pending == [ProposalState.PENDING.value]


class Capture(Observer):
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


async def test_rounds_of_a_run_without_an_end_are_rebuilt_from_its_events(journal: Journal) -> None:
    """When the end was never written, the event log still gives every round that happened."""
    capture = Capture()
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=capture)
    for event in capture.events[:-1]:  # everything but the run's end, as if the process died there
        journal.record(event)
    run = await journal.run(result.run_id)
    assert (run.state, run.outcome, run.rounds) == (RunState.UNFINISHED, None, 3)
    assert run.usage == result.usage
    rebuilt = await journal.rounds(result.run_id)
    assert not any(r.from_trace for r in rebuilt)

    def key(r: Any) -> tuple[object, ...]:
        return (r.round, r.tool_name, r.tier, r.executed, r.proposed, r.batch_size, r.usage)

    traced = [(t.round, t.tool_name, t.tier, t.executed, t.proposed, t.batch_size, t.usage) for t in result.trace]
    assert [key(r) for r in rebuilt] == traced


async def test_a_repeated_call_is_recorded_as_the_round_that_ended_the_run(
    journal: Journal, observer: JournalObserver
) -> None:
    """A stalemate run marks its last round as a repeat."""
    caller = ScriptedCaller([call_step(Query(query="x"), tool="search")] * 2)
    result = await run_tool_loop_tiered(caller, Planner(), [search, delete], None, observer=observer)
    assert result.outcome is Outcome.STALEMATE
    rounds = await journal.rounds(result.run_id)
    assert [r.repeated for r in rounds] == [False, True]
    assert (await journal.run(result.run_id)).stop_reason is StopReason.DEGENERATION


async def test_an_aborted_run_is_recorded_as_aborted(journal: Journal, observer: JournalObserver) -> None:
    """A run that was cancelled ends ABORTED with the error, no outcome, and the rounds it got through."""
    capture = Capture()
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=capture)
    for event in capture.events[:-1]:
        dispatch((observer,), event)
    # A run awaits its observers' settle after the abort hook: then the record is complete.
    dispatch((observer,), RunAborted(run_id=result.run_id, error=asyncio.CancelledError("shutting down")))
    await observer.settle(result.run_id)
    run = await journal.run(result.run_id)
    assert (run.state, run.outcome, run.stop_reason) == (RunState.ABORTED, None, None)
    assert run.error == "aborted: CancelledError: shutting down"
    assert run.ended_at is not None
    assert [r.round for r in await journal.rounds(run.id)] == [1, 2, 3]
    assert observer.failures == 0


async def test_a_failing_journal_never_changes_the_run(journal: Journal, caplog: pytest.LogCaptureFixture) -> None:
    """With every write failing, the result equals an unobserved run's; failures are logged and counted."""
    plain = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE)
    await journal.close()
    with caplog.at_level(logging.WARNING, logger="agentkit.journal"), JournalObserver(journal) as observer:
        observed = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)

    def essence(r: Any) -> tuple[object, ...]:
        return (r.outcome, r.stop_reason, r.items, r.rounds, r.usage, [p.digest for p in r.proposed])

    assert essence(observed) == essence(plain)
    assert observer.failures > 0
    assert observer.failures == len([r for r in caplog.records if r.name == "agentkit.journal"])
    assert "closed" in str(observer.last_error)


# -- a busy database ------------------------------------------------------------------------------


class WriteLock:
    """Another connection holding the journal's write lock, as a command-line approve or a worker's claim does."""

    def __init__(self, url: str) -> None:
        self._guard = threading.Lock()
        self.released_by: str | None = None
        self._sqlite: sqlite3.Connection | None = None
        self._postgres: Any = None
        if url.startswith("postgresql"):
            import psycopg

            self._postgres = psycopg.connect(url)
            # Every event is appended to this table, so every write of the observer waits.
            self._postgres.execute("LOCK TABLE agentkit_events IN EXCLUSIVE MODE")
        else:
            self._sqlite = sqlite3.connect(url, isolation_level=None, check_same_thread=False)
            self._sqlite.execute("BEGIN IMMEDIATE")

    @property
    def held(self) -> bool:
        return self.released_by is None

    def release(self, by: str) -> None:
        with self._guard:
            if self.released_by is not None:
                return
            if self._sqlite is not None:
                self._sqlite.execute("ROLLBACK")
                self._sqlite.close()
            else:
                self._postgres.rollback()
                self._postgres.close()
            self.released_by = by


class LockWatch(Observer):
    """Notes, for each event, whether the other connection still held the lock when the event reached it."""

    def __init__(self, lock: WriteLock) -> None:
        self.lock = lock
        self.seen: list[tuple[str, bool]] = []

    def on_event(self, event: Event) -> None:
        self.seen.append((event.kind, self.lock.held))


async def test_a_busy_database_never_stalls_the_event_loop(journal: Journal, journal_url: str) -> None:
    """While another connection holds the write lock the run and other tasks go on; every record lands by the end."""
    lock = WriteLock(journal_url)
    # Only a stalled loop lets this fire: then the lock goes when the timer says, not when the heartbeat does.
    safety = threading.Timer(5.0, lock.release, args=("timer",))
    safety.start()
    beats = 0
    beaten = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            beats += 1
            if beats == 50:
                lock.release("heartbeat")
                beaten.set()
            await asyncio.sleep(0)

    @tool(tier=Tier.READ_ONLY, name="search")
    async def waiting_search(args: Query) -> list[str]:
        """Find documents once the heartbeat made the other connection let go."""
        await beaten.wait()
        return [f"{args.query}-1"]

    watch = LockWatch(lock)
    beating = asyncio.create_task(heartbeat())
    try:
        with JournalObserver(journal) as observer:
            result = await run_tool_loop_tiered(
                script(), Planner(), [waiting_search, delete], None, CONTINUE, observer=[observer, watch]
            )
    finally:
        beating.cancel()
        safety.cancel()
        lock.release("test end")
    # Every hook up to the tool returned while the lock was held: none waited for the database.
    assert [kind for kind, held in watch.seen if held] == ["run_start", "round_start", "llm_call", "tool_call"]
    assert lock.released_by == "heartbeat"
    run = await journal.run(result.run_id)
    assert (run.state, run.rounds, run.usage) == (RunState.FINISHED, 3, result.usage)
    assert [r.round for r in await journal.rounds(run.id)] == [1, 2, 3]
    assert [p.state for p in await journal.pending()] == [ProposalState.PENDING]
    assert observer.failures == 0


class EndWatch(Observer):
    """Notes the moment the run's end reaches the observers."""

    def __init__(self) -> None:
        self.ended = False

    def on_run_end(self, event: RunFinished) -> None:
        self.ended = True


async def test_the_end_of_run_wait_for_a_busy_database_leaves_the_event_loop_free(
    journal: Journal, journal_url: str
) -> None:
    """While the run waits for its record at its end, other tasks run: here, the very task that frees the database.

    The other connection holds the write lock until a ticker task has ticked ten times after the
    run's end was delivered. A hook that blocked the event loop would keep the ticker from ticking:
    the lock would stay until the flush gave up, and the run would return with its record incomplete.
    """
    lock = WriteLock(journal_url)
    watch = EndWatch()
    ticks_after_end = 0

    async def ticker() -> None:
        nonlocal ticks_after_end
        while ticks_after_end < 10:
            if watch.ended:
                ticks_after_end += 1
            await asyncio.sleep(0)
        lock.release("ticker")

    ticking = asyncio.create_task(ticker())
    try:
        with JournalObserver(journal, flush_timeout=20) as observer:
            result = await run_tool_loop_tiered(
                script(), Planner(), [search, delete], None, CONTINUE, observer=[watch, observer]
            )
            run = await journal.run(result.run_id)
    finally:
        ticking.cancel()
        lock.release("test end")
    assert (ticks_after_end, lock.released_by) == (10, "ticker")
    # The run returned only once its record was complete.
    assert (run.state, run.rounds, run.usage) == (RunState.FINISHED, 3, result.usage)
    assert observer.failures == 0


async def test_a_full_queue_drops_events_without_changing_the_run(
    journal: Journal, journal_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the database locked and room for one event, the rest are dropped and counted; the run is unchanged."""
    plain = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE)
    lock = WriteLock(journal_url)
    try:
        with caplog.at_level(logging.WARNING, logger="agentkit.journal"):
            observer = JournalObserver(journal, capacity=1, flush_timeout=0)
            observed = await run_tool_loop_tiered(
                script(), Planner(), [search, delete], None, CONTINUE, observer=observer
            )
    finally:
        lock.release("test")
    assert observer.flush(timeout=30)
    observer.close()
    assert (observed.outcome, observed.items, observed.usage) == (plain.outcome, plain.items, plain.usage)
    # The writer took at most one event before it met the lock, one more waited in the queue; the rest were dropped.
    with journal._tx(write=False) as db:
        written = db.query("SELECT COUNT(*) AS n FROM agentkit_events WHERE run_id = ?", (observed.run_id,))[0]["n"]
    # run_start, 3 x (round_start, llm_call), tool_call, tool_result, proposal, run_end; and the checkpoints
    # before round 1 and after rounds 1 and 2, which queue beside them.
    queued = 11 + 3
    assert 1 <= written <= 2
    assert queued - 2 <= observer.failures <= queued - written
    assert isinstance(observer.last_error, JournalError)
    assert "raise capacity" in str(observer.last_error)
    assert any("record is not complete" in r.getMessage() for r in caplog.records)
    assert [run.id for run in await journal.runs()] == [observed.run_id]


async def test_a_closed_observer_counts_events_as_failures(journal: Journal, observer: JournalObserver) -> None:
    """After close() the writer thread is gone: an event is counted as a failure, not silently lost."""
    assert observer.close(timeout=30)
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)
    assert observer.failures == 11 + 3  # the events, and the checkpoints before round 1 and after rounds 1 and 2
    assert "observer is closed" in str(observer.last_error)
    assert await journal.runs() == []
    assert result.outcome is Outcome.APPLIED


def test_observer_options_are_checked(journal: Journal) -> None:
    """A queue without room or a negative flush wait is a wiring mistake, refused at construction."""
    with pytest.raises(UsageError, match="capacity"):
        JournalObserver(journal, capacity=0)
    with pytest.raises(UsageError, match="flush_timeout"):
        JournalObserver(journal, flush_timeout=-1.0)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


async def test_an_error_whose_str_raises_is_still_recorded(journal: Journal, observer: JournalObserver) -> None:
    """An abort whose exception cannot be turned into text is recorded, described by its type."""
    capture = Capture()
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=capture)
    for event in capture.events[:-1]:
        dispatch((observer,), event)
    dispatch((observer,), RunAborted(run_id=result.run_id, error=Unprintable()))
    await observer.settle(result.run_id)
    assert observer.failures == 0, observer.last_error
    run = await journal.run(result.run_id)
    assert run.state is RunState.ABORTED
    assert run.error == "aborted: Unprintable: <str() of the Unprintable raised RuntimeError>"


class Look(BaseModel):
    round: int


def stored_checkpoint_round(path: str) -> int | None:
    """The checkpoint round stored for the journal's one run, read over a connection of its own."""
    with sqlite3.connect(path) as other:
        row = other.execute("SELECT checkpoint_round FROM agentkit_runs").fetchone()
    return None if row is None else row[0]


async def test_a_rounds_checkpoint_is_committed_before_the_next_round_begins(tmp_path: Path) -> None:
    """SQLite, lock free: the hook that ends a round writes its record at once, so a crash after it loses nothing."""
    path = str(tmp_path / "journal.db")
    seen: list[int | None] = []

    @tool(tier=Tier.READ_ONLY)
    def peek(args: Look) -> list[str]:
        """Read what the journal holds of this run so far."""
        seen.append(stored_checkpoint_round(path))
        return [f"round {args.round}"]

    steps = [call_step(Look(round=n), tool="peek", rationale="look") for n in (1, 2, 3)]
    journal = SQLiteJournal(path)
    try:
        with JournalObserver(journal, linger=3600) as observer:
            result = await run_tool_loop_tiered(
                ScriptedCaller([*steps, done_step("ok")]), Planner(), [peek], None, observer=observer
            )
    finally:
        await journal.close()
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    # Round 1's tool ran before any round ended; rounds 2 and 3 saw the previous round's checkpoint committed.
    assert seen == [None, 1, 2]


async def test_a_locked_journal_does_not_hold_up_the_run_and_its_record_follows_in_order(tmp_path: Path) -> None:
    """SQLite, lock held by another connection: the hooks hand their batches to the writer thread and the run
    goes on; once the lock is released, the record is written whole and in order."""
    path = str(tmp_path / "journal.db")
    journal = SQLiteJournal(path)
    lock = WriteLock(path)
    try:
        observer = JournalObserver(journal, flush_timeout=0)
        result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)
        assert lock.held  # the run ended while the lock was still held: nothing waited for it
        lock.release("test")
        assert observer.flush(timeout=30)
        observer.close()
        assert observer.failures == 0
        with sqlite3.connect(path) as other:
            logged = other.execute(
                "SELECT kind, round FROM agentkit_events WHERE run_id = ? ORDER BY id", (result.run_id,)
            ).fetchall()
        kinds = [kind for kind, _ in logged]
        # The log holds the start, the proposal and the end, in order, and the events of any round whose batch
        # held no state that holds it (how the writer split the queue decides which): the rounds are the state's.
        assert [k for k in kinds if k in ("run_start", "proposal", "run_end")] == ["run_start", "proposal", "run_end"]
        assert (kinds[0], kinds[-1]) == ("run_start", "run_end")
        rounds = [round for _, round in logged if round is not None]
        assert rounds == sorted(rounds)
        [run] = await journal.runs()
        assert run.checkpoint_round == result.rounds
        recorded = await journal.rounds(result.run_id)
        assert [r.round for r in recorded] == list(range(1, result.rounds + 1))
        assert [r.tool_name for r in recorded] == [r.tool_name for r in result.trace]
    finally:
        lock.release("test")
        await journal.close()
