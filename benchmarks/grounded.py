"""Grounded retrieval on the embedded models, measured (``python -m benchmarks.grounded``).

The demo's 24 questions (``agentkit.evals.demo.QUESTIONS``) run on an embedded model (``--model 0.5b``
or ``1.5b``) with two prompts and with and without the retrieval recipe:

- prompts: ``plain``, written by hand (the question and the passages found so far), and
  ``reflective``, the demo's researcher (``reflective_prompt`` with ``USE_THE_TOOL`` and a worked example);
- ``recipe``: ``min_calls=1`` (no done before a search ran), ``RepeatPolicy.REFUSE``, and an answer
  whose ``passage_id`` is ``Cites[Hit]`` (restricted to retrieved ids); ``no recipe``: the same answer
  with a plain ``str`` id, repeats ending the run, done allowed at once.

Per variant: the share of model replies that were valid steps, of runs the executor ended itself,
of runs that retrieved the answer's passage, of answers that are correct (match the case's pattern),
of answers whose citation names a retrieved passage, and the seconds per round. Each answer is then checked
against the passage it cites, as the demo checks it (``agentkit._demo.check.AnswerVerifier``: the rules, then
one judge call on the same model): the answers supported and not supported, and how often that verdict and the
case's pattern disagree. Prints one JSON object; ``--out`` also writes it and a Markdown table there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentkit import LoopConfig, Observer, Prompt, RoleSpec, StopReason, ToolLoop, ToolRoundInfo
from agentkit._demo.agent import DEMO_CONFIG, GroundedAnswer, Researcher
from agentkit._demo.check import AnswerVerifier
from agentkit._demo.search import BM25Index, Hit, load_corpus, search_tool
from agentkit.errors import AgentkitError
from agentkit.evals.demo import QUESTIONS
from agentkit.events import LLMCallFinished
from agentkit.providers.local import MODELS, LocalModel

NO_RECIPE = LoopConfig(max_rounds=4, rationale_max_length=160)


class LooseAnswer(BaseModel):
    """The answer without the recipe: any id may be written."""

    model_config = ConfigDict(extra="forbid")

    passage_id: str = Field(max_length=40, description="The id of the passage that states the answer, as in brackets.")
    answer: str = Field(max_length=200, description="The answer, in the passage's own words.")


class PlainResearcher:
    """A prompt written by hand: what to do, the question, the passages found so far."""

    def __init__(self, model: str) -> None:
        self.model = model

    def role(self) -> RoleSpec:
        return RoleSpec(model=self.model, temperature=0.0, seed=7, max_tokens=200)

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        found = [f"[{hit.id}] {hit.passage.title}: {hit.passage.text}" for batch in info.prior_results for hit in batch]
        shown = "\n".join(found) if found else "(none yet)"
        system = (
            "You answer questions from a corpus of short passages, using the search_corpus tool to find them. "
            "When a passage found states the answer, reply done with the answer and the id of that passage."
        )
        return Prompt(system=system, dynamic=f"Question: {ctx}\n\nPassages found so far:\n{shown}")


class Replies(Observer):
    """Counts the model's replies and the invalid ones."""

    def __init__(self) -> None:
        self.calls = 0
        self.invalid = 0

    def on_llm_call(self, event: LLMCallFinished) -> None:
        self.calls += 1
        self.invalid += event.error is not None


