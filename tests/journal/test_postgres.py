"""``PostgresJournal`` against servers that do not answer, and locks held elsewhere: nothing waits without end.

A hung server is a real socket that accepts connections and never answers; the lock is held by a
real second connection to the test server.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from agentkit import ProposedAction, Tier
from agentkit._cli import main
from agentkit.errors import UsageError
from agentkit.journal import JournalError, JournalUnavailable, PostgresJournal
from tests.support import Wipe, wipe_tool

NEVER = 60.0
"""Seconds after which a call that should have given up is taken to hang."""


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of a server on loopback that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)  # a closed listener does not wake a blocked accept(): look at ``stopping`` often
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, name="silent-server", daemon=True)
    thread.start()
    try:
        yield f"postgresql://agentkit@127.0.0.1:{listener.getsockname()[1]}/journal"
    finally:
        stopping.set()
        thread.join(NEVER)
        listener.close()
        for conn in held:
            conn.close()


def within(seconds: float, call: Callable[[], object]) -> object:
    """``call()``'s result, or a failure naming the hang when it does not return within ``seconds``."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=seconds)
    except TimeoutError:
        pytest.fail(f"still waiting after {seconds:g} s: it hangs")
    finally:
        pool.shutdown(wait=False)  # a call that hangs is left behind, not waited for


def test_a_server_that_never_answers_fails_journal_unavailable_naming_it(silent_server: str) -> None:
    """Opening a journal on a server that accepts and never answers gives up after connect_timeout."""

    def open_it() -> BaseException | None:
        try:
            PostgresJournal(silent_server, connect_timeout=2)
        except JournalUnavailable as error:
            return error
        return None

    error = within(NEVER, open_it)
    assert isinstance(error, JournalUnavailable)
    port = silent_server.rsplit(":", 1)[1].split("/")[0]
    assert f"127.0.0.1:{port}/journal" in str(error)
    assert "no answer within 2 s" in str(error)


@pytest.mark.slow
def test_journal_runs_gives_up_on_a_server_that_never_answers_by_default(
    silent_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no timeout in the URL, `agentkit journal runs` exits 1 after the default wait, naming the server."""
    code = within(NEVER, lambda: main(["journal", "runs", "--db", silent_server]))
    assert code == 1
    err = capsys.readouterr().err
    assert "cannot connect to the PostgreSQL journal at postgresql://agentkit@127.0.0.1:" in err
    assert "no answer within 10 s" in err


@pytest.mark.slow
def test_agentkit_worker_gives_up_on_a_server_that_never_answers_by_default(silent_server: str) -> None:
    """`agentkit worker --db` on a server that never answers exits 1 after the default wait, naming the server."""
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentkit",
            "worker",
            "--db",
            silent_server,
            "--tools",
            "tests.support:mail",
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=NEVER,
    )
    assert worker.returncode == 1, worker.stderr
    assert "cannot connect to the PostgreSQL journal at postgresql://agentkit@127.0.0.1:" in worker.stderr
    assert "no answer within 10 s" in worker.stderr


async def test_a_lock_held_elsewhere_fails_the_statement_after_lock_timeout(postgres_url: str) -> None:
    """A proposal's row locked by another session: approving it fails after lock_timeout instead of waiting."""
    journal = PostgresJournal(postgres_url, lock_timeout=0.5)
    try:
        action = ProposedAction[Wipe].create(tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Wipe(target="a"), round=1)
        record = await journal.propose(action)
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM agentkit_proposals WHERE id = %s FOR UPDATE", (record.id,))
            with pytest.raises(JournalError, match="lock timeout"):
                await asyncio.wait_for(journal.approve(record.id, "alice"), NEVER)
        assert (await journal.approve(record.id, "alice")).approved_by == "alice"
        assert (await journal.execute(record.id, wipe_tool([]))).ok
    finally:
        await journal.close()


async def test_the_journals_connections_carry_the_default_timeouts_unless_the_url_sets_its_own(
    new_postgres_url: Callable[[], str],
) -> None:
    """Every pooled connection has statement and lock timeouts; a URL's own options win over the defaults."""
    url = new_postgres_url()
    plain = PostgresJournal(url)
    own = PostgresJournal(f"{url}%20-clock_timeout%3D5s")  # the fixture's options, with one more setting
    try:
        for journal, lock in ((plain, "30s"), (own, "5s")):
            with journal._tx(write=False) as db:
                shown = db.query(
                    "SELECT current_setting('statement_timeout') AS s, current_setting('lock_timeout') AS l"
                )
            assert shown == [{"s": "1min", "l": lock}]
            assert journal.schema_version() > 0  # the fixture's search_path is kept
    finally:
        await plain.close()
        await own.close()


@pytest.mark.parametrize("option", ["connect_timeout", "statement_timeout", "lock_timeout"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), True, "10"])
def test_a_bad_timeout_is_a_usage_error_before_connecting(option: str, value: object, tmp_path: Path) -> None:
    """A timeout must be a positive number of seconds (or None); nothing is connected to."""
    with pytest.raises(UsageError, match=f"{option} must be a positive number of seconds"):
        PostgresJournal("postgresql://nobody@127.0.0.1:1/none", **{option: value})  # type: ignore[arg-type]  # deliberately bad
