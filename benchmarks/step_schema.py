"""Valid steps and done-by-executor on the embedded model, with a plain prompt and with ``reflective_prompt``.

Ten questions over the demo corpus (those of ``benchmarks.repeat_policy``), each answered by one
passage, run under ``DEMO_CONFIG`` by a plain-prompt researcher and by a researcher whose prompt
is ``reflective_prompt`` with the ``USE_THE_TOOL`` doctrine, the search tool listed and a check
line, but no worked example. Reported per prompt: replies that validated as a step out of the
replies the model gave (re-asks included), runs the executor ended itself (``EXECUTOR_DONE`` or
``NOTHING_RETRIEVED``), runs whose items hold the answer passage, and the stop reasons. Needs the
``local`` extra (the model runs on this machine's CPU, one thread, temperature 0).

    python -m benchmarks.step_schema [--questions N] [--prompts plain,reflective] [--on-repeat stop|refuse]

It imports only names that existed before the step schema became a union, so the same script
measures an older checkout (``PYTHONPATH=<old checkout> python -m benchmarks.step_schema``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import time
from typing import Any

from agentkit import Prompt, RepeatPolicy, RoleSpec, ToolRoundInfo, run_tool_loop
from agentkit.demo.agent import _RESEARCH_DOCTRINE, DEMO_CONFIG, RESEARCH_CHECK
from agentkit.demo.search import BM25Index, Hit, load_corpus, search_tool
from agentkit.local import LocalModel
from agentkit.prompting import reflective_prompt
from agentkit.tools import Tool
from benchmarks.repeat_policy import QUESTIONS, PlainResearcher


def _passage_line(hit: Hit) -> str:
    return f"[{hit.id}] {hit.passage.title}: {hit.passage.text}"


@dataclasses.dataclass(frozen=True)
class ReflectiveResearcher:
    """``reflective_prompt``: the demo's doctrine (``USE_THE_TOOL``), the tool listed, the check line; no example."""

    model: str
    tools: tuple[Tool[Any, Any], ...]

    def role(self) -> RoleSpec:
        return RoleSpec(model=self.model, temperature=0.0, seed=7, max_tokens=200)

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        return reflective_prompt(
            _RESEARCH_DOCTRINE, ctx, info, render_item=_passage_line, tools=self.tools, check=RESEARCH_CHECK
        )


async def cell(
    caller: Any, model: str, prompt: str, count: int, on_repeat: RepeatPolicy = RepeatPolicy.STOP
) -> dict[str, Any]:
    tool = search_tool(BM25Index(load_corpus()))
    config = dataclasses.replace(DEMO_CONFIG, on_repeat=on_repeat)
    agent: Any = ReflectiveResearcher(model=model, tools=(tool,)) if prompt == "reflective" else PlainResearcher(model)
    done = found = replies = valid = 0
    reasons: collections.Counter[str] = collections.Counter()
    started = time.perf_counter()
    for question, passage in QUESTIONS[:count]:
        result = await run_tool_loop(caller, agent, tool, question, config)
        reasons[result.stop_reason.value] += 1
        done += result.stop_reason.value in ("executor_done", "nothing_retrieved")
        found += any(hit.id == passage for hit in result.items)
        replies += result.usage.requests
        # A round whose model call failed has a record with an error and no tool; every other round got a step.
        valid += sum(1 for record in result.trace if not (record.error and record.tool_name is None))
    return {
        "prompt": prompt,
        "on_repeat": on_repeat.value,
        "questions": count,
        "valid_steps": valid,
        "replies": replies,
        "done_by_executor": done,
        "answer_passage_found": found,
        "stop_reasons": dict(reasons),
        "seconds": round(time.perf_counter() - started, 1),
    }


async def main(count: int, prompts: tuple[str, ...], on_repeat: RepeatPolicy) -> None:
    with LocalModel() as local:
        async with local.caller() as caller:
            for prompt in prompts:
                print(json.dumps(await cell(caller, local.model_name, prompt, count, on_repeat)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--prompts", default="plain,reflective", help="comma-separated: plain, reflective")
    parser.add_argument("--on-repeat", choices=[p.value for p in RepeatPolicy], default=RepeatPolicy.STOP.value)
    options = parser.parse_args()
    asyncio.run(main(options.questions, tuple(options.prompts.split(",")), RepeatPolicy(options.on_repeat)))
