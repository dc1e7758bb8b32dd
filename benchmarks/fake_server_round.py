"""A round against ``agentkit.testing.FakeOpenAIServer``, next to one against the bare benchmark server.

``python -m benchmarks.fake_server_round [--repeats 9] [--runs 20] [--out DIR]``

The client is agentkit's default (``run_tool_loop`` through ``OpenAICaller``, JSON-schema mode)
doing the benchmark's scenario: 3 searches, then done, 4 model round trips per run. Both servers
run in this process, as a test runs ``FakeOpenAIServer`` (a thread): the bare server
(``benchmarks.server``, an ``asyncio.Protocol``, no validation) on an event loop in a thread of its
own, and ``FakeOpenAIServer``, scripted with the run's steps, validating every request as it always
does. A third server is ``FakeOpenAIServer`` as it was before its replies left in one write with
``TCP_NODELAY`` (its handler's two class settings put back), for the size of the stall it had.

A sample is ``--runs`` timed runs after one untimed one; its figure is the median run's wall time
and process CPU time per round (the process holds both servers, so CPU is the client's and the
server's together). Each repeat takes one sample per server, in a shuffled order; the ratios are
medians of the per-repeat ratios to the bare server. Writes ``fake-server-<date>.json`` and ``.md``
(with the date, the machine and its load) to ``--out``, and ``fake-server-latest.*`` beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentkit import StopReason, run_tool_loop
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, call_step, done_step
from agentkit.testing import _fake_server as fake_server_module
from benchmarks import harness, scenario, server
from benchmarks.contenders.agentkit_loop import CONFIG, Retriever, search

SERVERS = ("bare", "fake", "fake-as-before")
NAMES = {
    "bare": "bare loopback server (`benchmarks/server.py`)",
    "fake": "`FakeOpenAIServer`",
    "fake-as-before": "`FakeOpenAIServer` as before (Nagle on, headers and body in two writes)",
}


def script(run: int) -> list[dict[str, Any]]:
    """The steps of one run for ``FakeOpenAIServer``: the scenario's three searches, then done."""
    queries = [f"{run:08x}-{k}" for k in range(1, scenario.SEARCHES + 1)]
    return [*(call_step(scenario.SearchArgs(query=query)) for query in queries), done_step("enough")]


@contextlib.contextmanager
def as_before() -> Iterator[None]:
    """``FakeOpenAIServer``'s handler with Nagle's algorithm on and its writes unbuffered, as before."""
    handler = fake_server_module._Handler
    saved = handler.wbufsize, handler.disable_nagle_algorithm
    handler.wbufsize, handler.disable_nagle_algorithm = 0, False
    try:
        yield
    finally:
        handler.wbufsize, handler.disable_nagle_algorithm = saved


async def sample(kind: str, runs: int, counter: list[int]) -> tuple[float, float]:
    """Median wall and CPU seconds per round over ``runs`` runs against one server (after one untimed run)."""
    walls, cpus = [], []
    with contextlib.ExitStack() as stack:
        fake: FakeOpenAIServer | None = None
        if kind == "bare":
            base_url = stack.enter_context(server.in_thread())
        else:
            if kind == "fake-as-before":
                stack.enter_context(as_before())
            fake = stack.enter_context(FakeOpenAIServer())
            base_url = fake.base_url
        async with OpenAICaller(base_url=base_url, api_key="bench") as caller:
            for index in range(runs + 1):
                counter[0] += 1
                if fake is not None:
                    fake.add(*script(counter[0]))
                started, cpu = time.perf_counter(), time.process_time()
                question = scenario.question(f"{counter[0]:016x}")
                result = await run_tool_loop(caller, Retriever(), search, question, CONFIG)
                wall, used = time.perf_counter() - started, time.process_time() - cpu
                if result.stop_reason is not StopReason.EXECUTOR_DONE or result.rounds != scenario.ROUNDS:
                    raise scenario.WrongResult(f"{kind}: run ended {result.stop_reason} after {result.rounds} rounds")
                scenario.check_items(len(result.items))
                if index:  # the first run warms up
                    walls.append(wall / result.rounds)
                    cpus.append(used / result.rounds)
        if fake is not None:
            fake.assert_complete()
    return statistics.median(walls), statistics.median(cpus)


async def measure(repeats: int, runs: int, before_runs: int) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {kind: {"wall": [], "cpu": []} for kind in SERVERS}
    counter = [0]
    for _ in range(repeats):
        for kind in random.sample(SERVERS, len(SERVERS)):
            wall, cpu = await sample(kind, before_runs if kind == "fake-as-before" else runs, counter)
            figures[kind]["wall"].append(wall)
            figures[kind]["cpu"].append(cpu)
    bare = figures["bare"]
    rows: dict[str, Any] = {}
    for kind in SERVERS:
        mine = figures[kind]
        rows[kind] = {
            "server": NAMES[kind],
            "wall_ms_per_round": round(statistics.median(mine["wall"]) * 1000, 3),
            "cpu_ms_per_round": round(statistics.median(mine["cpu"]) * 1000, 3),
            "wall_x": round(statistics.median(m / b for m, b in zip(mine["wall"], bare["wall"], strict=True)), 2),
            "cpu_x": round(statistics.median(m / b for m, b in zip(mine["cpu"], bare["cpu"], strict=True)), 2),
            "samples_wall_ms": [round(value * 1000, 3) for value in mine["wall"]],
        }
    return {
        "repeats": repeats,
        "runs": runs,
        "runs_as_before": before_runs,
        "rounds_per_run": scenario.ROUNDS,
        "servers": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# A round against FakeOpenAIServer, {env['date']}",
        "",
        f"Machine: {env['machine']}; Python {env['python']}; commit {env['commit']}; load average "
        f"{env['load_before'][0]:.2f} before, {env['load_after'][0]:.2f} after.",
        f"Command: `{report['command']}` ({report['repeats']} interleaved repeats x {report['runs']} runs of "
        f"{report['rounds_per_run']} rounds; {report['runs_as_before']} runs for the server as before).",
        "",
        "| server | wall ms/round | x bare | CPU ms/round (client and server) | x bare |",
        "|---|---|---|---|---|",
    ]
    for row in report["servers"].values():
        lines.append(
            f"| {row['server']} | {row['wall_ms_per_round']} | {row['wall_x']:.2f} | {row['cpu_ms_per_round']} "
            f"| {row['cpu_x']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per sample")
    parser.add_argument("--runs-as-before", type=int, default=3, help="timed runs per sample of the server as before")
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args()
    env = harness.environment()
    report = asyncio.run(measure(args.repeats, args.runs, args.runs_as_before))
    env["load_after"] = os.getloadavg()
    command = f"python -m benchmarks.fake_server_round --repeats {args.repeats} --runs {args.runs}"
    report = {"environment": env, "command": command, **report}
    print(json.dumps(report))
    args.out.mkdir(parents=True, exist_ok=True)
    for stem in (f"fake-server-{env['date'][:10]}", "fake-server-latest"):
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
