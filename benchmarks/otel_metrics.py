"""What the GenAI metrics cost per round (``python -m benchmarks.otel_metrics``).

The benchmark's retrieval run (3 searches, then done: 4 rounds) with an ``OTelObserver`` over an SDK
tracer (spans recorded, not exported), three ways, one after another in each repeat (order shuffled):
spans only (``metrics=False``, the baseline); with the metrics on a no-op meter provider
(``NoOpMeterProvider``: what a service that installed no metrics SDK pays); and on the SDK's meter
provider with an in-memory reader (recorded and aggregated). Two settings: ``http``, every model call a
real round trip through ``OpenAICaller`` to ``benchmarks/server.py`` in its own process, and
``scripted``, a ``ScriptedCaller`` with no I/O (a round is then nothing but agentkit's own work, so the
metrics' share of it is the largest it can be). Per round: wall time and the client's CPU time, each
the median over ``--runs`` runs; the ratios are medians over the repeats of the per-repeat ratios to
the baseline. Prints one JSON object; ``--out`` also writes it and a Markdown table there.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from agentkit import LoopConfig, StopReason, StructuredCaller, run_tool_loop
from agentkit.otel import OTelObserver
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import ScriptedCaller, call_step, done_step
from benchmarks import harness, scenario
from benchmarks.contenders.agentkit_loop import Retriever, search

CONFIG = LoopConfig(max_rounds=6)
VARIANTS = ("spans-only", "metrics-noop", "metrics-sdk")
SETTINGS = ("http", "scripted")


def observer_for(variant: str, tracer_provider: TracerProvider) -> tuple[OTelObserver, MeterProvider | None]:
    """One observer for a sample's runs, as a service keeps one for all of its runs."""
    tracer = tracer_provider.get_tracer("bench")
    if variant == "spans-only":
        return OTelObserver(tracer, metrics=False), None
    if variant == "metrics-noop":
        return OTelObserver(tracer, meter_provider=NoOpMeterProvider()), None
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OTelObserver(tracer, meter_provider=meters), meters


def scripted(run_id: str) -> ScriptedCaller:
    """The server's answers for one run, scripted: three searches, then done."""
    calls = [call_step(scenario.SearchArgs(query=f"{run_id}-{k}")) for k in range(1, scenario.SEARCHES + 1)]
    return ScriptedCaller([*calls, done_step("enough")])


async def sample(caller_for: Callable[[str], StructuredCaller], variant: str, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds per round over ``runs`` runs of one variant (after one untimed run)."""
    spans = TracerProvider()
    observer, meters = observer_for(variant, spans)
    walls, cpus = [], []
    for index in range(runs + 1):
        run_id = f"{index:016x}"
        caller = caller_for(run_id)
        started, cpu = time.perf_counter(), time.process_time()
        result = await run_tool_loop(caller, Retriever(), search, scenario.question(run_id), CONFIG, observer=observer)
        wall, used = time.perf_counter() - started, time.process_time() - cpu
        if result.stop_reason is not StopReason.EXECUTOR_DONE or result.rounds != scenario.ROUNDS:
            raise scenario.WrongResult(f"run ended {result.stop_reason} after {result.rounds} rounds: {result.error}")
        if index:  # the first run warms up
            walls.append(wall / result.rounds)
            cpus.append(used / result.rounds)
    if meters is not None:
        meters.shutdown()
    spans.shutdown()
    return statistics.median(walls), statistics.median(cpus)


async def measure_setting(caller_for: Callable[[str], StructuredCaller], repeats: int, runs: int) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in VARIANTS}
    for _ in range(repeats):
        for variant in random.sample(VARIANTS, len(VARIANTS)):
            wall, cpu = await sample(caller_for, variant, runs)
            figures[variant]["wall"].append(wall)
            figures[variant]["cpu"].append(cpu)
    base = figures["spans-only"]
    report: dict[str, Any] = {}
    for variant in VARIANTS:
        mine = figures[variant]
        report[variant] = {
            "wall_us_per_round": round(statistics.median(mine["wall"]) * 1e6, 1),
            "cpu_us_per_round": round(statistics.median(mine["cpu"]) * 1e6, 1),
            "wall_x": round(statistics.median(m / b for m, b in zip(mine["wall"], base["wall"], strict=True)), 3),
            "cpu_x": round(statistics.median(m / b for m, b in zip(mine["cpu"], base["cpu"], strict=True)), 3),
        }
    return report


async def measure(repeats: int, runs: int, settings: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    report: dict[str, Any] = {"repeats": repeats, "runs": runs, "rounds_per_run": scenario.ROUNDS, "settings": {}}
    if "scripted" in settings:
        report["settings"]["scripted"] = await measure_setting(scripted, repeats, runs)
    if "http" in settings:
        with harness.serving() as (base_url, _):
            caller = OpenAICaller(base_url=base_url, api_key="bench")
            try:
                report["settings"]["http"] = await measure_setting(lambda _: caller, repeats, runs)
            finally:
                await caller.aclose()
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"GenAI metrics cost: {report['repeats']} repeats x {report['runs']} runs of {report['rounds_per_run']} "
        f"rounds, OTelObserver over an SDK tracer (not exporting); {report.get('date', '')}, "
        f"{report.get('machine', '')} (load average {report.get('loadavg', '')}).",
        "",
        "| setting | variant | wall us/round | x spans only | client CPU us/round | x spans only |",
        "|---|---|---|---|---|---|",
    ]
    for setting, variants in report["settings"].items():
        for name, v in variants.items():
            lines.append(
                f"| {setting} | {name} | {v['wall_us_per_round']} | {v['wall_x']} | {v['cpu_us_per_round']} | "
                f"{v['cpu_x']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--runs", type=int, default=30, help="timed runs per sample")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="http, scripted or both (comma-separated)")
    parser.add_argument("--out", type=Path, help="also write otel-metrics-<date>.json and .md here")
    args = parser.parse_args()
    settings = tuple(s for s in args.settings.split(",") if s)
    report = asyncio.run(measure(args.repeats, args.runs, settings))
    harness.publish(report, args.out, "otel-metrics", markdown)


if __name__ == "__main__":
    main()
