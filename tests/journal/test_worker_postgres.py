"""Workers on a real PostgreSQL: the pool, explicit isolation, killed connections, and the claim's plan.

Each test gets a fresh schema (``postgres_url``); connections are tagged with an ``application_name``
so a test can kill exactly the journal's own backends, as a failover or an operator would.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from agentkit import ProposedAction, Tier, tool
from agentkit.journal import (
    NothingRan,
    OutcomeNotRecorded,
    PostgresJournal,
    ProposalState,
    TransitionRefused,
)
from agentkit.journal._sql import (
    claim_left_statement,
    claim_next_statement,
    claim_statement,
    lock_proposal_statement,
)
from tests.support import Wipe


def tagged(url: str, name: str, *, isolation: str | None = None) -> str:
    """``url`` whose connections carry ``application_name=name`` (and a default isolation level, if given)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    options = str(info.get("options", ""))
    if isolation is not None:
        options += " -c default_transaction_isolation=" + isolation.replace(" ", "\\ ")
    return psycopg.conninfo.make_conninfo(url, application_name=name, options=options.strip())


def kill(url: str, name: str) -> int:
    """Terminate every backend of connections named ``name``; how many there were."""
    with psycopg.connect(admin_url(url), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return len(rows)


def admin_url(url: str) -> str:
    """The server's ``postgres`` database: reachable while the test database refuses connections."""
    return psycopg.conninfo.make_conninfo(url, dbname="postgres", options="")


def set_connections(url: str, *, allowed: bool) -> None:
    """Let connections into the test database, or refuse them all (a database that is down, seen from a client)."""
    target = str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
    with psycopg.connect(admin_url(url), autocommit=True) as c:
        c.execute(f'ALTER DATABASE "{target}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')


@pytest.fixture
def own_database_url(postgres_url: str) -> Iterator[str]:
    """A URL on a database made for this test alone (dropped afterwards): a test that makes its database
    refuse connections must not take the shared one down for the tests running beside it."""
    name = f"agentkit_down_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url(postgres_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(postgres_url, dbname=name, options="")
    finally:
        with psycopg.connect(admin_url(postgres_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def app_name() -> str:
    return f"agentkit-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pg(postgres_url: str, app_name: str) -> Iterator[PostgresJournal]:
    journal = PostgresJournal(tagged(postgres_url, app_name))
    yield journal
    asyncio.run(journal.close())


async def approved(journal: PostgresJournal, target: str) -> str:
    action = ProposedAction[Wipe].create(
        tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Wipe(target=target), round=1, run_id=target
    )
    id = (await journal.propose(action)).id
    await journal.approve(id, "alice")
    return id


def counting_wipe(ran: list[str]) -> Any:
    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        return [args.target]

    return wipe


# -- connections killed: what ran is never ambiguous -------------------------------------------------


async def test_connection_killed_while_the_tool_runs_the_outcome_is_recorded_on_a_new_one(
    postgres_url: str, app_name: str
) -> None:
    """The backend dies mid-tool: the outcome is written on a fresh connection, the tool ran once."""
    journal = PostgresJournal(tagged(postgres_url, app_name))
    id = await approved(journal, "db")
    ran: list[str] = []

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        assert kill(postgres_url, app_name) >= 1
        return ["wiped"]

    execution = await journal.execute(id, wipe)
    assert (execution.proposal.state, execution.batch, ran) == (ProposalState.EXECUTED, ("wiped",), ["db"])
    history = [(t.from_state, t.to_state) for t in await journal.history(id)]
    assert history.count((ProposalState.APPROVED, ProposalState.EXECUTING)) == 1
    await journal.close()


async def test_the_outcome_is_recorded_once_the_database_is_back(own_database_url: str, app_name: str) -> None:
    """The database refuses connections for a while after the tool ran: a retry records the outcome when it is back."""
    journal = PostgresJournal(tagged(own_database_url, app_name))
    id = await approved(journal, "db")
    ran: list[str] = []
    back = threading.Timer(0.5, set_connections, (own_database_url,), {"allowed": True})

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        set_connections(own_database_url, allowed=False)
        kill(own_database_url, app_name)
        back.start()
        return ["wiped"]

    try:
        execution = await journal.execute(id, wipe)
    finally:
        back.cancel()
        set_connections(own_database_url, allowed=True)
    assert (execution.proposal.state, ran) == (ProposalState.EXECUTED, ["db"])
    await journal.close()


@pytest.mark.slow
async def test_a_database_gone_longer_than_the_retries_raises_outcome_not_recorded(
    own_database_url: str, app_name: str
) -> None:
    """Every retry fails: ``OutcomeNotRecorded``, still executing, stuck once the lease ends, never re-run."""
    journal = PostgresJournal(tagged(own_database_url, app_name))
    journal._outcome_attempts = 3
    id = await approved(journal, "db")
    ran: list[str] = []

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        set_connections(own_database_url, allowed=False)
        kill(own_database_url, app_name)
        return ["wiped"]

    try:
        with pytest.raises(OutcomeNotRecorded, match="do not run it again") as lost:
            await journal.execute(id, wipe, lease=timedelta(seconds=0.5))
    finally:
        set_connections(own_database_url, allowed=True)
    assert (lost.value.id, lost.value.outcome, lost.value.error) == (id, "executed", None)
    # The outage's pool may still be backing off its reconnects; a second process's view is a fresh journal.
    await journal.close()
    journal = PostgresJournal(tagged(own_database_url, app_name))
    record = await journal.get(id)
    assert record.state is ProposalState.EXECUTING
    for _ in range(200):
        if await journal.stuck():
            break
        await asyncio.sleep(0.05)
    assert [p.id for p in await journal.stuck()] == [id]
    with pytest.raises(TransitionRefused):
        await journal.execute(id, wipe)
    assert ran == ["db"]
    await journal.close()


async def test_a_connection_lost_before_the_claim_raises_nothing_ran(pg: PostgresJournal, postgres_url: str) -> None:
    """The pooled connection died while idle: ``NothingRan``, the proposal still approved, the tool never called."""
    id = await approved(pg, "db")
    assert kill(postgres_url, pg_app(pg)) >= 1
    ran: list[str] = []
    with pytest.raises(NothingRan, match="the tool was not run"):
        await pg.execute(id, counting_wipe(ran))
    assert ran == []
    assert (await pg.get(id)).state is ProposalState.APPROVED
    execution = await pg.execute(id, counting_wipe(ran))  # the next try takes a fresh connection
    assert (execution.proposal.state, ran) == (ProposalState.EXECUTED, ["db"])


def pg_app(journal: PostgresJournal) -> str:
    name = psycopg.conninfo.conninfo_to_dict(journal._pg._dsn).get("application_name")
    assert isinstance(name, str)
    return name


async def test_a_worker_rides_out_killed_connections(pg: PostgresJournal, postgres_url: str) -> None:
    """Backends killed between claims: the worker reports the failed claims, retries, and runs every call once."""
    ids = [await approved(pg, f"t{i}") for i in range(6)]
    ran: list[str] = []

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        kill(postgres_url, pg_app(pg))
        return []

    report = await pg.work([wipe], until_empty=True)
    assert sorted(ran) == sorted(f"t{i}" for i in range(6))
    assert report.executed == 6
    assert {(await pg.get(id)).state for id in ids} == {ProposalState.EXECUTED}


# -- isolation: set on every connection, whatever the server's default --------------------------------


@pytest.mark.parametrize("default", ["read committed", "repeatable read", "serializable"])
async def test_claims_run_read_committed_whatever_the_database_default(
    postgres_url: str, app_name: str, default: str
) -> None:
    """Under each default level: the journal's transactions are READ COMMITTED, lost races are TransitionRefused."""
    journal = PostgresJournal(tagged(postgres_url, app_name, isolation=default), pool_size=8)
    with journal._tx(write=False) as db:
        assert db.query("SHOW default_transaction_isolation")[0]["default_transaction_isolation"] == default
        assert db.query("SHOW transaction_isolation")[0]["transaction_isolation"] == "read committed"
    id = await approved(journal, "raced")
    ran: list[str] = []
    results = await asyncio.gather(*(journal.execute(id, counting_wipe(ran)) for _ in range(8)), return_exceptions=True)
    assert ran == ["raced"]
    assert sorted(type(r).__name__ for r in results) == ["Execution"] + ["TransitionRefused"] * 7
    for i in range(40):
        await approved(journal, f"q{i}")
    report = await journal.work([counting_wipe(ran)], concurrency=8, until_empty=True)
    assert (report.executed, report.claim_failures, len(ran)) == (40, 0, 41)
    assert await journal.proposals(state=ProposalState.EXECUTING) == []
    await journal.close()


# -- the pool ---------------------------------------------------------------------------------------


async def test_a_journal_never_opens_more_connections_than_its_pool_allows(postgres_url: str, app_name: str) -> None:
    """Eight concurrent calls on ``pool_size=2``: at most two pooled connections, plus the worker's LISTEN."""
    journal = PostgresJournal(tagged(postgres_url, app_name), pool_size=2)
    for i in range(16):
        await approved(journal, f"t{i}")
    seen: list[int] = []

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def wipe(args: Wipe) -> list[str]:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            count = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app_name,))
            seen.append(int(count.fetchone()[0]))  # type: ignore[index]  # count(*) always returns a row
        await asyncio.sleep(0.01)
        return []

    report = await journal.work([wipe], concurrency=8, until_empty=True)
    assert report.executed == 16
    assert max(seen) <= 2 + 1
    await journal.close()


# -- the plan -----------------------------------------------------------------------------------------


def explain(conn: psycopg.Connection[Any], sql: str, params: list[str], mode: str) -> str:
    """The plan of ``sql`` as a prepared statement under ``plan_cache_mode = mode``."""
    numbered = iter(range(1, len(params) + 1))
    prepared = re.sub(r"\?", lambda _: f"${next(numbered)}", sql)
    conn.execute(f"SET plan_cache_mode = {mode}")
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE claim AS {prepared}")
    values = ", ".join(f"'{p}'" for p in params)
    return "\n".join(str(row[0]) for row in conn.execute(f"EXPLAIN EXECUTE claim({values})").fetchall())


@pytest.mark.parametrize("stats", ["stale", "fresh"])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_claim_finds_its_row_by_primary_key_whatever_the_statistics(
    pg: PostgresJournal, postgres_url: str, stats: str, mode: str
) -> None:
    """Statistics that say no proposal is approved (stale) or all are: custom and generic plans update by key."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agentkit_proposals (id, state, tool_name, tier, args, digest, rationale, round, run_id, "
            "proposed_at) SELECT 'p' || g, %s, 'wipe', 3, '{}', 'd' || g, '', 1, 'r' || g, now() "
            "FROM generate_series(1, 5000) g",
            ("executed" if stats == "stale" else "approved",),
        )
        conn.execute("ANALYZE agentkit_proposals")
        conn.execute("UPDATE agentkit_proposals SET state = 'approved'")
        at = "2026-01-01T00:00:00Z"
        lock = explain(conn, lock_proposal_statement("postgresql"), ["p77"], mode)
        update = explain(conn, claim_statement(), ["w", at, "t", at, "p77"], mode)
        claim = ["w", at, "t", at, "wipe"]
        following = explain(conn, claim_next_statement("postgresql", tools=1), claim, mode)
        retried = explain(conn, claim_left_statement("postgresql", tools=1), [*claim, at], mode)
    by_key = re.compile(r"Index Scan using agentkit_proposals_pkey on agentkit_proposals +\(")
    for plan in (lock, update):
        assert by_key.search(plan), plan
        assert "agentkit_proposals_state" not in plan, plan
    # The next claim picks its row in a subquery; the update itself then reaches that row by key.
    for statement, plan in ((claim_next_statement, following), (claim_left_statement, retried)):
        assert "FOR UPDATE SKIP LOCKED" in statement("postgresql", tools=1)
        assert by_key.search(plan), plan
        assert re.search(r"Index Cond: \(id = \$\d+\)", plan), plan
    # The next claim reads the approved rows nobody left in the claim's order: however many rows are left, none is
    # read, and nothing is sorted.
    assert "Index Scan using agentkit_proposals_claimable" in following, following
    assert "Sort" not in following, following
