"""Where a round's client CPU goes: the wire alone, the loop alone, and the whole round, against bare httpx2.

``python -m benchmarks.round_split [--repeats 9] [--requests 1500] [--runs 300] [--out DIR]``

Each side is measured in this process against the benchmark server (``benchmarks.server``, in a
process of its own), one sample of each side per repeat in a shuffled order; each figure is the median
over the repeats of the process CPU per round (or request), each ratio the median of the per-repeat
ratios:

* **the wire**: ``OpenAICaller.complete`` alone (the request built from a ``StructuredRequest``, sent
  on public APIs, the reply validated from its bytes) against the floor's one request (the same JSON
  posted through ``httpx2``, read with ``json.loads``, the step validated with pydantic), the
  scenario's first-round prompt each time;
* **the whole round**: the scenario's runs (3 searches, then done) through ``run_tool_loop`` against
  the bare-httpx2 loop (``benchmarks.contenders.floor_httpx``), per round;
* **the loop alone**: the same runs through ``run_tool_loop`` over a caller that hands back the
  completions ``OpenAICaller`` returned for them (recorded once, before the repeats): everything the
  loop does, no HTTP;
* **the loop beside a request**: the same, with the floor's request sent (and its reply read) in each
  round before the recorded completion is handed back: the loop's work and a bare request's,
  interleaved as in a real round. Against the loop alone plus the floor's request measured apart, it
  shows what each costs the other when they share the CPU's caches.

Writes ``round-split-<date>.json`` and ``.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2

from agentkit import Completion, StructuredRequest, run_tool_loop
from agentkit._step import build_step_model
from agentkit.providers.openai import OpenAICaller
from benchmarks import harness, scenario
from benchmarks.contenders import agentkit_loop, floor_httpx

Sample = Callable[[int], Awaitable[float]]
BESIDE = "loop beside the floor's request"


def first_prompt() -> str:
    return scenario.step_prompt(scenario.question(scenario.new_run_id()), [], 1, 6)


class FloorRequest:
    """The floor's one request: the step request's JSON posted through `httpx2`, the reply read with
    `json.loads`, the step validated with pydantic (as `benchmarks.contenders.floor_httpx` does each round)."""

    def __init__(self, base_url: str) -> None:
        headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
        self.client = httpx2.AsyncClient(base_url=base_url, headers=headers, timeout=600)
        step = {"name": "Step", "schema": scenario.Step.model_json_schema()}
        self.response_format = {"type": "json_schema", "json_schema": step}

    async def __call__(self, system: str, prompt: str) -> None:
        body = {
            "model": scenario.MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "response_format": self.response_format,
        }
        response = await self.client.post("/chat/completions", content=json.dumps(body).encode())
        response.raise_for_status()
        reply = json.loads(response.content)
        scenario.Step.model_validate_json(reply["choices"][0]["message"]["content"] or "")

    async def aclose(self) -> None:
        """Close its client."""
        await self.client.aclose()


def wire_sides(base_url: str) -> tuple[Sample, Sample, Callable[[], Awaitable[None]]]:
    """The caller's and the floor's one request, each a sample of `n` requests (CPU seconds per request)."""
    step = build_step_model(scenario.SearchArgs)
    caller = OpenAICaller(base_url=base_url, api_key="bench")
    bare = FloorRequest(base_url)

    async def agentkit(n: int) -> float:
        prompts = [first_prompt() for _ in range(n)]
        started = time.process_time()
        for prompt in prompts:
            await caller.complete(StructuredRequest(system=scenario.SYSTEM, dynamic=prompt, model=scenario.MODEL), step)
        return (time.process_time() - started) / n

    async def floor(n: int) -> float:
        prompts = [first_prompt() for _ in range(n)]
        started = time.process_time()
        for prompt in prompts:
            await bare(scenario.SYSTEM, prompt)
        return (time.process_time() - started) / n

    async def close() -> None:
        await caller.aclose()
        await bare.aclose()

    return agentkit, floor, close


def round_sides(base_url: str) -> tuple[Sample, Sample, Callable[[], Awaitable[None]]]:
    """The benchmark's agentkit contender and its bare-httpx2 floor, each a sample of `n` runs (CPU per round)."""
    loop = agentkit_loop.make(base_url, "json_schema")
    bare = floor_httpx.make(base_url)

    def timed(contender: Any) -> Sample:
        async def sample(n: int) -> float:
            ids = [scenario.new_run_id() for _ in range(n)]
            started = time.process_time()
            for run_id in ids:
                await contender.run(run_id)
            return (time.process_time() - started) / (n * scenario.ROUNDS)

        return sample

    async def close() -> None:
        await loop.aclose()
        await bare.aclose()

    return timed(loop), timed(bare), close


