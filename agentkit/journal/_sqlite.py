"""`SQLiteJournal`: the journal in one SQLite file (stdlib `sqlite3`, WAL mode); the default."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agentkit._events import Event
from agentkit.errors import JournalUnavailable, UsageError
from agentkit.journal import Journal
from agentkit.journal._records import Checkpointed, Hold
from agentkit.journal._schema import NOT_A_JOURNAL_FIX, VERSION_TABLE
from agentkit.journal._sql import Busy

__all__ = ["SQLiteJournal"]

BUSY_TIMEOUT_S = 30.0
"""How long a write waits for another process's write to finish before failing."""

WAL_AUTOCHECKPOINT_PAGES = 1000
"""SQLite's default: a commit that fills the WAL to this many pages copies it into the database file."""

CHECKPOINT_EVERY = 200
"""Writes at once (a few pages each: a round's events and checkpoint) after which the journal's own write
thread checkpoints the WAL, which writes at once leave alone."""

MEMORY = ":memory:"
"""SQLite's name for a database that lives in memory and is lost on close."""

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _text(raw: bytes) -> str:
    # Text that is not UTF-8 (a file written by other code, or damaged) reads back as lone surrogates
    # (``surrogateescape``) instead of failing the whole read; the journal stores those losslessly.
    return raw.decode("utf-8", "surrogateescape")


