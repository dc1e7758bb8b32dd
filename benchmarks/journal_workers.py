"""Journal workers at scale: ``python -m benchmarks.journal_workers [--postgres DSN] [--proposals N]``.

Three measurements, on SQLite and (given a DSN, or ``$AGENTKIT_TEST_POSTGRES_DSN``) PostgreSQL:

``scale``: N approved proposals drained by 1, 2, 4 and 8 worker processes, each running
``journal.work(until_empty=True)``. Throughput is N over the wall time from the moment every
worker is ready to the last one's exit. Claim attempts, empty claims and failed claims come from
each worker's ``WorkReport``; exactly-once is checked against an append-only log the tool writes
(one line per call, ``O_APPEND``) and against the journal (every proposal ``executed``, one claim
transition each).

``latency``: one worker waits; proposals are approved one at a time, and the time from the
approval's commit to the tool's call is measured: PostgreSQL woken by LISTEN/NOTIFY, PostgreSQL
polling every 0.5 s (the same worker with notifications replaced by a poll), SQLite polling
every 0.5 s (its default).

``kill``: four workers drain N proposals (the tool logs its call, then takes 5 ms); one is SIGKILLed
a quarter of the way in, just after its tool logged a call. Nothing may run twice; the killed
worker's claim must show in ``stuck()`` (default threshold, ten minutes) within its lease (5 s).

Results go to ``benchmarks/results/journal-workers-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from agentkit import ProposedAction, Tier, tool
from agentkit._tools import FunctionTool
from agentkit.journal import Journal, PostgresJournal, ProposalState, open_journal
from agentkit.journal._sql import insert_proposal, log_transition, now
from agentkit.journal._worker import Polling

SPAWN = multiprocessing.get_context("spawn")
RESULTS = Path(__file__).parent / "results"
LEASE = timedelta(seconds=5)


class Job(BaseModel):
    n: int


def logging_tool(log: str, *, delay: float = 0.0) -> FunctionTool[Job, int]:
    """An irreversible tool that appends ``pid n`` to ``log`` (one ``write`` with ``O_APPEND``: never interleaved)."""

    @tool(tier=Tier.IRREVERSIBLE, name="job")
    def job(args: Job) -> list[int]:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{os.getpid()} {args.n} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)
        if delay:
            time.sleep(delay)
        return [args.n]

    return job


# -- databases ------------------------------------------------------------------------------------


@contextmanager
def fresh(backend: str, dsn: str | None, folder: Path) -> Iterator[str]:
    """A URL for an empty journal: a new SQLite file, or a new PostgreSQL schema (dropped afterwards)."""
    if backend == "sqlite":
        path = folder / f"journal-{uuid.uuid4().hex[:8]}.db"
        yield str(path)
        return
    import psycopg

    assert dsn is not None
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def fill(url: str, count: int) -> None:
    """``count`` approved proposals, written in one transaction (what 2,000 human approvals would leave)."""

    async def go() -> None:
        journal = open_journal(url)
        at = now()
        with journal._tx(write=True) as db:
            for n in range(count):
                action = ProposedAction[Job].create(
                    tool_name="job", tier=Tier.IRREVERSIBLE, args=Job(n=n), round=1, run_id=f"bench-{n}"
                )
                id = insert_proposal(db, action, "bench", at)
                db.execute(
                    "UPDATE agentkit_proposals SET state = 'approved', approved_by = 'bench', approved_at = ? "
                    "WHERE id = ?",
                    (db.to_db_time(at), id),
                )
                log_transition(db, id, ProposalState.PENDING, ProposalState.APPROVED, "bench", at, "")
        await journal.close()

    asyncio.run(go())


def check_exactly_once(url: str, log: Path, count: int) -> dict[str, Any]:
    """The tool's log and the journal agree: every proposal ran once and is executed, with one claim."""
    lines = log.read_text().splitlines() if log.exists() else []
    ran = [int(line.split()[1]) for line in lines]

    async def journal_view() -> tuple[int, int]:
        journal = open_journal(url, create=False)
        with journal._tx(write=False) as db:
            executed = db.query("SELECT count(*) AS n FROM agentkit_proposals WHERE state = 'executed'")[0]["n"]
            claims = db.query("SELECT count(*) AS n FROM agentkit_transitions WHERE to_state = 'executing'")[0]["n"]
        await journal.close()
        return int(executed), int(claims)

    executed, claims = asyncio.run(journal_view())
    return {
        "tool_calls": len(ran),
        "distinct": len(set(ran)),
        "twice": len(ran) - len(set(ran)),
        "missing": count - len(set(ran)),
        "executed": executed,
        "claims": claims,
        "exactly_once": len(ran) == len(set(ran)) == count == executed == claims,
    }


