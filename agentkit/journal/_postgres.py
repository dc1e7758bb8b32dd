"""`PostgresJournal`: the journal in PostgreSQL, for many workers on many machines (extra `postgres`)."""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Self

from agentkit.errors import JournalError, JournalUnavailable, UsageError
from agentkit.journal import Journal

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentkit.journal._worker import Wakeups

__all__ = [
    "CONNECT_TIMEOUT_S",
    "LOCK_TIMEOUT_S",
    "NOTIFY_CHANNEL",
    "POOL_SIZE",
    "POOL_TIMEOUT_S",
    "STATEMENT_TIMEOUT_S",
    "PostgresJournal",
]

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
"""Default bound on the connections one `PostgresJournal` opens for its transactions (`pool_size`)."""

POOL_TIMEOUT_S = 30.0
"""How long a transaction waits for a free pooled connection before failing with `JournalError`."""

CONNECT_TIMEOUT_S = 10
"""Default for how long opening a connection waits for the server to answer (libpq's `connect_timeout`; libpq
waits at least 2 s): a server that accepts connections and never answers fails `JournalUnavailable` then,
instead of hanging the command that opened the journal."""

STATEMENT_TIMEOUT_S = 60.0
"""Default `statement_timeout` of the journal's connections: no statement of the journal takes near this long,
so one that does is failed by the server (`JournalError`; a worker's claim, `NothingRan`) rather than waited
for. A migration, which may build an index over a large table, runs without it."""

LOCK_TIMEOUT_S = 30.0
"""Default `lock_timeout` of the journal's connections: a row, table or migration lock another session holds
this long (a transaction left open in `psql`, say) fails the statement waiting for it instead of hanging it."""

NOTIFY_CHANNEL = "agentkit_approved"
"""The channel a trigger notifies when a proposal becomes approved (the payload is its tool name)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Timeouts:
    """How long the journal's connections wait (seconds; `None`: as long as libpq or the server would)."""

    connect: float | None = CONNECT_TIMEOUT_S
    statement: float | None = STATEMENT_TIMEOUT_S
    lock: float | None = LOCK_TIMEOUT_S

    def __post_init__(self) -> None:
        for name, value in (
            ("connect_timeout", self.connect),
            ("statement_timeout", self.statement),
            ("lock_timeout", self.lock),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf
            ):
                raise UsageError(f"{name} must be a positive number of seconds, or None for no limit; got {value!r}")

    def applied(self, dsn: str) -> str:
        """`dsn` with these timeouts, where it (or libpq's environment) does not set its own: what the URL
        says wins, so `?connect_timeout=N` or `options=-c lock_timeout=...` overrides a default."""
        psycopg = _import_psycopg()
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        extra: dict[str, str] = {}
        if self.connect is not None and "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
            extra["connect_timeout"] = str(max(2, math.ceil(self.connect)))
        # Ours first: of two settings of one parameter in ``options`` the later wins, so the URL's own win.
        settings = [
            f"-c {name}={math.ceil(value * 1000)}"
            for name, value in (("statement_timeout", self.statement), ("lock_timeout", self.lock))
            if value is not None
        ]
        if settings:
            own = params.get("options", os.environ.get("PGOPTIONS"))
            extra["options"] = " ".join([*settings, *([str(own)] if own else [])])
        return psycopg.conninfo.make_conninfo(dsn, **extra) if extra else dsn

    def connect_wait(self, dsn: str) -> str:
        """How long a connection to `dsn` waits for the server, in words (for the message of a timeout)."""
        psycopg = _import_psycopg()
        params = psycopg.conninfo.conninfo_to_dict(self.applied(dsn))
        given = params.get("connect_timeout", os.environ.get("PGCONNECT_TIMEOUT"))
        return f"{given} s" if given is not None else "libpq's own limit"


