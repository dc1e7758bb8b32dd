"""Done-by-executor with ``RepeatPolicy.STOP`` and ``RepeatPolicy.REFUSE`` on the embedded model.

Ten questions over the demo corpus, each answered by one passage, run by the demo's researcher
(the reflective prompt with a worked example) and by a plain-prompt researcher, under each policy.
Reported per cell: runs the executor ended itself (``EXECUTOR_DONE`` or ``NOTHING_RETRIEVED``),
runs whose items hold the answer passage, and the stop reasons. Needs the ``local`` extra (the
model runs on this machine's CPU, one thread, temperature 0).

    python -m benchmarks.repeat_policy [--questions N]
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
from agentkit._demo.agent import DEMO_CONFIG, Researcher
from agentkit._demo.search import BM25Index, Hit, load_corpus, search_tool
from agentkit.providers.local import LocalModel

QUESTIONS = (
    ("When was the Voyager 1 space probe launched?", "space-01"),
    ("Which metal is liquid at room temperature?", "chem-01"),
    ("When did Apollo 11 land on the Moon?", "space-03"),
    ("What is the tallest volcano in the Solar System?", "space-06"),
    ("At what temperature does ethanol boil?", "chem-03"),
    ("Who discovered penicillin, and when?", "bio-03"),
    ("What is the deepest lake on Earth?", "geo-03"),
    ("Who created the Python programming language?", "comp-05"),
    ("Where was the World Wide Web proposed, and by whom?", "comp-04"),
    ("When did the Wright brothers first fly a powered aircraft?", "hist-03"),
)


@dataclasses.dataclass(frozen=True)
class PlainResearcher:
    """A plain prompt: the task, the question and the results so far; no doctrine, no example."""

    model: str

    def role(self) -> RoleSpec:
        return RoleSpec(model=self.model, temperature=0.0, seed=7, max_tokens=200)

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        results = "\n".join(f"[{h.id}] {h.passage.title}: {h.passage.text}" for b in info.prior_results for h in b)
        return Prompt(
            system="You answer questions from a corpus of passages. Search it with the search_corpus tool, "
            "using a few keywords from the question. When the results contain the answer, set done to true.",
            dynamic=f"Question: {ctx}\n\nResults so far:\n{results or '(none)'}",
        )


async def ask(caller: Any, agent: Any, tool: Any, config: Any, count: int) -> list[tuple[Any, str]]:
    """The first ``count`` questions run through the loop, each result with the passage that answers it."""
    return [
        (await run_tool_loop(caller, agent, tool, question, config), passage) for question, passage in QUESTIONS[:count]
    ]


def tally(prompt: str, on_repeat: RepeatPolicy, answered: list[tuple[Any, str]], started: float) -> dict[str, Any]:
    """What ``ask`` gave, counted: runs the executor ended itself, answer passages found, stop reasons."""
    reasons = collections.Counter(result.stop_reason.value for result, _ in answered)
    return {
        "prompt": prompt,
        "on_repeat": on_repeat.value,
        "questions": len(answered),
        "done_by_executor": reasons["executor_done"] + reasons["nothing_retrieved"],
        "answer_passage_found": sum(any(hit.id == passage for hit in result.items) for result, passage in answered),
        "stop_reasons": dict(reasons),
        "seconds": round(time.perf_counter() - started, 1),
    }


async def cell(caller: Any, model: str, prompt: str, policy: RepeatPolicy, count: int) -> dict[str, Any]:
    tool = search_tool(BM25Index(load_corpus()))
    config = dataclasses.replace(DEMO_CONFIG, on_repeat=policy)
    agent: Any = Researcher(model=model, tools=(tool,)) if prompt == "demo" else PlainResearcher(model=model)
    started = time.perf_counter()
    return tally(prompt, policy, await ask(caller, agent, tool, config, count), started)


async def main(count: int, prompts: tuple[str, ...]) -> None:
    with LocalModel() as local:
        async with local.caller() as caller:
            for prompt in prompts:
                for policy in (RepeatPolicy.STOP, RepeatPolicy.REFUSE):
                    print(json.dumps(await cell(caller, local.model_name, prompt, policy, count)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--prompts", default="plain,demo", help="comma-separated: plain, demo")
    options = parser.parse_args()
    asyncio.run(main(options.questions, tuple(options.prompts.split(","))))
