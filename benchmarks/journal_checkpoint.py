"""What checkpointing into a SQLite journal costs per round (``python -m benchmarks.journal_checkpoint``).

The benchmark's retrieval run (3 searches, then done: 4 rounds, every model call a real HTTP round
trip to ``benchmarks/server.py`` in its own process) as a tiered run, five ways, one after another
in each repeat (order shuffled): without a journal (the baseline); with an observer that takes each
round's state and writes nothing (what being observed costs); with a ``JournalObserver`` on a fresh
SQLite file that records the events only (its ``on_checkpoint`` switched off); with the observer as
it ships, which also writes the run's state at each round's end; and the floor of any journal that
resumes a crashed run from its last completed round (``SQLFloor``): that bare observer committing
each round's new state entries as one row of SQLite (WAL, ``synchronous=NORMAL``, as the journal
writes a run's record) before the next round begins, the run's row with the first, and its ending
with the last, and nothing else: no events, no checks, no leases. Per round: wall time and the
client process's CPU time (the journal's writer thread included), each the median over ``--runs``
runs; the ratios are medians over the repeats of the per-repeat ratios to the baseline. Prints one
JSON object; ``--out`` also writes it and a Markdown table there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentkit import LoopConfig, Observer, RunCheckpoint, StopReason, ToolLoopResult, run_tool_loop_tiered
from agentkit.events import RunFinished
from agentkit.journal import JournalObserver, SQLiteJournal
from agentkit.providers.openai import OpenAICaller
from benchmarks import harness, scenario
from benchmarks.contenders.agentkit_loop import Retriever, search

CONFIG = LoopConfig(max_rounds=6)
VARIANTS = ("no-journal", "observer-only", "journal-events", "journal-checkpoints", "sql-floor")


class EventsOnly(JournalObserver):
    """The journal without checkpoints: the same observer with ``on_checkpoint`` left at the base's no-op."""

    on_checkpoint = Observer.on_checkpoint


class StatesTaken(Observer):
    """An observer that takes the run's state at each round's end, as a journal does, and writes nothing."""

    sees_calls = False

    def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        pass


class SQLFloor(StatesTaken):
    """The least a journal that resumes a crashed run from its last completed round can write.

    Each round's new state entries are committed as one row before the next round begins (one
    autocommitted statement), the run's row (its state's header) in one transaction with its first
    round, its ending with its last entries; no events, checks, leases or errors handled.
    """

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, head TEXT NOT NULL, outcome TEXT)")
        self.db.execute(
            "CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, "
            "PRIMARY KEY (run_id, seq))"
        )
        self.stored: dict[str, int] = {}

    def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        if not checkpoint.entries:
            return  # nothing done yet: the run's row goes with its first round
        stored = self.stored.get(run_id)
        if stored is None:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO runs (id, head) VALUES (?, ?)", (run_id, checkpoint.model_dump_json(exclude={"entries"}))
            )
            self.append(run_id, checkpoint, 0)
            self.db.execute("COMMIT")
        else:
            self.append(run_id, checkpoint, stored)

    def on_run_end(self, event: RunFinished) -> None:
        result = event.result
        assert isinstance(result, ToolLoopResult)
        self.db.execute("BEGIN")
        self.append(event.run_id, result.checkpoint, self.stored.pop(event.run_id, 0))
        self.db.execute("UPDATE runs SET outcome = ? WHERE id = ?", (result.outcome.value, event.run_id))
        self.db.execute("COMMIT")

    def append(self, run_id: str, state: RunCheckpoint, stored: int) -> None:
        new = state.entries[stored:]
        rows = ", ".join(["(?, ?, ?)"] * len(new))
        values = [v for seq, e in enumerate(new, start=stored) for v in (run_id, seq, e.model_dump_json())]
        self.db.execute(f"INSERT INTO entries (run_id, seq, body) VALUES {rows}", values)
        self.stored[run_id] = len(state.entries)


def observer_for(variant: str, directory: Path) -> Observer | None:
    """A fresh observer (and its own fresh database) for one sample of `variant`."""
    file = directory / f"{variant}-{time.time_ns()}.db"
    match variant:
        case "no-journal":
            return None
        case "observer-only":
            return StatesTaken()
        case "journal-events":
            return EventsOnly(SQLiteJournal(file))
        case "journal-checkpoints":
            return JournalObserver(SQLiteJournal(file))
        case "sql-floor":
            return SQLFloor(file)
    raise ValueError(f"no variant {variant!r}")


