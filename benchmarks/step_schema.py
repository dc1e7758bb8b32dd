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
import dataclasses
import json
import time
from typing import Any

from agentkit import Prompt, RepeatPolicy, RoleSpec, ToolRoundInfo
from agentkit._demo.agent import _RESEARCH_DOCTRINE, DEMO_CONFIG, RESEARCH_CHECK
from agentkit._demo.search import BM25Index, Hit, load_corpus, search_tool
from agentkit._tools import Tool
from agentkit.prompting import reflective_prompt
from agentkit.providers.local import LocalModel
from benchmarks.repeat_policy import QUESTIONS, PlainResearcher, ask, tally


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
    started = time.perf_counter()
    answered = await ask(caller, agent, tool, config, count)
    # A round whose model call failed has a record with an error and no tool; every other round got a step.
    valid = sum(not (r.error and r.tool_name is None) for result, _ in answered for r in result.trace)
    replies = sum(result.usage.requests for result, _ in answered)
    return {"valid_steps": valid, "replies": replies} | tally(prompt, on_repeat, answered, started)


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
