"""The demo's agents: a retrieval executor, an answer writer, and a curator whose delete is proposed.

The prompts are written for small models, following what was measured on a 0.5B model: the
step's free-text ``rationale`` comes before ``done`` (constrained decoding emits fields in schema
order, so the model reasons before it decides) and is bounded in length, the rules say "use the
tool, do not answer from memory", and one worked example shows the exact step shape. With a
plain prompt the same model answered from memory every time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentkit.agent import Prompt, RoleSpec, ToolRoundInfo
from agentkit.config import LoopConfig
from agentkit.demo.search import BM25Index, Hit, search_tool
from agentkit.errors import ToolRetry
from agentkit.loop import run_tool_loop, run_tool_loop_tiered
from agentkit.observe import ObserverArg
from agentkit.once import OnceResult, RoundInfo, run_once
from agentkit.results import TieredLoopResult, ToolLoopResult
from agentkit.structured import StructuredCaller
from agentkit.tiers import Tier
from agentkit.tools import FunctionTool

__all__ = [
    "ANSWER_MAX_LENGTH",
    "DEMO_CONFIG",
    "PLANNING_TASK",
    "QUESTIONS",
    "AnswerWriter",
    "Curator",
    "DeleteArgs",
    "Researcher",
    "answer",
    "answer_schema",
    "delete_tool",
    "plan",
    "research",
]

QUESTIONS = (
    "When was the Voyager 1 space probe launched?",
    "Which metal is liquid at room temperature?",
    "Who wrote the first published computer program, and for which machine?",
)
"""The demo's default questions; each answer is in one bundled passage."""

PLANNING_TASK = (
    "The corpus still holds an archived entry that calls Pluto the ninth planet, which has been wrong since "
    "2006. Find that passage and delete it."
)
"""The tiered example's task: a read (search) runs live, the delete becomes a proposal."""

DEMO_CONFIG = LoopConfig(max_rounds=4, rationale_max_length=160)
"""Four rounds, and a bounded rationale: a small model runs on to the token limit without one."""

ANSWER_MAX_LENGTH = 200
"""Longest answer the answer writer may give."""

_RULES = """\
You are a research assistant. You answer questions ONLY from passages returned by the \
search_corpus tool. Do not answer from memory, even when you think you know the answer: \
search first.

Each turn, reply with one JSON step:
- "rationale": one short sentence: what the results so far say, and what is still missing.
- "done": false with a "call", to search; true with "call": null, to stop.
Search while no passage in the results states the answer; use a few keywords from the question. \
Stop (done: true) as soon as a passage in the results states the answer, or when two searches \
found nothing useful. Never repeat a query you already made."""

_EXAMPLE = """\
Example, round 1 (a different corpus):
Question: How long is the Golden Gate Bridge?
Results so far:
(none yet: search first)
Step: {"rationale": "No results yet, so I must search.", "done": false, \
"call": {"query": "Golden Gate Bridge length"}}

Example, round 2:
Question: How long is the Golden Gate Bridge?
Results so far:
Round 1: search_corpus {"query": "Golden Gate Bridge length"}
  [ex-7] Golden Gate Bridge: The Golden Gate Bridge is 2,737 metres long.
Step: {"rationale": "Passage ex-7 states the answer: 2,737 metres.", "done": true, "call": null}"""

_SEARCH_DESCRIPTION = "keyword search over short factual passages; returns the best matches with their ids."


def _results_text(info: ToolRoundInfo[Hit]) -> str:
    lines: list[str] = []
    for prior in info.prior_calls:
        args = json.dumps(prior.args.model_dump(mode="json"), ensure_ascii=False)
        lines.append(f"Round {prior.round}: {prior.tool_name} {args}")
        if prior.observation is not None:
            lines.append(f"  -> {prior.observation}")
        elif not prior.batch:
            lines.append("  -> no passage matched")
        for hit in prior.batch:
            lines.append(f"  [{hit.id}] {hit.passage.title}: {hit.passage.text}")
    return "\n".join(lines) if lines else "(none yet: search first)"