class _PostgresConnection:
    """The journal's `Connection` over a bounded pool: each transaction, in its thread, holds one pooled connection.

    Every connection runs `READ COMMITTED`, set explicitly: a server or database whose default is
    `REPEATABLE READ` or `SERIALIZABLE` would turn a lost claim race into a serialization
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

    def __init__(self, dsn: str, *, pool_size: int = POOL_SIZE, timeouts: _Timeouts | None = None) -> None:
        self._psycopg = _import_psycopg()
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as missing:
            raise JournalUnavailable(
                "PostgresJournal needs psycopg_pool; install it with: pip install 'agentkit[postgres]'"
            ) from missing
        self.errors: tuple[type[Exception], ...] = (self._psycopg.Error,)
        dsn = (timeouts or _Timeouts()).applied(dsn)
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
        # The catalog read with this statement's snapshot, in the schemas of the connection's search_path (where
        # the journal's unqualified names resolve). Not to_regclass: it answers from the backend's catalog cache,
        # and after waiting for the schema lock (an advisory lock, which does not refresh that cache) it can still
        # say "missing" of a table another opener created and committed meanwhile, and the migration then fails
        # with "relation already exists".
        rows = self.query(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relname = ? AND n.nspname = ANY (current_schemas(false))) AS present",
            (name,),
        )
        return bool(rows[0]["present"])

    def lock_schema(self) -> None:
        # Two processes opening a fresh database at once must not both create the tables. The migration may
        # build an index over a large table: no statement timeout for it (the lock timeout still applies).
        self._db.execute("SET LOCAL statement_timeout = 0")
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
        """A connection of its own, outside the pool, LISTENing on `NOTIFY_CHANNEL`."""
        conn: psycopg.AsyncConnection[Any] = await self._psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn


class _Listening:
    """PostgreSQL's wake-up for `work`: a notification on `NOTIFY_CHANNEL` for one of the worker's tools.

    The listening connection is one per worker, outside the pool. When it drops, it is opened again
    and the worker woken (notifications sent meanwhile are lost, so the worker looks); `poll`
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


class PostgresJournal(Journal):
    """The journal in a PostgreSQL database: many workers on many machines share one inbox.

    Tables are created (prefixed `agentkit_`) in the first schema of the connection's
    `search_path` on first open; concurrent first opens are serialised by an advisory lock.

    Each transaction takes a connection from a bounded pool (`psycopg_pool`) of at most
    `pool_size` connections, shared by everything that uses this object: open one journal per
    process and share it between the observer, the inbox and `work`'s concurrent calls. A worker
    also holds one connection outside the pool, to LISTEN for approvals. Every pooled connection
    runs `READ COMMITTED`, whatever the server's default. Claims lock their row
    (`FOR UPDATE`; `SKIP LOCKED` when a worker claims the next approved call), so of the
    workers racing for a row one wins and the others move on.

    Nothing waits without end: opening a connection waits `connect_timeout` for the server to
    answer, a statement runs at most `statement_timeout` and waits at most `lock_timeout` for
    a lock (defaults `CONNECT_TIMEOUT_S`, `STATEMENT_TIMEOUT_S`, `LOCK_TIMEOUT_S`). What the
    DSN sets itself wins over these defaults (`?connect_timeout=30`, or ``options=-c
    lock_timeout=5s`, or libpq's `PGCONNECT_TIMEOUT`); `None`` sets none.

    Args:
        dsn: A `postgresql://` URL or a libpq connection string.
        create: Create the schema when the database has none.
        pool_size: The most connections this journal opens for its transactions (default `POOL_SIZE`).
        connect_timeout: Seconds a new connection waits for the server to answer (at least 2, libpq's floor).
        statement_timeout: Seconds a statement may run before the server cancels it (`JournalError`).
        lock_timeout: Seconds a statement may wait for a lock before the server cancels it (`JournalError`).

    Raises:
        JournalUnavailable: psycopg is not installed, the server cannot be reached or does not answer
            within `connect_timeout`, or the database holds no journal (with `create=False`) or a
            newer one.
        UsageError: a bad `pool_size` or timeout.
    """

    def __init__(
        self,
        dsn: str,
        *,
        create: bool = True,
        pool_size: int = POOL_SIZE,
        connect_timeout: float | None = CONNECT_TIMEOUT_S,
        statement_timeout: float | None = STATEMENT_TIMEOUT_S,
        lock_timeout: float | None = LOCK_TIMEOUT_S,
    ) -> None:
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise UsageError(f"pool_size must be an integer >= 1; got {pool_size!r}")
        timeouts = _Timeouts(connect=connect_timeout, statement=statement_timeout, lock=lock_timeout)
        where = _describe(dsn)
        psycopg = _import_psycopg()
        try:
            conn = _PostgresConnection(dsn, pool_size=pool_size, timeouts=timeouts)
        except psycopg.Error as error:
            waited = ""
            if isinstance(error, psycopg.errors.ConnectionTimeout):
                waited = (
                    f" (no answer within {timeouts.connect_wait(dsn)}: the server accepts connections and does not "
                    "answer, or the network drops them; ?connect_timeout=SECONDS in the URL waits longer)"
                )
            raise JournalUnavailable(
                f"cannot connect to the PostgreSQL journal at {where}: {str(error).strip()}{waited}; check the URL "
                "and that the server is running"
            ) from error
        self._pg = conn
        super().__init__(conn, where=where, create=create)

    def _wakeups(self, poll: float | None) -> AbstractAsyncContextManager[Wakeups]:
        """Wake `work` on a notification that a proposal was approved."""
        return _Listening(self._pg, 30.0 if poll is None else poll)
