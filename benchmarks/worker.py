"""Measurements of one contender in a process of its own: ``python -m benchmarks.worker``.

A process per contender keeps contenders from sharing imports, caches or garbage, and lets the
process's own CPU time and peak RSS be read without the harness in them. For each sample the
worker resets the server's statistics, runs the contender, reads the statistics back and prints
one JSON line.

Modes:
    ``seq``: ``--warmup`` untimed runs, then ``--runs`` timed runs one after another (wall and
    CPU time of each run, server CPU and request bytes per round).
    ``serve``: the same, once for each ``RUNS WARMUP`` line read from stdin (the harness keeps one
    such process per contender and interleaves their samples).
    ``concurrent``: one warm-up run, then ``--runs`` runs started at once with ``asyncio.gather``
    (wall time, peak RSS, errors).
    ``--profile FILE``: the timed runs (``seq``) or the gathered runs (``concurrent``) under
    cProfile, the top of the profile written to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import resource
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from benchmarks import contenders, scenario


def server_call(base_url: str, method: str, path: str) -> dict[str, Any]:
    """A control request to the benchmark server (outside every timed section)."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=30)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        reply: dict[str, Any] = json.loads(connection.getresponse().read())
        return reply
    finally:
        connection.close()


def rss_kib() -> int:
    """Resident set size now, in KiB (Linux)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def server_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "body_bytes", "header_bytes", "response_bytes", "cpu_seconds")
    return {key: after[key] - before[key] for key in keys}


async def sequential(
    contender: contenders.Contender, base_url: str, runs: int, warmup: int, profile: str | None
) -> dict[str, Any]:
    server_call(base_url, "POST", "/reset")
    for _ in range(warmup):
        await contender.run(scenario.new_run_id())
    before = server_call(base_url, "GET", "/stats")
    ids = [scenario.new_run_id() for _ in range(runs)]
    profiler: Any = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    walls, cpus = [], []
    for run_id in ids:
        started, cpu_started = time.perf_counter(), time.process_time()
        await contender.run(run_id)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu_started)
    if profiler is not None:
        profiler.disable()
        write_profile(profiler, profile or "")
    after = server_call(base_url, "GET", "/stats")
    return {
        "wall": sum(walls),
        "cpu": sum(cpus),
        "run_wall_median": statistics.median(walls),
        "run_cpu_median": statistics.median(cpus),
        "runs": runs,
        "rounds": runs * scenario.ROUNDS,
        "server": server_delta(before, after),
        "check": check(after, runs + warmup),
    }


async def concurrent(
    contender: contenders.Contender, base_url: str, runs: int, profile: str | None = None
) -> dict[str, Any]:
    await contender.run(scenario.new_run_id())
    server_call(base_url, "POST", "/reset")
    rss_before = rss_kib()
    profiler: Any = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started, cpu_started = time.perf_counter(), time.process_time()
    outcomes = await asyncio.gather(
        *(contender.run(scenario.new_run_id()) for _ in range(runs)), return_exceptions=True
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if profiler is not None:
        profiler.disable()
        write_profile(profiler, profile or "")
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    after = server_call(base_url, "GET", "/stats")
    return {
        "wall": wall,
        "cpu": cpu,
        "runs": runs,
        "errors": len(errors),
        "first_error": f"{type(errors[0]).__name__}: {errors[0]}"[:500] if errors else None,
        "rss_before_kib": rss_before,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "check": check(after, runs),
    }


def check(stats: dict[str, Any], runs: int) -> dict[str, Any]:
    """The server-side correctness check: every run made 3 searches and 1 final answer, nothing more."""
    ok = (
        stats["runs"] == runs
        and stats["correct_runs"] == runs
        and stats["requests"] == runs * scenario.ROUNDS
        and stats["searches_asked"] == runs * scenario.SEARCHES
        and stats["finals"] == runs
        and stats["bad_requests"] == 0
    )
    keys = ("runs", "correct_runs", "requests", "searches_asked", "finals", "bad_requests", "wrong_runs")
    return {"ok": ok, **{key: stats[key] for key in keys}}


def write_profile(profiler: Any, path: str) -> None:
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    with open(path, "w", encoding="utf-8") as file:
        file.write(out.getvalue())


async def serve(contender: contenders.Contender, base_url: str) -> None:
    """Answer ``RUNS WARMUP`` lines on stdin with one sequential sample each, until stdin closes.

    One process per contender then serves every repeat, so the harness can interleave many short
    samples without paying an interpreter start and the framework's import for each.
    """
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        runs, warmup = (int(field) for field in line.split())
        print(json.dumps(await sequential(contender, base_url, runs, warmup, None)), flush=True)


async def main_async(options: argparse.Namespace) -> dict[str, Any]:
    spec = contenders.spec(options.contender)
    contender = spec.make(options.base_url)
    try:
        if options.mode == "concurrent":
            return await concurrent(contender, options.base_url, options.runs, options.profile)
        if options.mode == "serve":
            await serve(contender, options.base_url)
            return {}
        return await sequential(contender, options.base_url, options.runs, options.warmup, options.profile)
    finally:
        await contender.aclose()


def main() -> None:
    """Run one sample and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contender", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--mode", choices=("seq", "concurrent", "serve"), default="seq")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", default=None)
    options = parser.parse_args()
    result = asyncio.run(main_async(options))
    if options.mode != "serve":
        print(json.dumps({"contender": options.contender, "mode": options.mode, **result}))


if __name__ == "__main__":
    main()
