"""The client CPU of a streamed round against a non-streamed one, both against ``FakeOpenAIServer``.

``python -m benchmarks.streaming_round [--repeats 9] [--runs 20] [--chunk-chars 4,16,64] [--out DIR]``

The client is agentkit's default (``run_tool_loop`` through ``OpenAICaller``, JSON-schema mode) doing
the benchmark's scenario (3 searches, then done: 4 model round trips per run), with one observer that
counts the events it gets, as a UI would take them. Two ways are measured on the same script:

* **not streamed**: ``LoopConfig()``, the request and reply of a run that does not stream;
* **streamed**: ``LoopConfig(stream=True)``: the server sends each reply as server-sent events of
  ``--chunk-chars`` characters of JSON each (4 is about one token, as a model server streams; 16
  and 64 are servers that batch tokens), and the run emits ``RationaleDelta`` as they come.

The floor of each way is the same run written by hand on bare ``httpx2`` (``--floor``, on by default):
the same request body, the reply read with ``json.loads`` (streamed: each ``data:`` line parsed and its
content appended, nothing else per chunk) and the step validated with pydantic. Its streamed way over
its own not-streamed way is what reading a stream costs any Python client on this machine; agentkit's
ratio is read against it.

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

import httpx2

from agentkit import LoopConfig, Observer, StopReason, run_tool_loop
from agentkit._step import build_step_model
from agentkit.events import Event
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from benchmarks import harness, scenario
from benchmarks.contenders.agentkit_loop import CONFIG, Retriever, search

PLAIN = "not streamed"
FLOOR = "bare httpx2"
STEP = build_step_model(scenario.SearchArgs)
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


async def floor_round(client: httpx2.AsyncClient, body: dict[str, Any], streamed: bool) -> Any:
    """One round of the hand-written floor: the step the server sent, validated with pydantic."""
    if not streamed:
        response = await client.post("/chat/completions", content=json.dumps(body).encode())
        response.raise_for_status()
        return STEP.model_validate_json(json.loads(response.content)["choices"][0]["message"]["content"])
    text: list[str] = []
    async with client.stream("POST", "/chat/completions", content=json.dumps(body).encode()) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:])["choices"]:
                text.append(choice["delta"].get("content") or "")
    return STEP.model_validate_json("".join(text))


async def floor_run(client: httpx2.AsyncClient, question: str, streamed: bool) -> int:
    """The scenario's run on bare httpx2; its rounds."""
    items: list[scenario.Item] = []
    rounds = CONFIG.max_rounds or scenario.ROUNDS
    for round in range(1, rounds + 1):
        body: dict[str, Any] = {
            "model": scenario.MODEL,
            "messages": [
                {"role": "system", "content": scenario.SYSTEM},
                {"role": "user", "content": scenario.step_prompt(question, items, round, rounds)},
            ],
            "response_format": {"type": "json_schema", "json_schema": {"name": "Step", "schema": SCHEMA}},
        }
        if streamed:
            body.update(stream=True, stream_options={"include_usage": True})
        step = await floor_round(client, body, streamed)
        if step.done:
            scenario.check_items(len(items))
            return round
        items.extend(scenario.search_items(step.call.query))
    raise scenario.WrongResult(f"the floor's run did not end in {rounds} rounds")


SCHEMA = STEP.model_json_schema()


async def floor_sample(chunk_chars: int | None, runs: int, counter: list[int]) -> float:
    """``sample`` for the hand-written floor."""
    streamed = chunk_chars is not None
    cpus: list[float] = []
    with FakeOpenAIServer() as fake:
        headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
        async with httpx2.AsyncClient(base_url=fake.base_url, headers=headers, timeout=60) as client:
            for index in range(runs + 1):
                counter[0] += 1
                fake.add(*script(counter[0], chunk_chars))
                question = scenario.question(f"{counter[0]:016x}")
                cpu = time.thread_time()
                rounds = await floor_run(client, question, streamed)
                used = time.thread_time() - cpu
                if rounds != scenario.ROUNDS:
                    raise scenario.WrongResult(f"the floor's run ended after {rounds} rounds")
                if index:
                    cpus.append(used / rounds)
        fake.assert_complete()
    return statistics.median(cpus)


def name(chunk_chars: int | None, floor: bool = False) -> str:
    way = PLAIN if chunk_chars is None else f"streamed, {chunk_chars} chars a chunk"
    return f"{FLOOR}, {way}" if floor else way


async def measure(repeats: int, runs: int, sizes: list[int], floor: bool = True) -> dict[str, Any]:
    """Each way's samples, interleaved: agentkit's and, with `floor`, the hand-written floor's; each ratio is the
    median of the per-repeat ratios to the same client's not-streamed way (`cpu_x`) and, for agentkit with `floor`,
    to the floor's same way (`cpu_x_floor`)."""
    ways: list[tuple[int | None, bool]] = [(size, False) for size in (None, *sizes)]
    if floor:
        ways += [(size, True) for size in (None, *sizes)]
    cpus: dict[str, list[float]] = {name(*way): [] for way in ways}
    events: dict[str, int] = {}
    counter = [0]
    for _ in range(repeats):
        for size, bare in random.sample(ways, len(ways)):
            if bare:
                cpus[name(size, True)].append(await floor_sample(size, runs, counter))
                continue
            cpu, seen = await sample(size, runs, counter)
            cpus[name(size)].append(cpu)
            events[name(size)] = seen
    rows: dict[str, Any] = {}
    for size, bare in ways:
        mine = cpus[name(size, bare)]
        plain = cpus[name(None, bare)]
        row: dict[str, Any] = {
            "chunk_chars": size,
            "floor": bare,
            "client_cpu_ms_per_round": round(statistics.median(mine) * 1000, 3),
            "cpu_x": round(statistics.median([m / p for m, p in zip(mine, plain, strict=True)]), 2),
            "events_per_run": None if bare else events[name(size)],
            "samples_cpu_ms": [round(value * 1000, 3) for value in mine],
        }
        if floor and not bare:
            floors = cpus[name(size, True)]
            row["cpu_x_floor"] = round(statistics.median([m / f for m, f in zip(mine, floors, strict=True)]), 2)
        rows[name(size, bare)] = row
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
        "| way | client CPU ms/round | x its not-streamed way | x the floor's same way | events per run |",
        "|---|---|---|---|---|",
    ]
    for way, row in report["ways"].items():
        floor = f"{row['cpu_x_floor']:.2f}" if "cpu_x_floor" in row else "-"
        events = "-" if row["events_per_run"] is None else row["events_per_run"]
        lines.append(f"| {way} | {row['client_cpu_ms_per_round']} | {row['cpu_x']:.2f} | {floor} | {events} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per sample")
    parser.add_argument(
        "--chunk-chars", default="4,16,64", help="characters of JSON per streamed chunk, one streamed way per size"
    )
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    parser.add_argument(
        "--no-floor", dest="floor", action="store_false", help="leave out the hand-written bare-httpx2 floor"
    )
    args = parser.parse_args()
    env = harness.environment()
    sizes = [int(size) for size in args.chunk_chars.split(",")]
    report = asyncio.run(measure(args.repeats, args.runs, sizes, args.floor))
    env["load_after"] = os.getloadavg()
    command = (
        f"python -m benchmarks.streaming_round --repeats {args.repeats} --runs {args.runs} "
        f"--chunk-chars {args.chunk_chars}{'' if args.floor else ' --no-floor'}"
    )
    report = {"environment": env, "command": command, **report}
    print(json.dumps(report))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"streaming-{env['date'][:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
