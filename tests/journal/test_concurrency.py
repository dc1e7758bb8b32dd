"""Many processes, one journal: exactly-once execution, and crashes that leave nothing corrupt.

Workers are real processes (``multiprocessing``, spawn context) against real SQLite and a real
PostgreSQL server; a crash is a real SIGKILL.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentkit import (
    AfterProposal,
    LoopConfig,
    ProposedAction,
    Tier,
    Tool,
    run_tool_loop_tiered,
    tool,
)
from agentkit._tools import FunctionTool
from agentkit.journal import (
    Journal,
    JournalObserver,
    ProposalState,
    RunState,
    TransitionRefused,
    open_journal,
)
from agentkit.journal._schema import SCHEMA_VERSION, VERSION_TABLE
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Executor, Query, Target, expire_lease

SPAWN = multiprocessing.get_context("spawn")
WORKERS = 8
EXECUTED, REFUSED = 0, 3
"""Exit codes of a racing worker."""

pytestmark = pytest.mark.slow


def recording_wipe(log: str, *, hang: bool = False) -> FunctionTool[Target, str]:
    """An irreversible tool that appends one line per execution to ``log`` (O_APPEND: safe across processes)."""

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Target) -> list[str]:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()} {args.path}\n".encode())
        finally:
            os.close(fd)
        if hang:
            time.sleep(120)
        return [f"wiped {args.path}"]

    return wipe


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def wait_for(path: Path, *, lines: int = 1, process: Any = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(executions(path)) < lines:
        if process is not None and not process.is_alive():
            raise AssertionError(f"the child exited ({process.exitcode}) before writing {path.name}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not get {lines} lines within {timeout}s")
        time.sleep(0.02)


# -- processes ------------------------------------------------------------------------------------


def race_worker(url: str, id: str, log: str, barrier: Barrier) -> None:
    """Open the journal, wait for every other worker, then try to execute the proposal."""

    async def main() -> int:
        journal = open_journal(url, create=False)
        barrier.wait(timeout=120)
        try:
            await journal.execute(id, recording_wipe(log))
        except TransitionRefused:
            return REFUSED
        finally:
            await journal.close()
        return EXECUTED

    raise SystemExit(asyncio.run(main()))


def fresh_opener(paths: list[str], barrier: Barrier) -> None:
    """Open each fresh journal in ``paths`` at the same moment as the other openers; exit 1 on the first failure."""

    async def main() -> int:
        for path in paths:
            barrier.wait(timeout=120)
            try:
                journal = open_journal(path)
            except BaseException:
                barrier.abort()  # the others fail at once instead of waiting out the barrier's timeout
                raise
            await journal.close()
        return 0

    raise SystemExit(asyncio.run(main()))


def queue_worker(url: str, log: str, barrier: Barrier | None, hang: bool) -> None:
    """Open the journal, wait for the others (given a barrier), then run approved wipes until none is left."""

    async def main() -> None:
        journal = open_journal(url, create=False)
        if barrier is not None:
            barrier.wait(timeout=120)
        name = "doomed-worker" if hang else None
        wipe = recording_wipe(log, hang=hang)
        try:
            await journal.work([wipe], concurrency=2, until_empty=True, worker=name, lease=timedelta(seconds=1))
        finally:
            await journal.close()

    asyncio.run(main())


def hanging_executor(url: str, id: str, log: str) -> None:
    """Claim the proposal and hang inside the tool, to be killed there."""

    async def main() -> None:
        journal = open_journal(url, create=False)
        await journal.execute(id, recording_wipe(log, hang=True), worker="doomed-worker")

    asyncio.run(main())


class Planner(Executor[str]):
    def __init__(self) -> None:
        super().__init__("m", system="plan")


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    return [args.query, args.query]


def hanging_run(url: str, log: str) -> None:
    """Search, propose a wipe, then hang in round 3's tool, to be killed there."""
    observer = JournalObserver(open_journal(url, create=False))

    @tool(tier=Tier.READ_ONLY)
    def inspect(args: Query) -> list[str]:
        """Hangs after saying it started (once the events so far are written: the kill tests the database)."""
        assert observer.flush(timeout=60)
        with open(log, "a") as started:
            started.write("inspecting\n")
        time.sleep(120)
        return []

    caller = ScriptedCaller(
        [
            call_step(Query(query="logs"), tool="search"),
            call_step(Target(path="/srv/old"), tool="wipe"),
            call_step(Query(query="disk"), tool="inspect"),
            done_step(),
        ]
    )
    tools: list[Tool[Any, str]] = [search, recording_wipe(log), inspect]
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    asyncio.run(run_tool_loop_tiered(caller, Planner(), tools, None, config, observer=observer))


