"""Does a journaled run slow down as it grows? (``python -m benchmarks.long_run``)

One tiered run of ``--rounds`` rounds (1,000 by default: a new search each round, then done) against
the in-process scripted caller, recorded by a ``JournalObserver`` into a fresh SQLite file, and the
same run without a journal. Per variant: the median cost of rounds 11-60 and of the last 50 rounds
(the time between consecutive round starts), their ratio (growth), and the journal's files at the
end (the database and its WAL). With ``--load N``, N processes keep the CPUs busy meanwhile (the
figures under load). Prints one JSON object; ``--out`` also writes it and a Markdown table there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, Observer, Prompt, RoleSpec, StopReason, Tier, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.events import RoundStarted
from agentkit.journal import JournalObserver, SQLiteJournal
from agentkit.testing import ScriptedCaller, call_step, done_step


class Query(BaseModel):
    text: str


class Doc(BaseModel):
    id: str
    text: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Search the corpus."""
    return [Doc(id=f"{args.text}-{n}", text=f"passage {n} about {args.text}") for n in range(3)]


class Reader:
    """Renders a short prompt (the cost under test is the loop's and the journal's, not the prompt's)."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="search, then answer", dynamic=f"{ctx}: round {info.round}")


class Clock(Observer):
    """When each round started."""

    sees_calls = False

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_round_start(self, event: RoundStarted) -> None:
        self.starts.append(time.perf_counter())


def burn(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


async def one_run(rounds: int, journal: SQLiteJournal | None) -> list[float]:
    """The run's round costs (seconds between consecutive round starts)."""
    steps = [call_step(Query(text=f"q{n}")) for n in range(rounds - 1)] + [done_step()]
    clock = Clock()
    recorder = JournalObserver(journal) if journal is not None else None
    observers: list[Observer] = [clock] if recorder is None else [clock, recorder]
    config = LoopConfig(max_rounds=rounds)
    result = await run_tool_loop_tiered(ScriptedCaller(steps), Reader(), search, "long", config, observer=observers)
    if result.stop_reason is not StopReason.EXECUTOR_DONE or result.rounds != rounds:
        raise RuntimeError(f"the run ended {result.stop_reason} after {result.rounds} rounds: {result.error}")
    if recorder is not None:
        recorder.close()
    return [b - a for a, b in zip(clock.starts, clock.starts[1:], strict=False)]


def files_mib(path: Path) -> float:
    sizes = [p.stat().st_size for p in path.parent.glob(path.name + "*")]
    return round(sum(sizes) / 2**20, 2)


async def measure(rounds: int) -> dict[str, Any]:
    report: dict[str, Any] = {"rounds": rounds, "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("no-journal", "journal"):
            path = Path(tmp) / f"{variant}.db"
            journal = SQLiteJournal(path) if variant == "journal" else None
            costs = await one_run(rounds, journal)
            size = files_mib(path) if journal is not None else 0.0
            if journal is not None:
                await journal.close()
            early, late = statistics.median(costs[10:60]), statistics.median(costs[-50:])
            report["variants"][variant] = {
                "rounds_11_60_ms": round(early * 1000, 3),
                "last_50_ms": round(late * 1000, 3),
                "growth_x": round(late / early, 2),
                "files_mib": size,
            }
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"One {report['rounds']}-round tiered run (scripted caller, in process), recorded into a fresh SQLite "
        f"journal or not; {report['date']}, {report['machine']}, load {report['load']} "
        f"(load average {report['loadavg']}).",
        "",
        "| variant | rounds 11-60, ms/round | last 50, ms/round | last 50 x rounds 11-60 | journal files, MiB |",
        "|---|---|---|---|---|",
    ]
    for name, v in report["variants"].items():
        lines.append(f"| {name} | {v['rounds_11_60_ms']} | {v['last_50_ms']} | {v['growth_x']} | {v['files_mib']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--load", type=int, default=0, help="busy processes running meanwhile")
    parser.add_argument("--out", type=Path, help="also write long-run-<date>[-load].json and .md here")
    args = parser.parse_args()
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    try:
        report = asyncio.run(measure(args.rounds))
        report["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        stop.set()
        for burner in burners:
            burner.join()
    report |= {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {os.cpu_count()} cores"}
    report["load"] = args.load
    print(json.dumps(report))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"long-run-{report['date']}{'-load' if args.load else ''}"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        stem.with_suffix(".md").write_text(markdown(report))


if __name__ == "__main__":
    main()
