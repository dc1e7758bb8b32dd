"""SQLiteJournal's own promises: how it opens a file, and WAL readers that never wait.

The contract both backends share is in ``test_contract.py``; these cases are about the
SQLite file itself: its path, concurrent first opens, and reads while the write lock is taken.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentkit import ProposedAction, Tier, UsageError
from agentkit.events import RunStarted
from agentkit.journal import ProposalState, SQLiteJournal, open_journal
from agentkit.journal import _sqlite as sqlite_backend
from tests.support import Wipe


def proposal(target: str) -> ProposedAction[Wipe]:
    return ProposedAction[Wipe].create(
        tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Wipe(target=target), round=1, run_id="run-1"
    )


class WriteLock:
    """Another connection holding the file's write lock until released (from any thread)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("BEGIN IMMEDIATE")
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self._db.execute("ROLLBACK")
            self._db.close()


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that waits for the lock gives up after 2 s, so a wait that should not happen fails fast."""
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_S", 2.0)


def wait_until(held: Callable[[], bool]) -> None:
    """Poll until ``held()`` (a state another thread reaches at once; no timing is asserted)."""
    while not held():
        time.sleep(0.001)


# -- the path -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["", "   "])
def test_an_empty_path_is_refused(path: str) -> None:
    """An empty path would open SQLite's temporary database and lose every record: refused, naming the fix."""
    with pytest.raises(UsageError, match="path is empty"):
        open_journal(path)
    with pytest.raises(UsageError, match="path is empty"):
        SQLiteJournal(path)


def test_memory_is_refused_unless_asked_for() -> None:
    """``:memory:`` loses every record on close: it opens only with ``in_memory=True``."""
    with pytest.raises(UsageError, match="in_memory=True"):
        open_journal(":memory:")
    with pytest.raises(UsageError, match="in_memory=True"):
        SQLiteJournal(":memory:")
    with pytest.raises(UsageError, match="one or the other"):
        SQLiteJournal("journal.db", in_memory=True)
    with pytest.raises(UsageError, match="PostgreSQL"):
        open_journal("postgresql://localhost/x", in_memory=True)


async def test_a_journal_in_memory_works_when_asked_for() -> None:
    """``in_memory=True`` gives a working journal (reads and writes share its one database)."""
    journal = open_journal(":memory:", in_memory=True)
    record = await journal.propose(proposal("a"))
    assert [p.id for p in await journal.pending()] == [record.id]
    await journal.close()


# -- opening while others open or write ------------------------------------------------------------


def test_the_switch_to_wal_waits_for_another_opener(tmp_path: Path) -> None:
    """Switching a fresh file to WAL while another connection writes to it waits for it, instead of failing at once.

    SQLite answers that switch with "database is locked" without calling the busy handler; twelve
    processes opening one fresh journal met it at random.
    """
    path = tmp_path / "fresh.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a write in the file's first (rollback) journal mode
    other.execute("CREATE TABLE notes (body TEXT)")

    def let_go() -> None:
        other.execute("COMMIT")
        other.close()

    release = threading.Timer(0.3, let_go)
    release.start()
    try:
        journal = SQLiteJournal(path)
    finally:
        release.join()
    assert journal.schema_version() >= 1
    (mode,) = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


async def test_a_read_never_waits_for_a_write_of_the_same_object(tmp_path: Path, short_busy_timeout: None) -> None:
    """While this journal's own writes wait for another connection's lock, its reads still answer at once."""
    path = tmp_path / "j.db"
    journal = SQLiteJournal(path)
    kept = await journal.propose(proposal("kept"))
    waiting = [(await journal.propose(proposal(f"w{n}"))).id for n in range(6)]
    lock = WriteLock(path)
    writing = threading.Thread(
        target=journal.record, args=(RunStarted(run_id="r", agent="A", model="m", tools=(), max_rounds=1),)
    )
    try:
        writing.start()
        wait_until(journal._lock.locked)  # the write is in, waiting for the other connection
        # More writes than the journal has threads wait behind it.
        approvals = [asyncio.create_task(journal.approve(id, "alice")) for id in waiting]
        await asyncio.sleep(0)
        # Before reads had their own connection (and threads), these queued behind the writes until the busy timeout.
        assert [p.id for p in await journal.pending()] == [kept.id, *waiting]
        assert (await journal.get(kept.id)).state is ProposalState.PENDING
        assert await journal.runs() == []
        assert writing.is_alive(), "the read answered only after the write gave up"
    finally:
        lock.release()
        writing.join()
    await asyncio.gather(*approvals)
    assert [r.id for r in await journal.runs()] == ["r"]
    assert await journal.pending() == [await journal.get(kept.id)]
    await journal.close()


