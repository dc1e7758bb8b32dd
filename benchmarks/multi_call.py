"""Several calls in one step, measured on the embedded model (``python -m benchmarks.multi_call``).

Ten questions over the demo's bundled corpus whose answers need two or three passages (comparisons,
"which of these", a difference of years, chains), asked of the demo's researcher (the library's
``reflective_prompt`` and the retrieval recipe: ``min_calls=1``, ``RepeatPolicy.REFUSE``, an answer
that cites through ``Cites[Hit]``) with one call per step (``max_calls_per_step=1``) and with three
(``max_calls_per_step=3``; the prompt's rules and worked example then show a step of several calls).
The answer cites every passage it used (``passage_ids``, a list).

Per setting: the runs that retrieved every passage the answer needs, the answers that are correct (match
the case's pattern), the answers that cite every needed passage, the rounds and seconds per answer, and
the runs whose first step made more than one call. Prints one JSON object; ``--out`` also writes it and a
Markdown table there (``multi-call-<model>-<date>``), which ``docs/local-model.md`` quotes.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentkit import Cites, LoopConfig, Observer, Prompt, RepeatPolicy, RoleSpec, Tool, ToolLoop, ToolRoundInfo
from agentkit._demo.search import BM25Index, Hit, SearchArgs, load_corpus, search_tool
from agentkit.events import ToolCallStarted
from agentkit.prompting import USE_THE_TOOL, reflective_prompt, worked_example
from agentkit.providers.local import MODELS, LocalModel


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    name: str
    text: str
    passages: tuple[str, ...]
    """The ids of the passages the answer needs."""
    answer: str
    """A pattern the correct answer matches (case-insensitive)."""
    others: tuple[str, ...] = ()
    """Patterns of the question's wrong candidates (of "which of these"): a correct answer names the right one
    before any of them (an answer that lists every candidate, or leads with a wrong one, picks none)."""

    def graded(self, answer: str | None) -> bool:
        """Whether `answer` is correct: it matches `answer`, and names no other candidate before it."""
        if answer is None:
            return False
        right = re.search(self.answer, answer, re.IGNORECASE)
        if right is None:
            return False
        return all(
            (other := re.search(o, answer, re.IGNORECASE)) is None or other.start() > right.start() for o in self.others
        )


QUESTIONS = (
    Question(
        name="voyager-first",
        text="Which was launched first, Voyager 1 or Voyager 2?",
        passages=("space-01", "space-02"),
        answer=r"voyager 2",
        others=(r"voyager 1",),
    ),
    Question(
        name="deeper",
        text="Which is deeper: the Challenger Deep in the Mariana Trench, or Lake Baikal?",
        passages=("geo-02", "geo-03"),
        answer=r"challenger|mariana",
        others=(r"baikal",),
    ),
    Question(
        name="eniac-transistor",
        text="Which came first: the completion of ENIAC or the invention of the transistor?",
        passages=("comp-02", "comp-03"),
        answer=r"eniac",
        others=(r"transistor",),
    ),
    Question(
        name="web-python",
        text="Which came first: Tim Berners-Lee's proposal of the World Wide Web, or the first release of Python?",
        passages=("comp-04", "comp-05"),
        answer=r"web|berners|1989",
        others=(r"python",),
    ),
    Question(
        name="flight-penicillin",
        text="Which happened earlier: the Wright brothers' first powered flight, or Fleming's discovery of penicillin?",
        passages=("hist-03", "bio-03"),
        answer=r"flight|wright|1903",
        others=(r"penicillin|fleming",),
    ),
    Question(
        name="apollo-hubble-years",
        text="How many years after the Apollo 11 Moon landing was the Hubble Space Telescope put into orbit?",
        passages=("space-03", "space-07"),
        answer=r"\b21\b|twenty-one",
    ),
    Question(
        name="althing-gutenberg",
        text="Which is older: Iceland's parliament, the Althing, or Gutenberg's printing with movable type?",
        passages=("geo-06", "hist-01"),
        answer=r"althing|parliament|930",
        others=(r"gutenberg|printing",),
    ),
    Question(
        name="earliest-of-three",
        text="Of these three, which happened earliest: the Voyager 1 launch, the Apollo 11 Moon landing, or the "
        "Hubble Space Telescope's launch?",
        passages=("space-01", "space-03", "space-07"),
        answer=r"apollo",
        others=(r"voyager", r"hubble"),
    ),
    Question(
        name="python-kernel",
        text="The programming language named after Monty Python was first released in the same year as which "
        "operating system kernel was announced?",
        passages=("comp-05", "comp-06"),
        answer=r"linux",
    ),
    Question(
        name="discovered-first",
        text="Which of these was discovered or invented first: penicillin, the structure of DNA, or the transistor?",
        passages=("bio-03", "bio-01", "comp-03"),
        answer=r"penicillin",
        others=(r"\bdna\b", r"transistor"),
    ),
)
"""Each answer needs two or three passages of the demo's corpus."""


