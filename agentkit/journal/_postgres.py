"""``PostgresJournal``: the journal in PostgreSQL, for many workers on many machines (extra ``postgres``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Self

from agentkit.errors import UsageError
from agentkit.journal._errors import JournalError, JournalUnavailable
from agentkit.journal._store import SQLJournal

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentkit.journal._worker import Wakeups

__all__ = ["NOTIFY_CHANNEL", "POOL_SIZE", "POOL_TIMEOUT_S", "PostgresJournal"]

# Any constant works; it only has to be the same in every process that migrates the schema.
_SCHEMA_LOCK = 0x6A6F75726E616C


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as missing:
        raise JournalUnavailable(
            "PostgresJournal needs psycopg 3; install it with: pip install 'agentkit[postgres]'"
        ) from missing
    return psycopg


def _describe(dsn: str) -> str:
    """The DSN without its password, for messages."""
    psycopg = _import_psycopg()
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable DSN)"
    host, port, dbname = info.get("host", ""), info.get("port", ""), info.get("dbname", "")
    user = f"{info['user']}@" if info.get("user") else ""
    return f"postgresql://{user}{host}{':' + str(port) if port else ''}/{dbname}"


POOL_SIZE: int = 10
"""Default bound on the connections one ``PostgresJournal`` opens for its transactions (``pool_size``)."""

POOL_TIMEOUT_S = 30.0
"""How long a transaction waits for a free pooled connection before failing with ``JournalError``."""

NOTIFY_CHANNEL = "agentkit_approved"
"""The channel a trigger notifies when a proposal becomes approved (the payload is its tool name)."""


class _PostgresConnection:
    """The journal's ``Connection`` over a bounded pool: each transaction, in its thread, holds one pooled connection.

    Every connection runs ``READ COMMITTED``, set explicitly: a server or database whose default is
    ``REPEATABLE READ`` or ``SERIALIZABLE`` would turn a lost claim race into a serialization
    failure instead of a row that is no longer approved.
    """

    dialect = "postgresql"
    serialised = False
    types: Mapping[str, str] = MappingProxyType(
        {
            "ts": "TIMESTAMPTZ",
            "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            "bool": "BOOLEAN",
            "real": "DOUBLE PRECISION",
        }
    )

    def __init__(self, dsn: str, *, pool_size: int = POOL_SIZE) -> None:
        self._psycopg = _import_psycopg()
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as missing:
            raise JournalUnavailable(
                "PostgresJournal needs psycopg_pool; install it with: pip install 'agentkit[postgres]'"
            ) from missing
        self.errors: tuple[type[Exception], ...] = (self._psycopg.Error,)
        self._dsn = dsn
        # A first connection outside the pool reports an unreachable server with the server's own words.
        self._psycopg.connect(dsn, autocommit=True).close()
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=POOL_TIMEOUT_S,
            kwargs={"autocommit": False},
            configure=self._configure,
            name="agentkit-journal",
        )
        try:
            self._pool.open(wait=True, timeout=POOL_TIMEOUT_S)
        except BaseException:
            self._pool.close()
            raise
        self._local = threading.local()

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.isolation_level = self._psycopg.IsolationLevel.READ_COMMITTED

    @property
    def _db(self) -> psycopg.Connection[Any]:
        held: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if held is None:
            raise RuntimeError("no transaction is open in this thread")  # a bug in the journal, not a user error
        return held

    def begin(self, *, write: bool, synced: bool = True, at_once: bool = False) -> None:
        # Every commit is synced on the server (its synchronous_commit), records included. ``at_once`` is
        # not asked of PostgreSQL (its journal does not record at once); a row lock is waited for.
        # A broken connection (a server restart, a killed backend) is dropped by the pool when given back.
        self._local.conn = self._pool.getconn()
        # psycopg opens the transaction, at READ COMMITTED, with the first statement.

    def _give_back(self) -> None:
        conn, self._local.conn = self._local.conn, None
        if conn is not None:
            self._pool.putconn(conn)

    def commit(self) -> None:
        self._db.commit()
        self._give_back()

    def rollback(self) -> None:
        try:
            if not self._db.broken:
                self._db.rollback()
        finally:
            self._give_back()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        cursor = self._db.execute(sql.replace("?", "%s"), params)
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._db.execute(sql.replace("?", "%s"), params).rowcount

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self._db.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    def table_exists(self, name: str) -> bool:
        # to_regclass follows the connection's search_path, like the unqualified names the journal uses.
        return bool(self.query("SELECT to_regclass(?) IS NOT NULL AS present", (name,))[0]["present"])

    def lock_schema(self) -> None:
        # Two processes opening a fresh database at once must not both create the tables.
        self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))

    def to_db_time(self, at: datetime) -> object:
        return at

    def from_db_time(self, value: object) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"expected a timestamptz, got {value!r}")
        return value.astimezone(UTC)

    def close(self) -> None:
        self._pool.close()

    async def listen(self) -> psycopg.AsyncConnection[Any]:
        """A connection of its own, outside the pool, LISTENing on ``NOTIFY_CHANNEL``."""
        conn: psycopg.AsyncConnection[Any] = await self._psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn


class _Listening:
    """PostgreSQL's wake-up for ``work``: a notification on ``NOTIFY_CHANNEL`` for one of the worker's tools.

    The listening connection is one per worker, outside the pool. When it drops, it is opened again
    and the worker woken (notifications sent meanwhile are lost, so the worker looks); ``poll``
    seconds without a notification wake it too, as a safety net.
    """

    def __init__(self, conn: _PostgresConnection, poll: float) -> None:
        self._conn = conn
        self._poll = poll
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.how = f"LISTEN/NOTIFY (and a look every {poll:g}s)"

    async def __aenter__(self) -> Self:
        try:
            first = await self._conn.listen()
        except self._conn.errors as error:
            raise JournalError(f"cannot LISTEN for approvals: {str(error).strip()}; is the server up?") from error
        self._task = asyncio.create_task(self._follow(first))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, conn: psycopg.AsyncConnection[Any]) -> None:
        errors = self._conn.errors
        while True:
            try:
                async with conn:
                    async for _ in conn.notifies():
                        self._woken.set()
            except errors:
                pass
            self._woken.set()
            while True:
                await asyncio.sleep(1.0)
                try:
                    conn = await self._conn.listen()
                    break
                except errors:
                    continue
            self._woken.set()

    def clear(self) -> None:
        self._woken.clear()

    async def wait(self) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), self._poll)


class PostgresJournal(SQLJournal):
    """The journal in a PostgreSQL database: many workers on many machines share one inbox.

    Tables are created (prefixed ``agentkit_``) in the first schema of the connection's
    ``search_path`` on first open; concurrent first opens are serialised by an advisory lock.

    Each transaction takes a connection from a bounded pool (``psycopg_pool``) of at most
    ``pool_size`` connections, shared by everything that uses this object: open one journal per
    process and share it between the observer, the inbox and ``work``'s concurrent calls. A worker
    also holds one connection outside the pool, to LISTEN for approvals. Every pooled connection
    runs ``READ COMMITTED``, whatever the server's default. Claims lock their row
    (``FOR UPDATE``; ``SKIP LOCKED`` when a worker claims the next approved call), so of the
    workers racing for a row one wins and the others move on.

    Args:
        dsn: A ``postgresql://`` URL or a libpq connection string.
        create: Create the schema when the database has none.
        pool_size: The most connections this journal opens for its transactions (default ``POOL_SIZE``).

    Raises:
        JournalUnavailable: psycopg is not installed, the server cannot be reached, or the
            database holds no journal (with ``create=False``) or a newer one.
    """

    def __init__(self, dsn: str, *, create: bool = True, pool_size: int = POOL_SIZE) -> None:
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise UsageError(f"pool_size must be an integer >= 1; got {pool_size!r}")
        where = _describe(dsn)
        psycopg = _import_psycopg()
        try:
            conn = _PostgresConnection(dsn, pool_size=pool_size)
        except psycopg.Error as error:
            raise JournalUnavailable(
                f"cannot connect to the PostgreSQL journal at {where}: {str(error).strip()}; check the URL and "
                "that the server is running"
            ) from error
        self._pg = conn
        super().__init__(conn, where=where, create=create)

    def _wakeups(self, poll: float | None) -> AbstractAsyncContextManager[Wakeups]:
        """Wake ``work`` on a notification that a proposal was approved."""
        return _Listening(self._pg, 30.0 if poll is None else poll)