class Replayed:
    """A caller that records `OpenAICaller`'s completions of some runs, then hands them back run by run;
    `beside`: send the floor's request (and read its reply) before each, as a real round would."""

    def __init__(self, caller: OpenAICaller, beside: Callable[[StructuredRequest], Awaitable[None]]) -> None:
        self.caller = caller
        self.beside = beside
        self.recorded: dict[str, list[Completion[Any]]] = {}
        self.playing: list[Completion[Any]] | None = None
        self.recording: list[Completion[Any]] = []
        self.interleave = False

    async def complete(self, request: StructuredRequest, schema: type[Any]) -> Completion[Any]:
        if self.playing is None:
            completion = await self.caller.complete(request, schema)
            self.recording.append(completion)
            return completion
        if self.interleave:
            await self.beside(request)
        return self.playing.pop(0)

    async def complete_text(self, request: StructuredRequest) -> Any:  # pragma: no cover - the scenario asks none
        raise NotImplementedError


def loop_sides(base_url: str) -> tuple[Callable[[int], Awaitable[None]], Sample, Sample, Callable[[], Awaitable[None]]]:
    """The loop over recorded completions, alone and beside the floor's request, each a sample of `n` runs
    (CPU per round); the first is the recording, done once before the samples."""
    bare = FloorRequest(base_url)

    async def beside(request: StructuredRequest) -> None:
        await bare(request.system, request.dynamic)

    caller = OpenAICaller(base_url=base_url, api_key="bench")
    replayed = Replayed(caller, beside)
    agent = agentkit_loop.Retriever()

    async def run(run_id: str) -> None:
        result = await run_tool_loop(
            replayed, agent, agentkit_loop.search, scenario.question(run_id), agentkit_loop.CONFIG
        )
        if result.rounds != scenario.ROUNDS:
            raise scenario.WrongResult(f"a replayed run ended {result.stop_reason} after {result.rounds} rounds")

    async def record(n: int) -> None:
        for _ in range(n):
            run_id = scenario.new_run_id()
            replayed.recording = []
            await run(run_id)
            replayed.recorded[run_id] = replayed.recording

    def timed(interleave: bool) -> Sample:
        async def sample(n: int) -> float:
            ids = list(replayed.recorded)[:n]
            started = time.process_time()
            replayed.interleave = interleave
            for run_id in ids:
                replayed.playing = list(replayed.recorded[run_id])
                await run(run_id)
            replayed.playing = None
            return (time.process_time() - started) / (len(ids) * scenario.ROUNDS)

        return sample

    async def close() -> None:
        await caller.aclose()
        await bare.aclose()

    return record, timed(False), timed(True), close