def endless_runs(url: str, log: str) -> None:
    """Run short journaled runs back to back until killed, noting each finished run."""
    observer = JournalObserver(open_journal(url, create=False))
    while True:
        caller = ScriptedCaller([call_step(Query(query="a"), tool="search"), done_step()])
        result = asyncio.run(run_tool_loop_tiered(caller, Planner(), [search], None, observer=observer))
        with open(log, "a") as done:
            done.write(f"{result.run_id}\n")


# -- fixtures -------------------------------------------------------------------------------------


async def approved_wipe(journal: Journal) -> str:
    action = ProposedAction[Target].create(
        tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Target(path="/srv/db"), round=1
    )
    record = await journal.propose(action)
    await journal.approve(record.id, "alice")
    return record.id


async def approved_wipes(journal: Journal, count: int) -> list[str]:
    ids = []
    for i in range(count):
        action = ProposedAction[Target].create(
            tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Target(path=f"/srv/{i}"), round=1, run_id=f"run-{i}"
        )
        ids.append((await journal.propose(action)).id)
        await journal.approve(ids[-1], "alice")
    return ids


def assert_sound(url: str) -> None:
    """The database passes its own consistency check (SQLite's integrity_check; PostgreSQL is crash-safe by design)."""
    if not url.startswith("postgresql"):
        with sqlite3.connect(url) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def killed(target: Callable[..., None], args: tuple[str, ...], url: str, log: Path, *, lines: int = 1) -> Journal:
    """Run ``target(*args)`` in a child process, SIGKILL it once ``log`` has ``lines`` lines, check the database
    is sound and reopen the journal."""
    child = SPAWN.Process(target=target, args=args)
    child.start()
    wait_for(log, lines=lines, process=child)
    child.kill()
    child.join(timeout=30)
    assert_sound(url)
    return open_journal(url, create=False)


# -- tests ----------------------------------------------------------------------------------------