class CitedAnswer(BaseModel):
    """The answer, citing every passage it uses (ids the run retrieved: `Cites`)."""

    model_config = ConfigDict(extra="forbid")

    passage_ids: list[Cites[Hit]] = Field(description="The ids of every passage the answer uses, as in brackets.")
    answer: str = Field(max_length=200, description="The answer, in the passages' own words.")


CHECK = (
    "If the passages above state everything the question needs, set done to true; otherwise search for what is missing."
)
DOCTRINE = (
    "You are a research assistant: you answer questions only from the passages that the search_corpus tool "
    f"returns. {USE_THE_TOOL} A question may name several things: search for each of them, with a few keywords "
    "each. Stop (done: true) when the passages found state everything the answer needs. When you set done to "
    "true, give the answer and the ids of every passage it uses, as shown in brackets."
)


def example(max_calls: int) -> str:
    """The worked example: one search per step, or the two searches the example question needs in one step."""
    request = "Which is longer: the Golden Gate Bridge or the Brooklyn Bridge?"
    golden = "[ex-7] Golden Gate Bridge: The Golden Gate Bridge is 2,737 metres long."
    brooklyn = "[ex-9] Brooklyn Bridge: The Brooklyn Bridge is 1,834 metres long."
    answer = {"passage_ids": ["ex-7", "ex-9"], "answer": "The Golden Gate Bridge, 2,737 metres against 1,834."}
    if max_calls > 1:
        return worked_example(
            request,
            [SearchArgs(query="Golden Gate Bridge length"), SearchArgs(query="Brooklyn Bridge length")],
            [[golden], [brooklyn]],
            tool_name="search_corpus",
            check=CHECK,
            search_rationale="The question names two bridges; I search for both.",
            done_rationale="Passages ex-7 and ex-9 give both lengths.",
            answer=answer,
        )
    return worked_example(
        request,
        SearchArgs(query="Golden Gate Bridge Brooklyn Bridge length"),
        [golden, brooklyn],
        tool_name="search_corpus",
        check=CHECK,
        search_rationale="No results yet, so I must search.",
        done_rationale="Passages ex-7 and ex-9 give both lengths.",
        answer=answer,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Researcher:
    model: str
    tools: tuple[Tool[Any, Any], ...]
    max_calls: int

    def role(self) -> RoleSpec:
        return RoleSpec(model=self.model, temperature=0.0, seed=7, max_tokens=260)

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        return reflective_prompt(
            DOCTRINE,
            ctx,
            info,
            render_item=lambda hit: f"[{hit.id}] {hit.passage.title}: {hit.passage.text}",
            example=example(self.max_calls),
            tools=self.tools,
            check=CHECK,
            max_calls=self.max_calls,
        )


class Calls(Observer):
    """The calls of each round."""

    def __init__(self) -> None:
        self.rounds: dict[int, int] = {}

    def on_tool_call(self, event: ToolCallStarted) -> None:
        self.rounds[event.round] = self.rounds.get(event.round, 0) + 1


async def one_setting(caller: Any, model: str, max_calls: int) -> dict[str, Any]:
    tool = search_tool(BM25Index(load_corpus()))
    config = LoopConfig(
        max_rounds=4,
        rationale_max_length=160,
        min_calls=1,
        on_repeat=RepeatPolicy.REFUSE,
        max_calls_per_step=max_calls,
    )
    agent = Researcher(model=model, tools=(tool,), max_calls=max_calls)
    runs: list[dict[str, Any]] = []
    for question in QUESTIONS:
        calls = Calls()
        loop: ToolLoop[str, Any, Hit, CitedAnswer] = ToolLoop(
            caller, agent, tool, config, observer=calls, answer=CitedAnswer
        )
        started = time.perf_counter()
        result = await loop.run(question.text)
        seconds = time.perf_counter() - started
        retrieved = {hit.id for hit in result.items}
        given = result.answer
        needed = set(question.passages)
        run = {
            "case": question.name,
            "stop": result.stop_reason.value,
            "rounds": result.rounds,
            "seconds": round(seconds, 2),
            "calls_per_round": [calls.rounds.get(n, 0) for n in range(1, result.rounds + 1)],
            "all_retrieved": needed <= retrieved,
            "answered": given is not None,
            "answer": None if given is None else given.answer,
            "cited": [] if given is None else list(given.passage_ids),
            "correct": question.graded(None if given is None else given.answer),
            "cites_all": given is not None and needed <= set(given.passage_ids),
        }
        print(f"max_calls_per_step={max_calls} {json.dumps(run)}", file=sys.stderr, flush=True)
        runs.append(run)
    return summed(max_calls, runs)


def summed(max_calls: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A setting's counts over its runs."""
    n = len(runs)
    return {
        "max_calls_per_step": max_calls,
        "runs": n,
        "all_retrieved": sum(r["all_retrieved"] for r in runs),
        "answered": sum(r["answered"] for r in runs),
        "correct": sum(r["correct"] for r in runs),
        "cites_all": sum(r["cites_all"] for r in runs),
        "several_calls_first_round": sum(bool(r["calls_per_round"]) and r["calls_per_round"][0] > 1 for r in runs),
        "rounds_per_answer": round(sum(r["rounds"] for r in runs) / n, 2),
        "seconds_per_answer": round(sum(r["seconds"] for r in runs) / n, 2),
        "cases": runs,
    }


async def measure(
    size: str, threads: int, settings: Sequence[int], request_seconds: float, out: Path | None, *, together: bool
) -> dict[str, Any]:
    """Each setting in turn, on one model server; `together`: all at once, each on a server of its own (on a
    machine whose cores other work shares, each setting then gets its share of them). With `out`, the results
    file is written again after each setting (a run cut short keeps the settings it finished)."""
    report: dict[str, Any] = {"model": size, "threads": threads, "together": together, "settings": []}

    finished: dict[int, dict[str, Any]] = {}

    async def on_its_own(n: int) -> None:
        async with LocalModel(MODELS[size], threads=threads) as local:
            caller = local.caller(timeout=request_seconds)
            try:
                finished[n] = await one_setting(caller, local.model_name, n)
            finally:
                await caller.aclose()
        report["settings"] = [finished[m] for m in settings if m in finished]
        if out is not None:
            write(report, out)

    if together:
        await asyncio.gather(*(on_its_own(n) for n in settings))
        return report
    async with LocalModel(MODELS[size], threads=threads) as local:
        caller = local.caller(timeout=request_seconds)
        try:
            for n in settings:
                report["settings"].append(await one_setting(caller, local.model_name, n))
                if out is not None:
                    write(report, out)
        finally:
            await caller.aclose()
    return report


def regraded(report: dict[str, Any]) -> dict[str, Any]:
    """`report` with each case's answer graded again by its question's `graded` (the answers as the model gave
    them), and each setting's counts summed again; it says so (`regraded`)."""
    questions = {question.name: question for question in QUESTIONS}
    settings = []
    for setting in report["settings"]:
        cases = [case | {"correct": questions[case["case"]].graded(case["answer"])} for case in setting["cases"]]
        settings.append(summed(setting["max_calls_per_step"], cases))
    return report | {"settings": settings, "regraded": time.strftime("%Y-%m-%d")}


def write(report: dict[str, Any], out: Path) -> None:
    report |= {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    out.mkdir(parents=True, exist_ok=True)
    stem = f"multi-call-{report['model']}-{report['date']}"  # not Path.with_suffix: "0.5b" holds a dot
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(out / f"{stem}.json"))


def markdown(path: Path) -> str:
    """The table of the results file at `path` (named from the repository root when it is in it, else whole)."""
    from benchmarks.publish import ROOT, multi_call

    whole = path.resolve()
    return multi_call([whole.relative_to(ROOT).as_posix() if whole.is_relative_to(ROOT) else str(whole)]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="0.5b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settings", type=int, nargs="+", default=[1, 3], help="max_calls_per_step values")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one model request may take")
    parser.add_argument("--together", action="store_true", help="run the settings at once, a model server each")
    parser.add_argument("--out", type=Path, help="also write multi-call-<model>-<date>.json and .md here")
    parser.add_argument(
        "--regrade", type=Path, metavar="FILE", help="grade a results file's answers again (no model run) and write it"
    )
    args = parser.parse_args()
    if args.regrade is not None:
        report = regraded(json.loads(args.regrade.read_text()))
        args.regrade.write_text(json.dumps(report, indent=2) + "\n")
        args.regrade.with_suffix(".md").write_text(markdown(args.regrade))
        print(json.dumps([{k: v for k, v in setting.items() if k != "cases"} for setting in report["settings"]]))
        return
    report = asyncio.run(
        measure(args.model, args.threads, args.settings, args.timeout, args.out, together=args.together)
    )
    summary = [{k: v for k, v in setting.items() if k != "cases"} for setting in report["settings"]]
    print(json.dumps({k: v for k, v in report.items() if k != "settings"} | {"settings": summary}))


if __name__ == "__main__":
    main()
