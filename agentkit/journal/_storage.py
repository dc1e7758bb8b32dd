"""The journal's storage: connections, transactions, the schema's migration, and the threads that run them.

A backend supplies a `Connection` (transactions, queries, column types, time conversion;
`agentkit.journal._sql`); `Storage` runs every operation as one transaction on it. On SQLite's
connections transactions take turns under a lock (reads on a connection and lock of their own, so a
read never queues behind a write); on PostgreSQL each takes a connection from the journal's pool.
Either way a journal may be shared by the observer (in its writer thread), the inbox methods (in
the journal's own threads) and `work`'s concurrent executions. The jobs built on it (the inbox,
its executions, the runs) each import this module and no other of theirs.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any, ParamSpec, Self, TypeVar

from agentkit.errors import JournalError, JournalUnavailable, UnknownId, UsageError
from agentkit.journal._records import ProposalRecord
from agentkit.journal._schema import MIGRATIONS, NOT_A_JOURNAL_FIX, SCHEMA_VERSION, VERSION_TABLE, render
from agentkit.journal._sql import Busy, Connection, Lossless, Stored, lock_proposal_statement, proposal_of

__all__ = ["JOURNAL_THREADS", "Storage"]

T = TypeVar("T")
P = ParamSpec("P")

JOURNAL_THREADS = 4
"""Threads each journal object runs its database calls in, as many for reads again: its own, never
the event loop's default executor, so blocking tools that hold those threads cannot starve the
journal (and the reverse), and writes waiting for the database cannot hold up reads."""


class DatabaseFailed(JournalError):
    """The database failed (a driver error): the transaction did not commit."""


class CommitUnconfirmed(DatabaseFailed):
    """The commit itself failed: the server may or may not have committed the transaction."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_id(value: object, what: str) -> None:
    # PostgreSQL would fail on comparing a text column with an integer; SQLite would coerce it.
    if not isinstance(value, str):
        raise UnknownId(
            f"no {what} {value!r}: {what} ids are strings (got {type(value).__name__}); pass the id as text",
            id=repr(value),
        )


def check_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"limit must be an integer >= 1; got {limit!r}")


def named(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{what} must be a non-empty string (who or why, for the audit trail); got {value!r}")
    return value.strip()


class Storage:
    """One journal's database: its connections, its transactions and its threads."""

    def __init__(self, conn: Connection, *, where: str, create: bool, reader: Connection | None = None) -> None:
        self._conn: Connection = Lossless(conn)
        self._reader: Connection | None = None if reader is None else Lossless(reader)
        self._where = where
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._closed = False
        self._stored: dict[str, Stored] = {}
        """How far each run's stored state goes, as this object last wrote it (checked against the run's
        row by the next write, which then need not read it first)."""
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
        """One transaction; `at_once`: raise `Busy` (nothing done) rather than wait for this journal's
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
                raise DatabaseFailed(f"the journal at {self._where} failed to start a transaction: {error}") from error
            try:
                yield db
            except BaseException as error:
                with suppress(Exception):
                    db.rollback()
                if isinstance(error, db.errors):
                    raise DatabaseFailed(f"the journal at {self._where} failed: {error}") from error
                raise
            try:
                db.commit()
            except db.errors as error:
                with suppress(Exception):
                    db.rollback()
                raise CommitUnconfirmed(f"the journal at {self._where} failed to commit: {error}") from error
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
                    f"{self._where} holds no agentkit journal (no {VERSION_TABLE} table); {NOT_A_JOURNAL_FIX}"
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

    def _fetch(self, db: Connection, id: str, *, lock: bool = False) -> ProposalRecord:
        check_id(id, "proposal")
        sql = lock_proposal_statement(db.dialect) if lock else "SELECT * FROM agentkit_proposals WHERE id = ?"
        rows = db.query(sql, (id,))
        if not rows:
            raise UnknownId(
                f"no proposal {id!r} in the journal at {self._where}; list them with `agentkit proposals list`", id=id
            )
        return proposal_of(db, rows[0])

    def _run_row(self, db: Connection, run_id: str) -> dict[str, Any]:
        check_id(run_id, "run")
        rows = db.query("SELECT * FROM agentkit_runs WHERE id = ?", (run_id,))
        if not rows:
            raise UnknownId(
                f"no run {run_id!r} in the journal at {self._where}; list them with `agentkit journal runs`",
                id=run_id,
            )
        return rows[0]

    def _close(self) -> None:
        """Close the connection; later calls raise `JournalError`."""
        with self._lock, self._read_lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._reader is not None:
                    self._reader.close()

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
