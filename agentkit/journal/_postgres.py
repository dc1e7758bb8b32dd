"""``PostgresJournal``: the journal in PostgreSQL, for many workers on many machines (extra ``postgres``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentkit.journal._errors import JournalUnavailable
from agentkit.journal._store import SQLJournal

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresJournal"]

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


class _PostgresConnection:
    dialect = "postgresql"
    types: Mapping[str, str] = MappingProxyType(
        {
            "ts": "TIMESTAMPTZ",
            "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            "bool": "BOOLEAN",
            "real": "DOUBLE PRECISION",
        }
    )

    def __init__(self, dsn: str) -> None:
        self._psycopg = _import_psycopg()
        self.errors: tuple[type[Exception], ...] = (self._psycopg.Error,)
        self._dsn = dsn
        self._db: psycopg.Connection[Any] = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] = self._psycopg.connect(self._dsn, autocommit=False)
        return conn

    def begin(self, *, write: bool) -> None:
        # A long-lived worker survives a server restart: a broken connection is replaced before use.
        if self._db.closed or self._db.broken:
            self._db = self._connect()
        # psycopg opens the transaction with the first statement.

    def commit(self) -> None:
        self._db.commit()

    def rollback(self) -> None:
        self._db.rollback()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        cursor = self._db.execute(sql.replace("?", "%s"), params)
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._db.execute(sql.replace("?", "%s"), params).rowcount

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
        self._db.close()


class PostgresJournal(SQLJournal):
    """The journal in a PostgreSQL database: many workers on many machines share one inbox.

    Tables are created (prefixed ``agentkit_``) in the first schema of the connection's
    ``search_path`` on first open; concurrent first opens are serialised by an advisory lock. The
    claim of a proposal is one conditional ``UPDATE`` under ``READ COMMITTED``: of the workers
    racing for a row, the first to commit wins and every other sees the row no longer approved.

    Args:
        dsn: A ``postgresql://`` URL or a libpq connection string.
        create: Create the schema when the database has none.

    Raises:
        JournalUnavailable: psycopg is not installed, the server cannot be reached, or the
            database holds no journal (with ``create=False``) or a newer one.
    """

    def __init__(self, dsn: str, *, create: bool = True) -> None:
        where = _describe(dsn)
        psycopg = _import_psycopg()
        try:
            conn = _PostgresConnection(dsn)
        except psycopg.Error as error:
            raise JournalUnavailable(
                f"cannot connect to the PostgreSQL journal at {where}: {str(error).strip()}; check the URL and "
                "that the server is running"
            ) from error
        super().__init__(conn, where=where, create=create)
