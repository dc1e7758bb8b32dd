"""The loop itself, without HTTP: ``run_tool_loop`` over a ``ScriptedCaller``, per round.

The scripted replies are step instances built ahead of time, so the caller only hands them back
(no JSON, no validation); the tool returns a fixed batch and the agent renders a prompt of fixed
size. What is left is the loop's own work per round: the request, the retry wrapper, the
degeneration check, the tier gate, the dispatch, the records. A hand-written loop over the same
script and tool gives the baseline that work is read against. Runs of 1 and of 50 rounds show
whether the cost per round grows with the round count (it should not: only the agent's own
prompt may grow, and here it does not).

``python -m benchmarks.microbench`` prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from pydantic import BaseModel

from agentkit import (
    LoopConfig,
    Prompt,
    RoleSpec,
    StopReason,
    StructuredRequest,
    Tier,
    ToolRoundInfo,
    ToolStep,
    run_tool_loop,
    tool,
)
from agentkit._step import build_step_model
from agentkit.testing import ScriptedCaller
from benchmarks import scenario

BATCH = scenario.search_items("fixed")
_DONE = (StopReason.EXECUTOR_DONE, StopReason.NOTHING_RETRIEVED)


@tool(tier=Tier.READ_ONLY)
def search(args: scenario.SearchArgs) -> list[scenario.Item]:
    """Search the corpus."""
    return BATCH


class FixedPrompt:
    """An executor whose prompt does not grow with the round count."""

    def role(self) -> RoleSpec:
        return RoleSpec(model=scenario.MODEL)

    def render(self, ctx: str, info: ToolRoundInfo[scenario.Item]) -> Prompt:
        return Prompt(system=scenario.SYSTEM, dynamic=f"{ctx} round {info.round}")


def script(rounds: int) -> list[BaseModel]:
    """``rounds - 1`` distinct searches, then done."""
    step = build_step_model(scenario.SearchArgs)
    calls: list[BaseModel] = [step(done=False, call=scenario.SearchArgs(query=f"q{k}")) for k in range(rounds - 1)]
    return [*calls, step(done=True)]


async def agentkit_runs(rounds: int, runs: int) -> float:
    """Seconds for ``runs`` runs of ``rounds`` rounds through ``run_tool_loop``."""
    scripts = [script(rounds) for _ in range(runs)]
    agent = FixedPrompt()
    config = LoopConfig(max_rounds=rounds)
    started = time.perf_counter()
    for steps in scripts:
        result = await run_tool_loop(ScriptedCaller(steps), agent, search, "question", config)
        if result.stop_reason not in _DONE or result.rounds != rounds:
            raise AssertionError(f"scripted run ended {result.stop_reason} after {result.rounds} rounds")
    return time.perf_counter() - started


async def baseline_runs(rounds: int, runs: int) -> float:
    """Seconds for the same script through a minimal hand-written loop (the same caller and tool)."""
    scripts = [script(rounds) for _ in range(runs)]
    agent = FixedPrompt()
    model = build_step_model(scenario.SearchArgs)
    started = time.perf_counter()
    for steps in scripts:
        caller = ScriptedCaller(steps)
        items: list[scenario.Item] = []
        role = agent.role()
        for round in range(1, rounds + 1):
            prompt = agent.render("question", ToolRoundInfo(round=round, max_rounds=rounds, is_final_round=False))
            request = StructuredRequest(system=prompt.system, dynamic=prompt.dynamic, model=role.model)
            step: ToolStep[Any] = (await caller.complete(request, model)).value
            if step.done or step.call is None:
                break
            items.extend(await search.call(step.call))
    return time.perf_counter() - started


def measure(repeats: int = 7, runs_per_round_count: int = 2000) -> dict[str, Any]:
    """Microseconds per round for 1 and 50 rounds, agentkit and the hand-written baseline."""
    figures: dict[str, Any] = {}
    for rounds in (1, 50):
        runs = max(runs_per_round_count // rounds, 20)
        asyncio.run(agentkit_runs(rounds, 10))
        asyncio.run(baseline_runs(rounds, 10))
        loop_samples, base_samples = [], []
        for _ in range(repeats):
            loop_samples.append(asyncio.run(agentkit_runs(rounds, runs)) / (runs * rounds) * 1e6)
            base_samples.append(asyncio.run(baseline_runs(rounds, runs)) / (runs * rounds) * 1e6)
        loop_us, base_us = statistics.median(loop_samples), statistics.median(base_samples)
        figures[str(rounds)] = {
            "runs": runs,
            "agentkit_us_per_round": loop_us,
            "agentkit_spread": [min(loop_samples), max(loop_samples)],
            "baseline_us_per_round": base_us,
            "baseline_spread": [min(base_samples), max(base_samples)],
            "overhead_us_per_round": loop_us - base_us,
        }
    return figures


def main() -> None:
    """Print the microbenchmark's figures as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2000, help="rounds per sample (split into runs)")
    options = parser.parse_args()
    print(json.dumps(measure(options.repeats, options.runs)))


if __name__ == "__main__":
    main()