async def one_variant(caller: Any, model: str, prompt: str, recipe: bool) -> dict[str, Any]:
    index = BM25Index(load_corpus())
    tool = search_tool(index)
    agent: Any = Researcher(model=model, tools=(tool,)) if prompt == "reflective" else PlainResearcher(model)
    config = DEMO_CONFIG if recipe else NO_RECIPE
    answer: Any = GroundedAnswer if recipe else LooseAnswer
    replies = Replies()
    loop: ToolLoop[str, Any, Hit, Any] = ToolLoop(caller, agent, tool, config, observer=replies, answer=answer)
    runs: list[dict[str, Any]] = []
    rounds = 0
    seconds = judging = 0.0
    for case in QUESTIONS.cases:
        started = time.perf_counter()
        result = await loop.run(case.ctx)
        seconds += time.perf_counter() - started
        rounds += result.rounds
        passage = str(case.metadata["passage"])
        retrieved = {hit.id for hit in result.items}
        given = result.answer
        pattern = case.expect.answer_matches["answer"]
        started = time.perf_counter()
        verdict = await check(caller, model, case.ctx, result.items, given)
        judging += time.perf_counter() - started
        supported = verdict["supported"]
        shown = (
            "supported"
            if supported
            else f"not supported: {verdict['verdict']}"
            if supported is False
            else verdict["verdict"]
        )
        print(
            f"{prompt} {'recipe' if recipe else 'no recipe'} {case.name}: {shown}",
            file=sys.stderr,
            flush=True,
        )
        runs.append(
            {
                "case": case.name,
                "stop": result.stop_reason.value,
                "retrieved": passage in retrieved,
                "answered": given is not None,
                "correct": given is not None and re.search(pattern, given.answer, re.IGNORECASE) is not None,
                "cited_valid": given is not None and given.passage_id in retrieved,
            }
            | verdict
        )
    answered = sum(r["answered"] for r in runs)
    checked = [r for r in runs if r["supported"] is not None]
    return {
        "prompt": prompt,
        "recipe": recipe,
        "runs": len(runs),
        "valid_steps": round(1 - replies.invalid / max(replies.calls, 1), 3),
        "executor_ended": sum(r["stop"] == StopReason.EXECUTOR_DONE.value for r in runs),
        "passage_retrieved": sum(r["retrieved"] for r in runs),
        "answered": answered,
        "correct": sum(r["correct"] for r in runs),
        "citations_valid": sum(r["cited_valid"] for r in runs),
        "supported": sum(r["supported"] is True for r in runs),
        "unsupported": sum(r["supported"] is False for r in runs),
        "verdict_disagrees": sum(r["supported"] != r["correct"] for r in checked),
        "seconds_per_round": round(seconds / max(rounds, 1), 2),
        "seconds_per_check": round(judging / max(len(checked), 1), 2),
        "cases": runs,
    }


async def check(
    caller: Any, model: str, question: str, retrieved: Sequence[Hit], given: BaseModel | None
) -> dict[str, Any]:
    """The demo's verdict on an answer: ``supported`` (``None``: no answer, or the judge's call failed), why
    not, and whether the rules decided it (no model call) or the judge did."""
    if given is None:
        return {"supported": None, "verdict": "no answer", "judged": False}
    try:
        review = await AnswerVerifier(caller, model, question, retrieved).review(given)
    except AgentkitError as error:
        return {"supported": None, "verdict": f"unchecked: {error}", "judged": True}
    return {"supported": review.approved, "verdict": review.feedback, "judged": review.usage.requests > 0}


async def measure(size: str, threads: int, variants: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    async with LocalModel(MODELS[size], threads=threads) as local:
        caller = local.caller()
        try:
            results = [await one_variant(caller, local.model_name, prompt, recipe) for prompt, recipe in variants]
        finally:
            await caller.aclose()
    return {"model": size, "threads": threads, "variants": results}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"The demo's {report['variants'][0]['runs']} questions on the embedded {report['model']} model "
        f"({report['threads']} threads); {report['date']}, {report['machine']}.",
        "",
        "| prompt | recipe | valid steps | the executor ended the run | answer passage retrieved | answered "
        "| answer correct | citation names a retrieved passage | supported by the cited passage "
        "| not supported | verdict and pattern disagree | s per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report["variants"]:
        n, answered = v["runs"], v["answered"]
        lines.append(
            f"| {v['prompt']} | {'yes' if v['recipe'] else 'no'} | {v['valid_steps']:.0%} | {v['executor_ended']}/{n} "
            f"| {v['passage_retrieved']}/{n} | {answered}/{n} | {v['correct']}/{n} "
            f"| {v['citations_valid']}/{answered} | {v['supported']}/{answered} | {v['unsupported']}/{answered} "
            f"| {v['verdict_disagrees']}/{v['supported'] + v['unsupported']} | {v['seconds_per_round']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="0.5b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--only", choices=["recipe", "all"], default="all", help="recipe: the reflective prompt with it"
    )
    parser.add_argument("--out", type=Path, help="also write grounded-<model>-<date>.json and .md here")
    args = parser.parse_args()
    variants = (
        [("reflective", True)]
        if args.only == "recipe"
        else [
            ("plain", False),
            ("plain", True),
            ("reflective", False),
            ("reflective", True),
        ]
    )
    report = asyncio.run(measure(args.model, args.threads, variants))
    report |= {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(
        json.dumps(
            {k: v for k, v in report.items() if k != "variants"}
            | {"variants": [{k: v for k, v in variant.items() if k != "cases"} for variant in report["variants"]]}
        )
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = f"grounded-{args.model}-{report['date']}"  # not Path.with_suffix: "0.5b" holds a dot
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / f"{stem}.md").write_text(markdown(report))


if __name__ == "__main__":
    main()