def _budget_line(info: ToolRoundInfo[Any], check: str) -> str:
    of = f" of {info.max_rounds}" if info.max_rounds is not None else ""
    if info.is_final_round:
        return f"Round {info.round}{of}, the last: stop now with done: true."
    if not info.prior_calls:
        return f"Round {info.round}{of}. No results yet: search."
    return f"Round {info.round}{of}. {check}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Researcher:
    """The retrieval executor: searches the corpus until a passage answers the question."""

    model: str
    """The model to ask."""
    seed: int = 7
    """Sampling seed; with temperature 0 a run repeats exactly on servers that honour both."""
    max_tokens: int = 200
    """Reply token limit; the step is short JSON."""

    def role(self) -> RoleSpec:
        """Deterministic settings: temperature 0 and a fixed seed."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_researcher"
        )

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        """The stable rules and example, then the question and the passages found so far."""
        system = f"{_RULES}\n\nTool: search_corpus(query): {_SEARCH_DESCRIPTION}\n\n{_EXAMPLE}"
        check = "If a passage above states the answer, stop with done: true; otherwise search with new keywords."
        dynamic = f"Question: {ctx}\nResults so far:\n{_results_text(info)}\n\n{_budget_line(info, check)}"
        return Prompt(system=system, dynamic=dynamic)


class _AnswerBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    passage_id: str
    answer: str


def answer_schema(passage_ids: Sequence[str]) -> type[_AnswerBase]:
    """The answer's schema: the id of one retrieved passage (an enum of them), then the answer.

    The id comes first so that the model picks its source before it writes, and it can only pick
    a passage it was shown.
    """
    choices: Any = Literal[tuple(dict.fromkeys(passage_ids))]
    model: type[_AnswerBase] = create_model(
        "Answer",
        __base__=_AnswerBase,
        passage_id=(choices, Field(description="The id of the passage that states the answer.")),
        answer=(str, Field(max_length=ANSWER_MAX_LENGTH, description="The answer, in the passage's own words.")),
    )
    return model


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerCtx:
    """What the answer writer sees: the question and the passages retrieved for it."""

    question: str
    hits: Sequence[Hit]


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerWriter:
    """Writes the final answer from the retrieved passages, citing one of them."""

    model: str
    seed: int = 7
    max_tokens: int = 160

    def role(self) -> RoleSpec:
        """Deterministic settings, as for the researcher."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_answer"
        )

    def render(self, ctx: AnswerCtx, info: RoundInfo) -> Prompt:
        """Rules, then the question and the passages."""
        system = (
            'Answer the question using only the passages given. Reply with JSON: first "passage_id", the id of '
            'the passage that states the answer, then "answer", one short sentence taken from that passage. Do '
            "not add facts that the passage does not state."
        )
        passages = "\n".join(f"[{h.id}] {h.passage.title}: {h.passage.text}" for h in _unique(ctx.hits))
        return Prompt(system=system, dynamic=f"Question: {ctx.question}\n\nPassages:\n{passages}")


def _unique(hits: Sequence[Hit]) -> list[Hit]:
    seen: dict[str, Hit] = {}
    for hit in hits:
        seen.setdefault(hit.id, hit)
    return list(seen.values())


class DeleteArgs(BaseModel):
    """Arguments of ``delete_passage``."""

    model_config = ConfigDict(extra="forbid")

    passage_id: str = Field(max_length=40, description="The id of the passage to delete, as shown in brackets.")
    reason: str = Field(max_length=120, description="Why it must go, in a few words.")


def delete_tool(index: BM25Index) -> FunctionTool[DeleteArgs, str]:
    """``delete_passage`` over ``index``: irreversible, so a loop only ever proposes it.

    Its ``passage_id`` is an enum of the index's ids, so even a small model can only name a
    passage that exists. Run by its owner after an approval, it removes the passage and returns
    its id.
    """
    ids: Any = Literal[tuple(p.id for p in index.passages)]
    args_type: type[DeleteArgs] = create_model(
        "DeleteArgs",
        __base__=DeleteArgs,
        passage_id=(ids, Field(description="The id of the passage to delete, as shown in brackets.")),
    )

    def delete_passage(args: DeleteArgs) -> Sequence[str]:
        if index.get(args.passage_id) is None:
            raise ToolRetry(f"there is no passage {args.passage_id!r}; use an id shown in brackets")
        return [index.remove(args.passage_id).id]

    return FunctionTool(
        name="delete_passage",
        description="Permanently delete one passage from the corpus, by id.",
        args_type=args_type,
        tier=Tier.IRREVERSIBLE,
        fn=delete_passage,
    )