async def test_eight_processes_racing_to_execute_run_the_tool_exactly_once(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """Eight workers released together on one approved proposal: one executes, seven are refused, one effect."""
    id = await approved_wipe(journal)
    log = tmp_path / "executions.log"
    barrier = SPAWN.Barrier(WORKERS)
    workers = [SPAWN.Process(target=race_worker, args=(journal_url, id, str(log), barrier)) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=180)
    codes = sorted(worker.exitcode for worker in workers if worker.exitcode is not None)
    assert codes == [EXECUTED] + [REFUSED] * (WORKERS - 1)
    assert len(executions(log)) == 1
    record = await journal.get(id)
    assert record.state is ProposalState.EXECUTED
    claims = [t for t in await journal.history(id) if t.to_state is ProposalState.EXECUTING]
    assert len(claims) == 1
    assert claims[0].actor == record.claimed_by


def test_twelve_processes_opening_a_fresh_sqlite_journal_at_once_all_succeed(tmp_path: Path) -> None:
    """Twelve processes create the same fresh SQLite journal at once, ten times over: every open succeeds."""
    openers = 12
    paths = [str(tmp_path / f"fresh-{i}.db") for i in range(10)]
    barrier = SPAWN.Barrier(openers)
    processes = [SPAWN.Process(target=fresh_opener, args=(paths, barrier)) for _ in range(openers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=180)
    assert [process.exitcode for process in processes] == [0] * openers


def test_twelve_processes_opening_a_fresh_postgresql_journal_at_once_all_succeed(
    new_postgres_url: Callable[[], str],
) -> None:
    """Twelve processes create the journal in the same fresh PostgreSQL schema at once, ten times over: every
    open succeeds, and each schema ends at the current version, created once."""
    openers = 12
    urls = [new_postgres_url() for _ in range(10)]
    barrier = SPAWN.Barrier(openers)
    processes = [SPAWN.Process(target=fresh_opener, args=(urls, barrier)) for _ in range(openers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=180)
    assert [process.exitcode for process in processes] == [0] * openers
    for url in urls:
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(f"SELECT version FROM {VERSION_TABLE}").fetchall() == [(SCHEMA_VERSION,)]


async def test_a_worker_killed_mid_execution_leaves_the_proposal_surfaced_never_rerun(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """SIGKILL inside the tool: the proposal stays executing, stuck() lists it, no worker may run it again, and a
    human may resolve it once its lease has run out."""
    id = await approved_wipe(journal)
    log = tmp_path / "executions.log"
    reopened = killed(hanging_executor, (journal_url, id, str(log)), journal_url, log)
    record = await reopened.get(id)
    assert (record.state, record.claimed_by) == (ProposalState.EXECUTING, "doomed-worker")
    assert [p.id for p in await reopened.stuck(older_than=timedelta(0))] == [id]
    with pytest.raises(TransitionRefused, match="it is executing"):
        await reopened.execute(id, recording_wipe(str(log)))
    assert len(executions(log)) == 1
    with pytest.raises(TransitionRefused, match="lease that lasts until"):
        await reopened.resolve(id, "carol", ProposalState.EXECUTED, "the data is gone; it ran")
    expire_lease(reopened, id)
    resolved = await reopened.resolve(id, "carol", ProposalState.EXECUTED, "the data is gone; it ran")
    assert resolved.state is ProposalState.EXECUTED
    await reopened.close()


async def test_a_run_killed_mid_round_keeps_its_completed_rounds_and_its_proposal(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """SIGKILL in round 3's tool: the journal opens, rounds 1-2 are whole, round 3 shows its call, proposal pending."""
    log = tmp_path / "progress.log"
    reopened = killed(hanging_run, (journal_url, str(log)), journal_url, log)
    [run] = await reopened.runs()
    assert (run.state, run.outcome, run.rounds) == (RunState.UNFINISHED, None, 3)
    first, second, third = await reopened.rounds(run.id)
    assert (first.tool_name, first.executed, first.batch_size) == ("search", True, 2)
    assert (second.tool_name, second.proposed, second.executed) == ("wipe", True, False)
    assert (third.tool_name, third.executed, third.args_json) == ("inspect", False, '{"query":"disk"}')
    [pending] = await reopened.pending()
    assert (pending.tool_name, pending.run_id, pending.round) == ("wipe", run.id, 2)
    await reopened.approve(pending.id, "alice")  # the journal still takes writes
    assert executions(log) == ["inspecting"]  # the proposed wipe never ran
    await reopened.close()


async def test_a_process_killed_while_writing_runs_loses_at_most_the_run_in_flight(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """SIGKILL at an arbitrary moment of back-to-back runs: every finished run is whole, at most one is not."""
    log = tmp_path / "finished.log"
    reopened = killed(endless_runs, (journal_url, str(log)), journal_url, log, lines=5)
    runs = {run.id: run for run in await reopened.runs(limit=10_000)}
    finished = executions(log)
    for run_id in finished:
        assert runs[run_id].state is RunState.FINISHED
        assert [r.round for r in await reopened.rounds(run_id)] == [1, 2]
    # Beyond the logged runs, only the one in flight when the kill came (finished or not) may exist.
    others = [run for run in runs.values() if run.id not in finished]
    assert len(others) <= 1
    for run in others:
        rounds = [r.round for r in await reopened.rounds(run.id)]
        assert rounds == list(range(1, len(rounds) + 1))
    await reopened.close()


async def test_four_worker_processes_drain_the_queue_each_call_exactly_once(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """Four processes working one queue of 120 approved calls: every call runs once (the tool's own log says so)."""
    ids = await approved_wipes(journal, 120)
    log = tmp_path / "executions.log"
    barrier = SPAWN.Barrier(4)
    workers = [SPAWN.Process(target=queue_worker, args=(journal_url, str(log), barrier, False)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in workers] == [0] * 4
    paths = [line.split()[1] for line in executions(log)]
    assert sorted(paths) == sorted(f"/srv/{i}" for i in range(120))
    assert {(await journal.get(id)).state for id in ids} == {ProposalState.EXECUTED}


async def test_a_worker_killed_mid_run_leaves_its_claim_stuck_within_the_lease_and_nothing_runs_twice(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    """SIGKILL one of four workers in its tool: the rest finish the queue; its claim is stuck once the lease ends."""
    ids = await approved_wipes(journal, 40)
    log = tmp_path / "executions.log"
    # The doomed worker starts first, so it surely holds a claim (hanging in its tool) when the others start.
    doomed = SPAWN.Process(target=queue_worker, args=(journal_url, str(log), None, True))
    doomed.start()
    wait_for(log, lines=1, process=doomed)
    barrier = SPAWN.Barrier(3)
    others = [SPAWN.Process(target=queue_worker, args=(journal_url, str(log), barrier, False)) for _ in range(3)]
    for worker in others:
        worker.start()
    wait_for(log, lines=5)
    doomed.kill()
    doomed.join(timeout=30)
    for worker in others:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in others] == [0] * 3
    assert_sound(journal_url)
    paths = [line.split()[1] for line in executions(log)]
    assert len(paths) == len(set(paths))  # nothing ran twice
    # The doomed worker (two calls at once) died in its tool, holding one or two claims.
    orphans = await journal.proposals(state=ProposalState.EXECUTING)
    assert 1 <= len(orphans) <= 2
    assert {o.claimed_by for o in orphans} == {"doomed-worker"}
    executed = await journal.proposals(state=ProposalState.EXECUTED)
    assert len(executed) + len(orphans) == len(ids)
    assert {e.args["path"] for e in executed} <= set(paths)
    # Once the leases have run out, stuck() lists the orphans with no threshold given.
    lease_end = max(o.lease_until for o in orphans if o.lease_until is not None)
    await asyncio.sleep(max(0.0, (lease_end - datetime.now(UTC)).total_seconds()) + 0.01)
    assert {p.id for p in await journal.stuck()} == {o.id for o in orphans}
