"""The client CPU of a streamed round against a non-streamed one, both against ``FakeOpenAIServer``.

``python -m benchmarks.streaming_round [--repeats 9] [--runs 20] [--chunk-chars 4,16,64] [--out DIR]``

The client is agentkit's default (``run_tool_loop`` through ``OpenAICaller``, JSON-schema mode) doing
the benchmark's scenario (3 searches, then done: 4 model round trips per run), with one observer that
counts the events it gets, as a UI would take them. Two ways are measured on the same script:

* **not streamed**: ``LoopConfig()``, the request and reply of a run that does not stream;
* **streamed**: ``LoopConfig(stream=True)``: the server sends each reply as server-sent events of
  ``--chunk-chars`` characters of JSON each (4 is about one token, as a model server streams; 16
  and 64 are servers that batch tokens), and the run emits ``RationaleDelta`` as they come.

``FakeOpenAIServer`` runs in this process (a thread per connection), so the figure is the CPU time of
the client's thread alone (``time.thread_time`` of the thread that runs the event loop), not the
process's: the server's work is left out. A sample is ``--runs`` timed runs after one untimed one; its
figure is the median run's client CPU per round. Each repeat takes one sample of each way, in a
shuffled order (the not-streamed way and one streamed way per chunk size), and each ratio is the
median of the per-repeat ratios (streamed over not streamed), so that the load of a shared machine
falls on both sides of each ratio alike. Writes
``streaming-<date>.json`` and ``.md`` (with the date, the machine and its load) to ``--out``; the
page that quotes it (``docs/providers.md``) names the dated file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from agentkit import LoopConfig, Observer, StopReason, run_tool_loop
from agentkit.events import Event
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from benchmarks import harness, scenario
from benchmarks.contenders.agentkit_loop import CONFIG, Retriever, search

PLAIN = "not streamed"
RATIONALE = "The results so far do not cover the question; the next search narrows it to what is missing."


class Counting(Observer):
    """Counts the events of a run, as a UI that takes every one would."""

    def __init__(self) -> None:
        self.events = 0

    def on_event(self, event: Event) -> None:
        self.events += 1


def script(run: int, chunk_chars: int | None) -> list[FakeReply]:
    """The steps of one run: the scenario's three searches, then done, each with a rationale a model would write."""
    queries = [f"{run:08x}-{k}" for k in range(1, scenario.SEARCHES + 1)]
    steps = [
        *(call_step(scenario.SearchArgs(query=query), rationale=RATIONALE) for query in queries),
        done_step(RATIONALE),
    ]
    return [FakeReply.value(step, chunk_chars=chunk_chars) for step in steps]


async def sample(chunk_chars: int | None, runs: int, counter: list[int]) -> tuple[float, int]:
    """Median client CPU seconds per round over ``runs`` runs (after one untimed run), and the events of the last;
    ``chunk_chars`` `None` is the run that does not stream."""
    streamed = chunk_chars is not None
    config = LoopConfig(max_rounds=CONFIG.max_rounds, stream=streamed)
    cpus: list[float] = []
    seen = 0
    with FakeOpenAIServer() as fake:
        async with OpenAICaller(base_url=fake.base_url, api_key="bench") as caller:
            for index in range(runs + 1):
                counter[0] += 1
                fake.add(*script(counter[0], chunk_chars))
                observer = Counting()
                question = scenario.question(f"{counter[0]:016x}")
                cpu = time.thread_time()
                result = await run_tool_loop(caller, Retriever(), search, question, config, observer=observer)
                used = time.thread_time() - cpu
                if result.stop_reason is not StopReason.EXECUTOR_DONE or result.rounds != scenario.ROUNDS:
                    raise scenario.WrongResult(f"run ended {result.stop_reason} after {result.rounds} rounds")
                scenario.check_items(len(result.items))
                if index:  # the first run warms up
                    cpus.append(used / result.rounds)
                seen = observer.events
        fake.assert_complete()
        asked = {bool(body.get("stream")) for body in fake.requests}
    if asked != {streamed}:
        raise scenario.WrongResult(f"the requests asked for stream={asked}, not {streamed}")
    return statistics.median(cpus), seen


def name(chunk_chars: int | None) -> str:
    return PLAIN if chunk_chars is None else f"streamed, {chunk_chars} chars a chunk"


async def measure(repeats: int, runs: int, sizes: list[int]) -> dict[str, Any]:
    ways: list[int | None] = [None, *sizes]
    cpus: dict[str, list[float]] = {name(way): [] for way in ways}
    events: dict[str, int] = {}
    counter = [0]
    for _ in range(repeats):
        for way in random.sample(ways, len(ways)):
            cpu, seen = await sample(way, runs, counter)
            cpus[name(way)].append(cpu)
            events[name(way)] = seen
    rows: dict[str, Any] = {}
    for way in ways:
        mine = cpus[name(way)]
        ratios = [m / p for m, p in zip(mine, cpus[PLAIN], strict=True)]
        rows[name(way)] = {
            "chunk_chars": way,
            "client_cpu_ms_per_round": round(statistics.median(mine) * 1000, 3),
            "cpu_x": round(statistics.median(ratios), 2),
            "events_per_run": events[name(way)],
            "samples_cpu_ms": [round(value * 1000, 3) for value in mine],
        }
    return {"repeats": repeats, "runs": runs, "rounds_per_run": scenario.ROUNDS, "ways": rows}


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# Client CPU of a streamed round against FakeOpenAIServer, {env['date']}",
        "",
        f"Machine: {env['machine']}; Python {env['python']}; commit {env['commit']}; load average "
        f"{env['load_before'][0]:.2f} before, {env['load_after'][0]:.2f} after.",
        f"Command: `{report['command']}` ({report['repeats']} interleaved repeats x {report['runs']} runs of "
        f"{report['rounds_per_run']} rounds). Client CPU is the CPU time of the client's thread alone.",
        "",
        "| way | client CPU ms/round | x not streamed | events per run |",
        "|---|---|---|---|",
    ]
    for way, row in report["ways"].items():
        lines.append(f"| {way} | {row['client_cpu_ms_per_round']} | {row['cpu_x']:.2f} | {row['events_per_run']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per sample")
    parser.add_argument(
        "--chunk-chars", default="4,16,64", help="characters of JSON per streamed chunk, one streamed way per size"
    )
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args()
    env = harness.environment()
    sizes = [int(size) for size in args.chunk_chars.split(",")]
    report = asyncio.run(measure(args.repeats, args.runs, sizes))
    env["load_after"] = os.getloadavg()
    command = (
        f"python -m benchmarks.streaming_round --repeats {args.repeats} --runs {args.runs} "
        f"--chunk-chars {args.chunk_chars}"
    )
    report = {"environment": env, "command": command, **report}
    print(json.dumps(report))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"streaming-{env['date'][:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