async def measure(base_url: str, repeats: int, requests: int, runs: int) -> dict[str, Any]:
    wire_agentkit, wire_floor, close_wire = wire_sides(base_url)
    round_agentkit, round_floor, close_rounds = round_sides(base_url)
    record, loop_alone, loop_beside, close_loops = loop_sides(base_url)
    await record(runs)
    sides: dict[str, tuple[Sample, int]] = {
        "wire: OpenAICaller.complete": (wire_agentkit, requests),
        "wire: bare httpx2": (wire_floor, requests),
        "round: run_tool_loop": (round_agentkit, runs),
        "round: bare httpx2 loop": (round_floor, runs),
        "loop alone: recorded completions": (loop_alone, runs),
        BESIDE: (loop_beside, runs),
    }
    for sample, _ in sides.values():  # warm up: connections, caches, the step model
        await sample(20)
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for _ in range(repeats):
            for name in random.sample(list(sides), len(sides)):
                sample, n = sides[name]
                cpu[name].append(await sample(n))
    finally:
        await close_wire()
        await close_rounds()
        await close_loops()

    def ratio(mine: str, floor: str) -> float:
        return statistics.median(m / f for m, f in zip(cpu[mine], cpu[floor], strict=True))

    def us(name: str) -> float:
        return round(statistics.median(cpu[name]) * 1e6, 1)

    in_place = [r - w for r, w in zip(cpu["round: run_tool_loop"], cpu["wire: OpenAICaller.complete"], strict=True)]
    apart = [a + w for a, w in zip(cpu["loop alone: recorded completions"], cpu["wire: bare httpx2"], strict=True)]
    together = cpu[BESIDE]
    return {
        "repeats": repeats,
        "requests_per_sample": requests,
        "runs_per_sample": runs,
        "cpu_us": {name: us(name) for name in sides},
        "wire_x_floor": round(ratio("wire: OpenAICaller.complete", "wire: bare httpx2"), 3),
        "round_x_floor": round(ratio("round: run_tool_loop", "round: bare httpx2 loop"), 3),
        "loop_in_place_us": round(statistics.median(in_place) * 1e6, 1),
        "apart_us": round(statistics.median(apart) * 1e6, 1),
        "sharing_us": round(statistics.median(t - a for t, a in zip(together, apart, strict=True)) * 1e6, 1),
        "samples_us": {name: [round(value * 1e6, 1) for value in values] for name, values in cpu.items()},
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    cpu = report["cpu_us"]
    return "\n".join(
        [
            f"# Where a round's client CPU goes, {env['date']}",
            "",
            f"Machine: {env['machine']}; Python {env['python']}; commit {env['commit']}; load average "
            f"{env['load_before'][0]:.2f} before, {env['load_after'][0]:.2f} after.",
            f"Command: `{report['command']}`.",
            "",
            "| part | agentkit, CPU µs | bare httpx2, CPU µs | x bare httpx2 |",
            "|---|---|---|---|",
            f"| the wire: one request, built, sent, read and validated | {cpu['wire: OpenAICaller.complete']} | "
            f"{cpu['wire: bare httpx2']} | {report['wire_x_floor']:.2f} |",
            f"| the whole round (scenario runs, per round) | {cpu['round: run_tool_loop']} | "
            f"{cpu['round: bare httpx2 loop']} | {report['round_x_floor']:.2f} |",
            f"| the loop alone, over the completions recorded | {cpu['loop alone: recorded completions']} | - | - |",
            f"| the loop beside the floor's request, interleaved | {cpu[BESIDE]} | - | - |",
            "",
            f"The round less the wire: {report['loop_in_place_us']} µs. The loop alone plus the floor's request "
            f"measured apart: {report['apart_us']} µs; interleaved, {report['sharing_us']} µs more (what they cost "
            "each other when they share the CPU's caches).",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--requests", type=int, default=1500, help="requests per wire sample")
    parser.add_argument("--runs", type=int, default=300, help="runs per round sample")
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args()
    env = harness.environment()
    with harness.serving() as (base_url, _):
        report = asyncio.run(measure(base_url, args.repeats, args.requests, args.runs))
    env["load_after"] = os.getloadavg()
    command = f"python -m benchmarks.round_split --repeats {args.repeats} --requests {args.requests} --runs {args.runs}"
    report = {"environment": env, "command": command, **report}
    print(json.dumps(report))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"round-split-{env['date'][:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
