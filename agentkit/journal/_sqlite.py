"""``SQLiteJournal``: the journal in one SQLite file (stdlib ``sqlite3``, WAL mode); the default."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agentkit.journal._errors import JournalUnavailable
from agentkit.journal._schema import VERSION_TABLE
from agentkit.journal._store import SQLJournal

__all__ = ["SQLiteJournal"]

BUSY_TIMEOUT_S = 30.0
"""How long a write waits for another process's write to finish before failing."""


class _SQLiteConnection:
    dialect = "sqlite"
    serialised = True
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    types: Mapping[str, str] = MappingProxyType(
        {"ts": "TEXT", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "bool": "INTEGER", "real": "REAL"}
    )

    def __init__(self, path: str) -> None:
        # Transactions are explicit (BEGIN IMMEDIATE for writes), never the module's implicit ones.
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed claim survives power loss too, so an executed proposal cannot reappear as approved.
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error:
            self._db.close()
            raise

    def begin(self, *, write: bool) -> None:
        # IMMEDIATE takes the write lock up front, so a read-then-update cannot deadlock with another writer.
        self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")

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

    def table_exists(self, name: str) -> bool:
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def lock_schema(self) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already serialises migrations."""

    def to_db_time(self, at: datetime) -> object:
        # One fixed-width UTC format, so comparing the text compares the times.
        return at.astimezone(UTC).isoformat(timespec="microseconds")

    def from_db_time(self, value: object) -> datetime:
        return datetime.fromisoformat(str(value))

    def close(self) -> None:
        self._db.close()


class SQLiteJournal(SQLJournal):
    """The journal in one SQLite file: no server, safe across processes on one machine.

    The file is created with its schema on first open. ``create=False`` refuses a missing file,
    or a file that holds no journal, after reading it read-only: such a file is left unchanged.
    WAL mode lets readers work while a writer writes; every write is one transaction that takes the
    write lock up front, and commits are synced to disk.

    Args:
        path: The database file (``":memory:"`` for a journal that lives as long as the object).
        create: Create the file and its schema when missing.

    Raises:
        JournalUnavailable: no file at ``path`` (with ``create=False``), not a journal, or a
            journal written by a newer agentkit.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        where = os.fspath(path)
        if where != ":memory:" and not create:
            _check_is_journal(where)
        try:
            conn = _SQLiteConnection(where)
        except sqlite3.Error as error:
            raise JournalUnavailable(f"cannot open the SQLite journal at {where}: {error}") from error
        super().__init__(conn, where=where, create=create)


def _check_is_journal(where: str) -> None:
    """Refuse a path that is not a journal, reading it only: a wrong ``--db`` must not change the file.

    Opening for writing switches the file to WAL (and gives an empty file a header) before the
    schema can be read, so the check goes first, over a read-only connection.
    """
    if not Path(where).is_file():
        raise JournalUnavailable(
            f"no journal at {where}; pass the path of an existing journal (--db), or create one by opening it from code"
        )
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
        raise JournalUnavailable(
            f"{where} holds no agentkit journal (no {VERSION_TABLE} table); point --db at a journal, or open it "
            "from code to create one"
        )