def _switch_to_wal(db: sqlite3.Connection, where: str) -> None:
    """Put the file in WAL mode, waiting (up to the busy timeout) for other openers instead of failing.

    Changing the journal mode needs the file to itself, and SQLite answers a connection that finds
    it taken with "database is locked" at once, without calling its busy handler; so concurrent
    first opens of a fresh file wait here, as every other step of opening waits on the timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF not in _BUSY or time.monotonic() >= deadline:
                raise
        else:
            # Another connection in the middle of a write in the old mode leaves it unchanged, without an error.
            if mode == "wal" or where == MEMORY:
                return
            if time.monotonic() >= deadline:
                raise JournalUnavailable(f"cannot switch the SQLite journal at {where} to WAL mode (it stays {mode})")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class _SQLiteConnection:
    dialect = "sqlite"
    serialised = True
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    types: Mapping[str, str] = MappingProxyType(
        # Not AUTOINCREMENT: no row is ever deleted, so the rowid (largest + 1) already only grows, and a
        # journal created so skips the sqlite_sequence update in every transaction that appends a row.
        {"ts": "TEXT", "serial": "INTEGER PRIMARY KEY", "bool": "INTEGER", "real": "REAL"}
    )

    def __init__(self, path: str, *, reader: bool = False, sync_records: bool = True) -> None:
        self._sync_records = sync_records
        self._synchronous = "FULL"
        """The connection's `synchronous` level now: switched only when a transaction needs the other one."""
        self._at_once = False
        """Whether the connection is set for writing at once now (`begin(at_once=True)`): no busy timeout,
        and no checkpoint of the WAL by its commits; else the busy timeout is `BUSY_TIMEOUT_S` and a commit
        that fills the WAL to `WAL_AUTOCHECKPOINT_PAGES` checkpoints it, as SQLite does by default."""
        # Transactions are explicit (BEGIN IMMEDIATE for writes), never the module's implicit ones.
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._db.text_factory = _text
        try:
            if reader:
                # The writer's connection switched the file to WAL; this one only reads, and says so.
                self._db.execute("PRAGMA query_only = ON")
            else:
                _switch_to_wal(self._db, path)
                # FULL: a committed claim survives power loss too, so an executed proposal cannot reappear as approved.
                self._db.execute("PRAGMA synchronous = FULL")
                self._db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            self._db.close()
            raise

    def begin(self, *, write: bool, synced: bool = True, at_once: bool = False) -> None:
        # A run's record (synced=False, unless sync_records) commits at NORMAL: in WAL mode the commit is
        # in the file once it returns, so it survives the process dying; only losing the machine's power can
        # undo it before the next synced commit or WAL checkpoint. Inbox transitions stay FULL, and their
        # sync also makes every earlier commit durable (the WAL is synced as a whole, in order).
        level = "FULL" if synced or self._sync_records else "NORMAL"
        if write and level != self._synchronous:
            self._db.execute(f"PRAGMA synchronous = {level}")
            self._synchronous = level
        # ``at_once``: another connection holding the write lock is Busy at once, not after the busy timeout;
        # and as a write at once runs on a run's thread (an event loop's), the checkpoint a commit sets off
        # when it fills the WAL (a copy into the file, with a sync to disk: milliseconds) is left to
        # ``SQLiteJournal``'s own thread. Like the sync level, both are switched only when a transaction needs
        # the other setting (a journaled run's rounds are written at once, one after another). In WAL mode
        # only taking the write lock waits: the statements of a transaction that holds it never meet a busy
        # database.
        if at_once != self._at_once:
            timeout, pages = (0, 0) if at_once else (int(BUSY_TIMEOUT_S * 1000), WAL_AUTOCHECKPOINT_PAGES)
            self._db.execute(f"PRAGMA busy_timeout = {timeout}")
            self._db.execute(f"PRAGMA wal_autocheckpoint = {pages}")
            self._at_once = at_once
        # IMMEDIATE takes the write lock up front, so a read-then-update cannot deadlock with another writer.
        try:
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.OperationalError as error:
            if at_once and error.sqlite_errorcode & 0xFF in _BUSY:
                raise Busy(str(error)) from error
            raise

    def commit(self) -> None:
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        cursor = self._db.execute(sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._db.execute(sql, params).rowcount

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._db.executemany(sql, rows)

    def table_exists(self, name: str) -> bool:
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def lock_schema(self) -> None:
        """Nothing to do: `BEGIN IMMEDIATE` already serialises migrations."""

    def to_db_time(self, at: datetime) -> object:
        # One fixed-width UTC format, so comparing the text compares the times.
        return at.astimezone(UTC).isoformat(timespec="microseconds")

    def from_db_time(self, value: object) -> datetime:
        if not isinstance(value, str):
            raise TypeError(f"expected an ISO 8601 timestamp, got {value!r}")
        at = datetime.fromisoformat(value)
        # The journal writes UTC with an offset; a time edited in by hand without one is read as UTC too.
        return at if at.tzinfo is not None else at.replace(tzinfo=UTC)

    def checkpoint_wal(self) -> None:
        """Copy what the WAL holds into the database file, without waiting for readers or writers (`PASSIVE`;
        a read-only connection can too)."""
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self._db.close()


class SQLiteJournal(Journal):
    """The journal in one SQLite file: no server, safe across processes on one machine.

    The file is created with its schema on first open; processes opening a fresh file at once wait
    for each other (up to the busy timeout, 30 s) instead of failing. `create=False` refuses a
    missing file, or a file that holds no journal, after reading it read-only: such a file is left
    unchanged. Opening a journal whose schema is up to date only reads it.

    WAL mode lets readers work while a writer writes. Reads use a connection of their own, so a read
    never waits behind a write, not even one of this object's that waits for another process's
    lock. Every write is one transaction that takes the write lock up front.

    Durability: every commit is in the file when it returns, so it survives the process dying
    (SIGKILL, OOM). Inbox transitions (a proposal approved, rejected, claimed, executed, resolved)
    are also synced to disk at each commit (`synchronous=FULL`), so they survive the machine
    losing power. A run's record (its events, checkpoints and lease, written by `JournalObserver`)
    is not synced at each commit (`synchronous=NORMAL`): it is synced with the next synced commit
    or WAL checkpoint, so a power loss can undo the record's latest commits (never a part of one:
    the file stays consistent, and a resume then starts from an earlier checkpoint).
    `sync_records=True` syncs those commits too, at the cost of one sync to disk per commit.

    Args:
        path: The database file. `":memory:"` (a journal that lives as long as the object, lost
            on close) only with `in_memory=True`.
        create: Create the file and its schema when missing.
        in_memory: Say that a journal in memory is what you want.
        sync_records: Sync each commit of a run's record to disk too, so it survives power loss.

    Raises:
        UsageError: `path` is empty, or `":memory:"` without `in_memory=True` (or
            `in_memory=True` with a path).
        JournalUnavailable: no file at `path` (with `create=False`), not a journal, or a
            journal written by a newer agentkit.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, in_memory: bool = False, sync_records: bool = False
    ) -> None:
        where = _checked_path(path, in_memory=in_memory)
        if where != MEMORY and not create:
            _check_is_journal(where)
        self.sync_records = sync_records
        """Whether each commit of a run's record is synced to disk."""
        try:
            conn = _SQLiteConnection(where, sync_records=sync_records)
        except sqlite3.Error as error:
            raise JournalUnavailable(f"cannot open the SQLite journal at {where}: {error}") from error
        # In memory there is one database per connection, so reads share the writer's.
        try:
            reader = None if where == MEMORY else _SQLiteConnection(where, reader=True)
        except sqlite3.Error as error:
            conn.close()
            raise JournalUnavailable(f"cannot open the SQLite journal at {where}: {error}") from error
        self._sqlite = conn
        self._written_at_once = 0
        """Writes at once since the journal's thread last checkpointed the WAL."""
        super().__init__(conn, where=where, create=create, reader=reader)

    @property
    def records_at_once(self) -> bool:
        """A local file: a run's record is written at once on the run's thread when the write lock is free;
        not with `sync_records=True`, whose commits each wait for the disk (the writer thread waits then)."""
        return not self.sync_records

    def try_record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> bool:
        """`Journal.try_record_all`; every `CHECKPOINT_EVERY` writes, the journal's own thread then checkpoints
        the WAL, which a write at once leaves alone (it runs on the caller's thread)."""
        written = super().try_record_all(entries, hold=hold)
        if written:
            self._written_at_once += 1
            if self._written_at_once >= CHECKPOINT_EVERY:
                self._written_at_once = 0
                with suppress(RuntimeError):  # closed: the journal's threads are gone, and so is the need
                    self._threads.submit(self._checkpoint_wal)
        return written

    def _checkpoint_wal(self) -> None:
        # Holding the write lock, so it ends before the next write, which then starts the WAL over from its
        # beginning (the WAL stays about CHECKPOINT_EVERY writes long); a write at once meanwhile finds the lock
        # taken and goes to its observer's writer thread. Reads go on: they have a connection of their own.
        with self._lock:
            if not self._closed:
                with suppress(sqlite3.Error):  # the next one, or SQLite's own on a plain commit, does it then
                    self._sqlite.checkpoint_wal()


def _checked_path(path: str | os.PathLike[str], *, in_memory: bool) -> str:
    """The path as text, refusing the two names SQLite would silently open as throw-away databases."""
    where = os.fspath(path)
    if not isinstance(where, str):
        raise UsageError(f"the journal path must be text, got {where!r}")
    if in_memory:
        if where != MEMORY:
            raise UsageError(f"in_memory=True opens {MEMORY!r}; got the path {where!r}: pass one or the other")
        return where
    if not where.strip():
        raise UsageError(
            f"the journal path is empty ({where!r}); SQLite would open a temporary database and lose every record "
            "on close. Pass the path of the journal file (or a postgresql:// URL)"
        )
    if where == MEMORY:
        raise UsageError(
            f"{MEMORY!r} is a journal in memory: every record is lost on close. Pass a file path, or "
            f"SQLiteJournal({MEMORY!r}, in_memory=True) if that is what you want"
        )
    return where


def _check_is_journal(where: str) -> None:
    """Refuse a path that is not a journal, reading it only: a wrong `--db` must not change the file.

    Opening for writing switches the file to WAL (and gives an empty file a header) before the
    schema can be read, so the check goes first, over a read-only connection.
    """
    if not Path(where).is_file():
        raise JournalUnavailable(f"no journal at {where}; {NOT_A_JOURNAL_FIX}")
    uri = f"{Path(where).absolute().as_uri()}?mode=ro"
    try:
        probe = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            found = probe.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VERSION_TABLE,))
            is_journal = bool(found.fetchall())
        finally:
            probe.close()
    except sqlite3.Error as error:
        raise JournalUnavailable(
            f"cannot read {where} as a SQLite journal: {error}; point --db at a journal"
        ) from error
    if not is_journal:
        raise JournalUnavailable(f"{where} holds no agentkit journal (no {VERSION_TABLE} table); {NOT_A_JOURNAL_FIX}")