async def sample(caller: OpenAICaller, variant: str, runs: int, directory: Path) -> tuple[float, float]:
    """Median wall and CPU seconds per round over ``runs`` runs of one variant (after one untimed run)."""
    # One observer for the sample's runs, as a service keeps one for all of its runs.
    observer = observer_for(variant, directory)
    walls, cpus = [], []
    for index in range(runs + 1):
        started, cpu = time.perf_counter(), time.process_time()
        result = await run_tool_loop_tiered(
            caller, Retriever(), search, scenario.question(f"{index:016x}"), CONFIG, observer=observer
        )
        wall, used = time.perf_counter() - started, time.process_time() - cpu
        if result.stop_reason is not StopReason.EXECUTOR_DONE or result.rounds != scenario.ROUNDS:
            raise scenario.WrongResult(f"run ended {result.stop_reason} after {result.rounds} rounds: {result.error}")
        if index:  # the first run warms up
            walls.append(wall / result.rounds)
            cpus.append(used / result.rounds)
    if isinstance(observer, JournalObserver):
        observer.close()
        await observer.journal.close()
    if isinstance(observer, SQLFloor):
        observer.db.close()
    return statistics.median(walls), statistics.median(cpus)


async def measure(repeats: int, runs: int) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in VARIANTS}
    with harness.serving() as (base_url, _), tempfile.TemporaryDirectory() as tmp:
        caller = OpenAICaller(base_url=base_url, api_key="bench")
        try:
            for _ in range(repeats):
                for variant in random.sample(VARIANTS, len(VARIANTS)):
                    wall, cpu = await sample(caller, variant, runs, Path(tmp))
                    figures[variant]["wall"].append(wall)
                    figures[variant]["cpu"].append(cpu)
        finally:
            await caller.aclose()
    base = figures["no-journal"]
    report: dict[str, Any] = {"repeats": repeats, "runs": runs, "rounds_per_run": scenario.ROUNDS, "variants": {}}
    for variant in VARIANTS:
        mine = figures[variant]
        report["variants"][variant] = {
            "wall_ms_per_round": round(statistics.median(mine["wall"]) * 1000, 3),
            "cpu_ms_per_round": round(statistics.median(mine["cpu"]) * 1000, 3),
            "wall_x": round(statistics.median(m / b for m, b in zip(mine["wall"], base["wall"], strict=True)), 3),
            "cpu_x": round(statistics.median(m / b for m, b in zip(mine["cpu"], base["cpu"], strict=True)), 3),
        }
    # The machine with its processor: the ratios differ from one processor to another.
    report |= {"date": time.strftime("%Y-%m-%d"), "machine": harness.environment()["machine"]}
    report["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Journal checkpoint cost: {report['repeats']} repeats x {report['runs']} runs of "
        f"{report['rounds_per_run']} rounds, SQLite journal, model over loopback HTTP (benchmarks/server.py); "
        f"{report['date']}, {report['machine']}, load average {report['loadavg']} at the end.",
        "",
        "| variant | wall ms/round | x no journal | client CPU ms/round | x no journal |",
        "|---|---|---|---|---|",
    ]
    for name, v in report["variants"].items():
        lines.append(f"| {name} | {v['wall_ms_per_round']} | {v['wall_x']} | {v['cpu_ms_per_round']} | {v['cpu_x']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per sample")
    parser.add_argument(
        "--out", type=Path, help="also write journal-checkpoint-<date>.json and .md here (-b, -c, ... once taken)"
    )
    args = parser.parse_args()
    report = asyncio.run(measure(args.repeats, args.runs))
    print(json.dumps(report))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = free_stem(args.out, f"journal-checkpoint-{report['date']}")
        stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        stem.with_suffix(".md").write_text(markdown(report))


def free_stem(directory: Path, name: str) -> Path:
    """`directory / name`, or with the first of `-b`, `-c`, ... that no result of the day has taken yet."""
    for suffix in ("", *(f"-{letter}" for letter in "bcdefghijklmnopqrstuvwxyz")):
        stem = directory / f"{name}{suffix}"
        if not stem.with_suffix(".json").exists() and not stem.with_suffix(".md").exists():
            return stem
    raise SystemExit(f"every name from {name} to {name}-z is taken in {directory}; pass another --out")


if __name__ == "__main__":
    main()