# -- scale ----------------------------------------------------------------------------------------


def server_cpu_s() -> float:
    """CPU seconds used so far by the local PostgreSQL server (its processes and the backends that exited; /proc)."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
            if name.startswith("postgres"):
                # Own time, plus the time of the exited backends the postmaster reaped.
                total += sum(int(f) for f in fields[11:15])
    return total / tick


def scale_worker(url: str, log: str, ready: Any, out: Any) -> None:
    async def main() -> None:
        journal = open_journal(url, create=False)
        ready.wait()
        report = await journal.work([logging_tool(log)], until_empty=True)
        await journal.close()
        out.put(
            {
                "executed": report.executed,
                "attempts": report.claim_attempts,
                "empty": report.empty_claims,
                "failures": report.claim_failures,
                "ended": time.time(),
                "cpu_s": time.process_time(),
            }
        )

    asyncio.run(main())


def scale(backend: str, dsn: str | None, folder: Path, count: int, workers: int) -> dict[str, Any]:
    with fresh(backend, dsn, folder) as url:
        fill(url, count)
        log = folder / f"scale-{uuid.uuid4().hex[:8]}.log"
        ready, out = SPAWN.Barrier(workers + 1), SPAWN.Queue()
        processes = [SPAWN.Process(target=scale_worker, args=(url, str(log), ready, out)) for _ in range(workers)]
        for process in processes:
            process.start()
        ready.wait()
        started, server_before = time.time(), server_cpu_s()
        reports = [out.get(timeout=600) for _ in processes]
        server_used = server_cpu_s() - server_before
        for process in processes:
            process.join(timeout=60)
        wall = max(r["ended"] for r in reports) - started
        attempts = sum(r["attempts"] for r in reports)
        empty = sum(r["empty"] for r in reports)
        failures = sum(r["failures"] for r in reports)
        # Each worker ends on exactly one empty claim (the queue is drained); any other empty or failed claim is waste.
        wasted = empty - workers + failures
        return {
            "backend": backend,
            "workers": workers,
            "proposals": count,
            "wall_s": round(wall, 3),
            "per_s": round(count / wall, 1),
            "claim_attempts": attempts,
            "empty_claims": empty,
            "failed_claims": failures,
            "refusal_pct": round(100 * wasted / attempts, 2),
            "worker_cpu_ms_per_call": round(1000 * sum(r["cpu_s"] for r in reports) / count, 2),
            "server_cpu_ms_per_call": round(1000 * server_used / count, 2) if backend == "postgres" else None,
            "per_worker": sorted(r["executed"] for r in reports),
            **check_exactly_once(url, log, count),
        }


# -- latency --------------------------------------------------------------------------------------


class PollingPostgres(PostgresJournal):
    """PostgreSQL with its notifications replaced by a poll: what waiting costs without LISTEN."""

    def _wakeups(self, poll: float | None) -> Any:
        return Polling(0.5 if poll is None else poll)


def latency_worker(url: str, log: str, mode: str, ready: Any) -> None:
    async def main() -> None:
        polling_pg = mode == "poll" and url.startswith("postgresql")
        journal: Journal = PollingPostgres(url) if polling_pg else open_journal(url, create=False)
        ready.set()
        with suppress(asyncio.CancelledError):
            await journal.work([logging_tool(log)], poll=0.5 if mode == "poll" else None)

    asyncio.run(main())


def latency(backend: str, dsn: str | None, folder: Path, mode: str, samples: int) -> dict[str, Any]:
    with fresh(backend, dsn, folder) as url:
        log = folder / f"latency-{uuid.uuid4().hex[:8]}.log"
        journal = open_journal(url)
        ready = SPAWN.Event()
        process = SPAWN.Process(target=latency_worker, args=(url, str(log), mode, ready))
        process.start()
        ready.wait(60)
        time.sleep(1.0)  # the worker is past its first (empty) claim and waiting
        delays: list[float] = []

        async def one(n: int) -> None:
            action = ProposedAction[Job].create(
                tool_name="job", tier=Tier.IRREVERSIBLE, args=Job(n=n), round=1, run_id=f"lat-{n}"
            )
            id = (await journal.propose(action)).id
            await journal.approve(id, "bench")
            approved_at = time.time()
            while True:
                assert process.is_alive(), "the latency worker died"
                lines = log.read_text().splitlines() if log.exists() else []
                if len(lines) > n:
                    delays.append(float(lines[n].split()[2]) - approved_at)
                    return
                await asyncio.sleep(0.002)

        async def run() -> None:
            for n in range(samples):
                await one(n)
                await asyncio.sleep(0.13 + (n % 7) * 0.05)  # approvals at uneven moments of the poll cycle
            await journal.close()

        asyncio.run(run())
        process.kill()
        process.join()
        delays_ms = sorted(1000 * d for d in delays)
        return {
            "backend": backend,
            "wake": {"listen": "LISTEN/NOTIFY", "poll": "poll every 0.5 s"}[mode],
            "samples": len(delays_ms),
            "median_ms": round(statistics.median(delays_ms), 1),
            "p95_ms": round(delays_ms[int(0.95 * (len(delays_ms) - 1))], 1),
            "max_ms": round(delays_ms[-1], 1),
        }


# -- kill -----------------------------------------------------------------------------------------


def kill_worker(url: str, log: str, name: str, ready: Any) -> None:
    async def main() -> None:
        journal = open_journal(url, create=False)
        ready.wait()
        await journal.work([logging_tool(log, delay=0.005)], until_empty=True, worker=name, lease=LEASE)
        await journal.close()

    asyncio.run(main())


def kill(backend: str, dsn: str | None, folder: Path, count: int) -> dict[str, Any]:
    with fresh(backend, dsn, folder) as url:
        fill(url, count)
        log = folder / f"kill-{uuid.uuid4().hex[:8]}.log"
        ready = SPAWN.Barrier(5)
        names = [f"worker-{i}" for i in range(4)]
        processes = [SPAWN.Process(target=kill_worker, args=(url, str(log), name, ready)) for name in names]
        for process in processes:
            process.start()
        ready.wait()
        victim = processes[0].pid
        assert victim is not None
        # A quarter of the way in, kill the first worker just after its tool logged a call (inside the call).
        while True:
            lines = log.read_text().splitlines() if log.exists() else []
            if len(lines) >= count // 4 and lines[-1].startswith(f"{victim} "):
                break
            time.sleep(0.001)
        os.kill(victim, signal.SIGKILL)
        killed_at = datetime.now(UTC)

        async def watch() -> float | None:
            """Look at stuck() (default threshold) while the others work on: when does the dead claim show?"""
            journal = open_journal(url, create=False)
            seen_after = None
            while seen_after is None:
                if any(p.claimed_by == names[0] for p in await journal.stuck()):
                    seen_after = (datetime.now(UTC) - killed_at).total_seconds()
                elif not any(p.is_alive() for p in processes[1:]):
                    executing = await journal.proposals(state=ProposalState.EXECUTING)
                    if not any(p.claimed_by == names[0] for p in executing):
                        break  # the worker died between claims: it held nothing
                await asyncio.sleep(0.02)
            await journal.close()
            return seen_after

        async def orphans() -> tuple[list[str], int]:
            journal = open_journal(url, create=False)
            held = [p.id for p in await journal.proposals(state=ProposalState.EXECUTING)]
            executed = len(await journal.proposals(state=ProposalState.EXECUTED))
            await journal.close()
            return held, executed

        stuck_after = asyncio.run(watch())
        for process in processes:
            process.join(timeout=600)
        held, executed = asyncio.run(orphans())
        ran = [int(line.split()[1]) for line in log.read_text().splitlines()]
        return {
            "backend": backend,
            "proposals": count,
            "tool_calls": len(ran),
            "twice": len(ran) - len(set(ran)),
            "orphans": len(held),
            "stuck_listed_after_kill_s": None if stuck_after is None else round(stuck_after, 2),
            "lease_s": LEASE.total_seconds(),
            "executed": executed,
            "neither_executed_nor_orphaned": count - executed - len(held),
        }


# -- report ---------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    lines = [f"# Journal workers, {results['date']}", "", results["machine"], "", "## Scale", ""]
    lines += [
        "| backend | workers | proposals | wall s | per s | claim attempts | refusals % | worker CPU ms/call "
        "| server CPU ms/call | exactly once | per worker |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["scale"]:
        lines.append(
            f"| {r['backend']} | {r['workers']} | {r['proposals']} | {r['wall_s']} | {r['per_s']} | "
            f"{r['claim_attempts']} | {r['refusal_pct']} | {r.get('worker_cpu_ms_per_call', '')} | "
            f"{r.get('server_cpu_ms_per_call') or '-'} | {r['exactly_once']} | {r['per_worker']} |"
        )
    lines += [
        "",
        "## Approval-to-execution latency",
        "",
        "| backend | wake-up | samples | median ms | p95 ms | max ms |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for r in results["latency"]:
        lines.append(
            f"| {r['backend']} | {r['wake']} | {r['samples']} | {r['median_ms']} | {r['p95_ms']} | {r['max_ms']} |"
        )
    lines += ["", "## SIGKILL one of four workers", ""]
    lines += ["| backend | proposals | tool calls | run twice | orphans | stuck() lists them after (s) | lease s |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in results["kill"]:
        lines.append(
            f"| {r['backend']} | {r['proposals']} | {r['tool_calls']} | {r['twice']} | {r['orphans']} | "
            f"{r['stuck_listed_after_kill_s']} | {r['lease_s']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=os.environ.get("AGENTKIT_TEST_POSTGRES_DSN"), metavar="DSN")
    parser.add_argument("--proposals", type=int, default=2000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--only", choices=["scale", "latency", "kill"], action="append")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    backends = ["sqlite"] + (["postgres"] if args.postgres else [])
    only = set(args.only or ["scale", "latency", "kill"])
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPUs (shared), load average {os.getloadavg()[0]:.1f} at start; "
        f"Python {sys.version.split()[0]}",
        "scale": [],
        "latency": [],
        "kill": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for backend in backends:
            if "scale" in only:
                for workers in (int(w) for w in args.workers.split(",")):
                    row = scale(backend, args.postgres, folder, args.proposals, workers)
                    print(json.dumps(row), flush=True)
                    results["scale"].append(row)
            if "latency" in only:
                modes = ["listen", "poll"] if backend == "postgres" else ["poll"]
                for mode in modes:
                    row = latency(backend, args.postgres, folder, mode, args.latency_samples)
                    print(json.dumps(row), flush=True)
                    results["latency"].append(row)
            if "kill" in only:
                row = kill(backend, args.postgres, folder, args.proposals)
                print(json.dumps(row), flush=True)
                results["kill"].append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"journal-workers-{results['date']}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    ok = all(r["exactly_once"] for r in results["scale"]) and all(r["twice"] == 0 for r in results["kill"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
