"""How long ``JournalObserver`` keeps the event loop from running other tasks (``python -m benchmarks.journal_stall``).

A ticker task sleeps 1 ms at a time and records the longest gap between its wake-ups while
``--runs`` journaled runs go on at once against a fresh SQLite journal; with ``--locked S``,
another connection holds the journal's write lock for the first S seconds. A gap far above 1 ms
is time the event loop could not run anything else (the runs' own work included: compare with
``--unjournaled``). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from agentkit import AfterProposal, LoopConfig, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.journal import JournalObserver, SQLiteJournal
from agentkit.testing import ScriptedCaller, call_step, done_step


class Query(BaseModel):
    query: str


class Target(BaseModel):
    path: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    return [args.query]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path (never runs: proposed)."""
    return [args.path]


class Planner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: None, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="plan", dynamic=str(info.round))


def script() -> ScriptedCaller:
    return ScriptedCaller(
        [call_step(Query(query="q"), tool="search"), call_step(Target(path="/p"), tool="delete"), done_step()]
    )


async def measure(runs: int, locked: float, *, journaled: bool = True) -> dict[str, object]:
    path = Path(tempfile.mkdtemp()) / "journal.db"
    journal = SQLiteJournal(path)
    if locked:
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        threading.Timer(locked, holder.rollback).start()
    longest = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    with JournalObserver(journal, flush_timeout=60) as observer:
        await asyncio.gather(
            *(
                run_tool_loop_tiered(script(), Planner(), [search, delete], None, config, observer=observer)
                for _ in range(runs)
            )
        )
    wall = time.perf_counter() - started
    stop = True
    await ticking
    await journal.close()
    figures = {"runs": runs, "locked_s": locked, "wall_s": round(wall, 3), "longest_stall_s": round(longest, 4)}
    return figures | {"journaled": journaled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--locked", type=float, default=0.0, metavar="S")
    parser.add_argument("--unjournaled", action="store_true", help="the same runs without the observer (baseline)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.runs, args.locked, journaled=not args.unjournaled))))


if __name__ == "__main__":
    main()
