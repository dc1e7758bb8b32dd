"""What does evaluating cost over running? (``python -m benchmarks.evals_overhead``)

``--cases`` recorded runs (1,000 by default: a search, then done with an answer) are played back through
``ReplayCaller``, ``--concurrency`` at a time (16): once called directly (``asyncio.gather`` under a
semaphore, the results kept), once through ``agentkit.evals.evaluate`` with four expectations per
case (outcome, retrieved, answer pattern, rounds) and the report built. The two are interleaved over
``--repeats`` rounds (5); the figure is the median ratio evaluate / direct, in wall time and in CPU
time. Prints one JSON object; ``--out`` also writes it and a Markdown table there.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, RunCheckpoint, TieredLoopResult, ToolLoop
from agentkit.evals import Case, Dataset, Expect, evaluate
from agentkit.testing import ReplayCaller, ScriptedCaller, call_step
from benchmarks import harness
from benchmarks.long_run import Doc, Query, Reader, search

CONFIG = LoopConfig(max_rounds=4)


class Found(BaseModel):
    passage_id: str
    answer: str


async def record(question: str) -> RunCheckpoint:
    done = {"rationale": "", "decision": {"done": True, "answer": {"passage_id": f"{question}-0", "answer": "42"}}}
    caller = ScriptedCaller([call_step({"text": question}), done])
    result = await ToolLoop(caller, Reader(), search, CONFIG, answer=Found).run(question)
    assert result.outcome is Outcome.APPLIED, result
    return result.checkpoint


def replayer(cassettes: dict[str, RunCheckpoint]) -> Callable[[str], Awaitable[TieredLoopResult[Query, Doc, Found]]]:
    async def run(question: str) -> TieredLoopResult[Query, Doc, Found]:
        replay = ReplayCaller(cassettes[question])
        return await ToolLoop(replay, Reader(), replay.tools(search), CONFIG, answer=Found).run(question)

    return run


async def direct(questions: list[str], task: Callable[[str], Awaitable[Any]], concurrency: int) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(question: str) -> Any:
        async with gate:
            return await task(question)

    return await asyncio.gather(*(one(q) for q in questions))


async def measure(cases: int, concurrency: int, repeats: int) -> dict[str, Any]:
    questions = [f"q{n:04d}" for n in range(cases)]
    cassettes = {q: await record(q) for q in questions}
    dataset = Dataset(
        name="replayed",
        cases=[
            Case(
                name=q,
                ctx=q,
                expect=Expect(
                    outcome=Outcome.APPLIED, retrieved=[f"{q}-0"], answer_matches={"answer": "42"}, rounds_at_most=2
                ),
            )
            for q in questions
        ],
    )
    task = replayer(cassettes)
    walls: dict[str, list[float]] = {"direct": [], "evaluate": []}
    cpus: dict[str, list[float]] = {"direct": [], "evaluate": []}
    for _ in range(repeats):
        for arm in ("direct", "evaluate"):
            wall, cpu = time.perf_counter(), time.process_time()
            if arm == "direct":
                results = await direct(questions, task, concurrency)
                assert all(r.outcome is Outcome.APPLIED for r in results)
            else:
                report = await evaluate(dataset, task, concurrency=concurrency)
                assert report.passed, report.table()
            walls[arm].append(time.perf_counter() - wall)
            cpus[arm].append(time.process_time() - cpu)
    wall_ratios = [e / d for e, d in zip(walls["evaluate"], walls["direct"], strict=True)]
    cpu_ratios = [e / d for e, d in zip(cpus["evaluate"], cpus["direct"], strict=True)]
    return {
        "cases": cases,
        "concurrency": concurrency,
        "repeats": repeats,
        "direct_s": round(statistics.median(walls["direct"]), 3),
        "evaluate_s": round(statistics.median(walls["evaluate"]), 3),
        "wall_x": round(statistics.median(wall_ratios), 3),
        "cpu_x": round(statistics.median(cpu_ratios), 3),
        "wall_x_range": [round(min(wall_ratios), 3), round(max(wall_ratios), 3)],
    }


def markdown(report: dict[str, Any]) -> str:
    return (
        f"{report['cases']} replayed runs, {report['concurrency']} at a time, {report['repeats']} interleaved "
        f"repeats; {report['date']}, {report['machine']} (load average {report['loadavg']}).\n\n"
        "| called directly, s | through evaluate, s | evaluate x direct, wall | evaluate x direct, CPU |\n"
        "|---|---|---|---|\n"
        f"| {report['direct_s']} | {report['evaluate_s']} | {report['wall_x']} "
        f"(range {report['wall_x_range'][0]}-{report['wall_x_range'][1]}) | {report['cpu_x']} |\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write evals-overhead-<date>.json and .md here")
    args = parser.parse_args()
    report = asyncio.run(measure(args.cases, args.concurrency, args.repeats))
    harness.publish(report, args.out, "evals-overhead", markdown)


if __name__ == "__main__":
    main()
