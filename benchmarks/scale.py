"""Many concurrent runs in one process: ``python -m benchmarks.scale``.

For each count (1,000 to 10,000 by default) a fresh worker process (``benchmarks.worker --mode
concurrent``) starts that many runs of the scenario at once with ``asyncio.gather`` on one client,
against the lean loopback server (``benchmarks.server``, its own process), and reports wall time,
client CPU, peak RSS, and memory per in-flight run ((peak RSS - RSS before) / runs). CPU per run
that stays flat as the count grows means nothing in the path scales worse than linearly; the
server-side check makes sure every run did its 4 rounds. ``--profile N`` writes a cProfile of the
N-run sample to ``results/profile-scale-<contender>-<N>.txt``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness


def sample(contender: str, base_url: str, runs: int, profile: Path | None) -> dict[str, Any]:
    args = ["--contender", contender, "--base-url", base_url, "--runs", str(runs), "--mode", "concurrent"]
    if profile is not None:
        args += ["--profile", str(profile)]
    try:
        return harness.worker(args, timeout=1800)
    except RuntimeError as error:
        return {"runs": runs, "error": str(error)}


def row(contender: str, figures: dict[str, Any]) -> str:
    if "error" in figures:
        return f"| `{contender}` | {figures['runs']:,} | failed: {figures['error'][:80]} | | | | | | |"
    runs = figures["runs"]
    peak_mib = figures["peak_rss_kib"] / 1024
    per_run_kib = (figures["peak_rss_kib"] - figures["rss_before_kib"]) / runs
    cells = [
        f"`{contender}`",
        f"{runs:,}",
        f"{figures['wall']:.2f}",
        f"{figures['cpu'] / runs * 1e3:.2f}",
        f"{figures['cpu'] / (runs * 4) * 1e3:.3f}",
        f"{peak_mib:.0f}",
        f"{per_run_kib:.1f}",
        str(figures["errors"]),
        "yes" if figures["check"]["ok"] else f"**no** ({figures['check']})",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| contender | concurrent runs | wall s | client CPU ms/run | client CPU ms/round | peak RSS MiB "
    "| KiB per in-flight run | errors | every run checked |\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--contenders", default="agentkit-json_schema,raw-openai,raw-httpx")
    parser.add_argument("--runs", default="1000,2000,5000,10000", help="comma-separated counts")
    parser.add_argument("--profile", type=int, default=0, help="profile the sample of this many runs")
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    ns = parser.parse_args(argv)
    counts = [int(count) for count in ns.runs.split(",")]
    names = [name.strip() for name in ns.contenders.split(",") if name.strip()]
    ns.out.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[dict[str, Any]]] = {}
    env = harness.environment()
    with harness.serving() as (base_url, _):
        for name in names:
            for count in counts:
                harness.log(f"{count:,} concurrent runs: {name}")
                profile = ns.out / f"profile-scale-{name}-{count}.txt" if count == ns.profile else None
                found.setdefault(name, []).append(sample(name, base_url, count, profile))
    table = "\n".join([HEADER, *(row(name, figures) for name in names for figures in found[name])])
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    env["load_after"] = os.getloadavg()
    load = f"load average {env['load_before'][0]:.2f} before, {env['load_after'][0]:.2f} after"
    machine = f"Machine: {env['machine']}; {load}."
    (ns.out / "scale-latest.json").write_text(
        json.dumps({"date": stamp, "environment": env, "samples": found}, indent=2, default=str)
    )
    (ns.out / "scale-latest.md").write_text(f"# Concurrent runs in one process, {stamp}\n\n{machine}\n\n{table}\n")
    print(table)
    failed = any("error" in f or f["errors"] or not f["check"]["ok"] for fs in found.values() for f in fs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