async def test_opening_an_up_to_date_journal_takes_no_write_lock(tmp_path: Path, short_busy_timeout: None) -> None:
    """Opening a current journal (read-only from the command line, or from code) only reads it."""
    path = tmp_path / "j.db"
    first = SQLiteJournal(path)
    await first.propose(proposal("a"))
    await first.close()
    lock = WriteLock(path)
    try:
        for create in (False, True):
            journal = SQLiteJournal(path, create=create)
            assert [p.tool_name for p in await journal.pending()] == ["wipe"]
            await journal.close()
    finally:
        lock.release()


# -- writing at once --------------------------------------------------------------------------------


def test_writes_at_once_leave_the_wal_checkpoint_to_the_journal_s_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write at once runs on a run's (an event loop's) thread: SQLite's checkpoint of a full WAL, a copy into
    the file with a sync to disk, never runs there. The journal's own write thread checkpoints every few writes
    at once instead, so the WAL stays short; a plain write lets SQLite checkpoint as it commits again."""
    monkeypatch.setattr(sqlite_backend, "CHECKPOINT_EVERY", 4)
    path = tmp_path / "journal.db"
    journal = SQLiteJournal(path)
    statements: list[tuple[str, str]] = []
    raw: sqlite3.Connection = journal._sqlite._db  # pyright: ignore[reportPrivateUsage]  # the writer's own connection
    raw.set_trace_callback(lambda sql: statements.append((threading.current_thread().name, sql)))
    here = threading.current_thread().name
    big = "x" * 40_000  # tens of pages a write (the id is in two tables and their indexes)
    wal = Path(f"{path}-wal")
    sizes: list[int] = []
    try:
        for n in range(60):
            started = RunStarted(run_id=f"run-{n}-{big}", agent="a", model="m", tools=("t",), max_rounds=3)
            if not journal.try_record_all([started]):  # the journal's thread is checkpointing: the lock is taken
                journal.record_all([started])  # as the observer's writer thread writes it then
            sizes.append(wal.stat().st_size)
            time.sleep(0.002)  # a round's model call
        # Without the journal's checkpoints the WAL would hold all 60 writes; with them, a few at most.
        one_write = sizes[2] - sizes[1]
        assert max(sizes) < 15 * one_write
        checkpointers = {name for name, sql in statements if sql == "PRAGMA wal_checkpoint(PASSIVE)"}
        assert checkpointers
        assert here not in checkpointers
        assert all(name.startswith("agentkit-journal") for name in checkpointers)
        assert (here, "PRAGMA wal_autocheckpoint = 0") in statements
        journal.record_all([RunStarted(run_id="run-60", agent="a", model="m", tools=("t",), max_rounds=3)])
        switches = [sql for name, sql in statements if name == here and sql.startswith("PRAGMA wal_autocheckpoint")]
        assert switches[-1] == f"PRAGMA wal_autocheckpoint = {sqlite_backend.WAL_AUTOCHECKPOINT_PAGES}"
        assert len(asyncio.run(journal.runs(limit=100))) == 61
    finally:
        asyncio.run(journal.close())


async def test_writing_at_once_refuses_a_held_lock_and_a_later_write_still_waits_for_one(tmp_path: Path) -> None:
    """``try_record_all`` gives up at once on a lock another connection holds; a plain write after it waits
    for the lock as ever (the busy timeout is put back), and goes in once the lock is released."""
    path = tmp_path / "journal.db"
    journal = SQLiteJournal(path)
    started = RunStarted(run_id="run-1", agent="a", model="m", tools=("t",), max_rounds=3)
    try:
        assert journal.try_record_all([started]) is True
        lock = WriteLock(path)
        try:
            assert journal.try_record_all([started]) is False  # at once: the lock is held
            waited = threading.Event()

            def write() -> None:
                journal.record_all([RunStarted(run_id="run-2", agent="a", model="m", tools=("t",), max_rounds=3)])
                waited.set()

            writer = threading.Thread(target=write)
            writer.start()
            await asyncio.sleep(0.3)
            assert not waited.is_set()  # it waits for the lock rather than failing
        finally:
            lock.release()
        writer.join(timeout=30)
        assert waited.is_set()
        assert sorted(run.id for run in await journal.runs()) == ["run-1", "run-2"]
    finally:
        await journal.close()