_CURATOR_RULES = """\
You are a corpus curator. You find passages with the search_corpus tool and remove a wrong one \
with the delete_passage tool. Never guess an id: delete only a passage id that a search returned.

Each turn, reply with one JSON step:
- "rationale": one short sentence: what the results so far say, and what is still missing.
- "done": false with a "call" {"tool": <name>, "args": {...}}; or true with "call": null.
First search for the passage. Once a search returned it, call delete_passage with its id.

Tools:
- search_corpus {"query": "..."}: """


_CURATOR_EXAMPLE = """\
Example, round 1 (a different corpus):
Task: Delete the outdated passage that says the Eiffel Tower is the tallest building.
Results so far:
(none yet: search first)
Step: {"rationale": "I must find the passage first.", "done": false, \
"call": {"tool": "search_corpus", "args": {"query": "Eiffel Tower tallest building"}}}

Example, round 2:
Task: Delete the outdated passage that says the Eiffel Tower is the tallest building.
Results so far:
Round 1: search_corpus {"query": "Eiffel Tower tallest building"}
  [k-17] Burj Khalifa: The Burj Khalifa has been the tallest building since 2010.
  [k-42] Eiffel Tower (archived): The Eiffel Tower is the tallest building in the world.
Step: {"rationale": "Passage k-42, the archived one, makes the outdated claim.", "done": false, \
"call": {"tool": "delete_passage", "args": {"passage_id": "k-42", "reason": "outdated claim"}}}"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Curator:
    """The planning executor: searches (live), then asks to delete a passage (proposed, never run)."""

    model: str
    seed: int = 7
    max_tokens: int = 240

    def role(self) -> RoleSpec:
        """Deterministic settings, as for the researcher."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_curator"
        )

    def render(self, ctx: str, info: ToolRoundInfo[Any]) -> Prompt:
        """Rules, tools and example, then the task and the results so far."""
        system = (
            f"{_CURATOR_RULES}{_SEARCH_DESCRIPTION}\n"
            '- delete_passage {"passage_id": "...", "reason": "..."}: permanently delete one passage.\n\n'
            f"{_CURATOR_EXAMPLE}"
        )
        check = "If a passage above is the one to delete, call delete_passage with its id; otherwise search again."
        dynamic = f"Task: {ctx}\nResults so far:\n{_results_text(info)}\n\n{_budget_line(info, check)}"
        return Prompt(system=system, dynamic=dynamic)


async def research(
    caller: StructuredCaller,
    model: str,
    index: BM25Index,
    question: str,
    *,
    observer: ObserverArg = None,
    config: LoopConfig = DEMO_CONFIG,
) -> ToolLoopResult[Hit]:
    """Run the retrieval loop for one question."""
    return await run_tool_loop(caller, Researcher(model=model), search_tool(index), question, config, observer=observer)


async def answer(
    caller: StructuredCaller, model: str, question: str, hits: Sequence[Hit], *, observer: ObserverArg = None
) -> OnceResult[_AnswerBase]:
    """Write the answer from ``hits`` (which must not be empty), citing one of them."""
    schema = answer_schema([h.id for h in hits])
    ctx = AnswerCtx(question=question, hits=hits)
    return await run_once(caller, AnswerWriter(model=model), ctx, schema=schema, observer=observer)


async def plan(
    caller: StructuredCaller,
    model: str,
    index: BM25Index,
    task: str = PLANNING_TASK,
    *,
    observer: ObserverArg = None,
    config: LoopConfig = DEMO_CONFIG,
) -> TieredLoopResult[BaseModel, Any]:
    """Run the tiered loop: the search runs live, the delete becomes a proposal."""
    tools: list[FunctionTool[Any, Any]] = [search_tool(index), delete_tool(index)]
    return await run_tool_loop_tiered(caller, Curator(model=model), tools, task, config, observer=observer)
