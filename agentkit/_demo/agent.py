"""The demo's agents: a retrieval executor, an answer writer, and a curator whose delete is proposed.

The executors' prompts are the library's `reflective_prompt`, tuned for small models as measured
on a 0.5B model: the step's free-text `rationale` comes before `done` (constrained decoding
emits fields in schema order, so the model reasons before it decides) and is bounded in length,
the doctrine says "use the tool, do not answer from memory" (`USE_THE_TOOL`), a
`worked_example` shows two rounds laid out exactly as the real ones, and every round with
results ends with what to check. With a plain prompt the same model answered from memory every
time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentkit._agent import Prompt, RoleSpec, ToolRoundInfo
from agentkit._cites import Cites
from agentkit._config import LoopConfig, RepeatPolicy
from agentkit._demo.search import BM25Index, Hit, SearchArgs, search_tool
from agentkit._loops import run_tool_loop, run_tool_loop_tiered
from agentkit._observe import ObserverArg
from agentkit._results import TieredLoopResult, ToolLoopResult
from agentkit._structured import StructuredCaller
from agentkit._tiers import Tier
from agentkit._tools import FunctionTool, Tool
from agentkit.errors import ToolRetry
from agentkit.prompting import USE_THE_TOOL, reflective_prompt, worked_example

__all__ = [
    "CURATOR_CHECK",
    "CURATOR_DONE_CHECK",
    "CURATOR_REJECTED_CHECK",
    "DEMO_CONFIG",
    "PLANNING_TASK",
    "QUESTIONS",
    "RESEARCH_CHECK",
    "Curator",
    "DeleteArgs",
    "GroundedAnswer",
    "Researcher",
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

DEMO_CONFIG = LoopConfig(max_rounds=4, rationale_max_length=160, min_calls=1, on_repeat=RepeatPolicy.REFUSE)
"""Four rounds; a bounded rationale (a small model runs on to the token limit without one); and the
retrieval recipe: no done before a search has run (`min_calls=1`), and a repeated search refused
and explained rather than ending the run."""

ANSWER_MAX_LENGTH = 200
"""Longest answer the researcher may give."""

RESEARCH_CHECK = "If a passage above states the answer, set done to true; otherwise search with new keywords."
"""The researcher's last line on every round with results: what to check before replying."""

_RESEARCH_DOCTRINE = (
    "You are a research assistant: you answer questions only from the passages that the search_corpus tool "
    f"returns. {USE_THE_TOOL} Search with a few keywords from the question. Stop (done: true) as soon as a "
    "passage in the results states the answer, or when two searches found nothing useful."
)


def _research_example(answer: dict[str, str] | None = None) -> str:
    return worked_example(
        "How long is the Golden Gate Bridge?",
        SearchArgs(query="Golden Gate Bridge length"),
        ["[ex-7] Golden Gate Bridge: The Golden Gate Bridge is 2,737 metres long."],
        tool_name="search_corpus",
        check=RESEARCH_CHECK,
        search_rationale="No results yet, so I must search.",
        done_rationale="Passage ex-7 states the answer: 2,737 metres.",
        answer=answer,
    )


_RESEARCH_EXAMPLE = _research_example()


_ANSWER_DOCTRINE = (
    " When you set done to true, give the answer: the id of the passage that states it, as shown in brackets, "
    "and the answer in that passage's own words."
)

_RESEARCH_ANSWER_EXAMPLE = _research_example(
    {"passage_id": "ex-7", "answer": "The Golden Gate Bridge is 2,737 metres long."}
)


class GroundedAnswer(BaseModel):
    """The researcher's answer with its done step: the passage it cites (one the run retrieved:
    `Cites`), then the answer. The id comes first, so the model picks its source before it writes."""

    model_config = ConfigDict(extra="forbid")

    passage_id: Cites[Hit] = Field(description="The id of the passage that states the answer, as in brackets.")
    answer: str = Field(max_length=ANSWER_MAX_LENGTH, description="The answer, in the passage's own words.")


def _passage_line(hit: Hit) -> str:
    return f"[{hit.id}] {hit.passage.title}: {hit.passage.text}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Researcher:
    """The retrieval executor: searches the corpus until a passage answers the question."""

    model: str
    """The model to ask."""
    tools: tuple[Tool[Any, Any], ...] = ()
    """The tools the loop runs, listed in the prompt by name and description (`research` passes them)."""
    seed: int = 7
    """Sampling seed; with temperature 0 a run repeats exactly on servers that honour both."""
    max_tokens: int = 200
    """Reply token limit; the step is short JSON."""
    answers: bool = True
    """The loop asks for a `GroundedAnswer` with the done step: the prompt says so, and its example
    gives one. `False`: a loop without `answer=` (the prompt as before the recipe)."""

    def role(self) -> RoleSpec:
        """Deterministic settings: temperature 0 and a fixed seed."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_researcher"
        )

    def render(self, ctx: str, info: ToolRoundInfo[Hit]) -> Prompt:
        """The library's reflective prompt: doctrine, tools and worked example, then this round."""
        return reflective_prompt(
            _RESEARCH_DOCTRINE + _ANSWER_DOCTRINE if self.answers else _RESEARCH_DOCTRINE,
            ctx,
            info,
            render_item=_passage_line,
            example=_RESEARCH_ANSWER_EXAMPLE if self.answers else _RESEARCH_EXAMPLE,
            tools=self.tools,
            check=RESEARCH_CHECK,
        )


class DeleteArgs(BaseModel):
    """Arguments of `delete_passage`."""

    model_config = ConfigDict(extra="forbid")

    passage_id: str = Field(max_length=40, description="The id of the passage to delete, as shown in brackets.")
    reason: str = Field(max_length=120, description="Why it must go, in a few words.")


def delete_tool(index: BM25Index) -> FunctionTool[DeleteArgs, str]:
    """`delete_passage` over `index`: irreversible, so a loop only ever proposes it.

    Its `passage_id` is an enum of the index's ids, so even a small model can only name a
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
        return [f"deleted {index.remove(args.passage_id).id}"]

    return FunctionTool(
        name="delete_passage",
        description="Permanently delete one passage from the corpus, by id.",
        args_type=args_type,
        tier=Tier.IRREVERSIBLE,
        fn=delete_passage,
    )


CURATOR_CHECK = "If a passage above is the one to delete, call delete_passage with its id; otherwise search again."
"""The curator's last line on every round with results, until a delete was decided."""

CURATOR_DONE_CHECK = "delete_passage above has run, so the task is finished: set done to true."
"""The last line once an approved delete ran: the run resumed after a person approved it."""

CURATOR_REJECTED_CHECK = (
    "A person rejected the delete above; do not ask for it again. Set done to true, saying why in your rationale."
)
"""The last line once a person rejected the delete."""

_CURATOR_DOCTRINE = (
    "You are a corpus curator: you find passages with the search_corpus tool and remove a wrong one with the "
    f"delete_passage tool. {USE_THE_TOOL} Never guess an id: delete only a passage that a search returned. "
    "First search for the passage; once a search returned it, call delete_passage with its id."
)

# Measured on the 0.5B model: it names the passage at the position the example's target had, so
# the target comes first, as a search built from the claim's words ranks it; and the title comes
# before the id, so the id it copies is the one next to the title it chose.
_CURATOR_EXAMPLE = worked_example(
    "Delete the outdated passage that says the Eiffel Tower is the tallest building.",
    SearchArgs(query="Eiffel Tower tallest building"),
    [
        "Eiffel Tower (archived entry) [k-42]: Archived 1900 entry: the Eiffel Tower is the tallest building.",
        "Burj Khalifa [k-17]: The Burj Khalifa has been the tallest building since 2010.",
    ],
    tool="search_corpus",
    then=DeleteArgs(passage_id="k-42", reason="outdated claim"),
    then_tool="delete_passage",
    check=CURATOR_CHECK,
    search_rationale="I must find the passage first.",
    done_rationale="The passage Eiffel Tower (archived entry) [k-42] makes the outdated claim.",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Curator:
    """The planning executor: searches (live), then asks to delete a passage (proposed, never run)."""

    model: str
    tools: tuple[Tool[Any, Any], ...] = ()
    """The tools the loop runs, listed in the prompt (`plan` passes them)."""
    seed: int = 7
    max_tokens: int = 240

    def role(self) -> RoleSpec:
        """Deterministic settings, as for the researcher."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_curator"
        )

    def render(self, ctx: str, info: ToolRoundInfo[Any]) -> Prompt:
        """The library's reflective prompt, with a worked example that searches, then proposes the delete."""
        return reflective_prompt(
            _CURATOR_DOCTRINE,
            ctx,
            info,
            render_item=_titled_line,
            example=_CURATOR_EXAMPLE,
            tools=self.tools,
            check=_curator_check(info),
        )


def _curator_check(info: ToolRoundInfo[Any]) -> str:
    """The check for this round: after a decided delete (a resumed run), finish; else find and delete."""
    for call in reversed(info.prior_calls):
        if call.tool_name != "delete_passage" or call.proposed:
            continue
        return CURATOR_DONE_CHECK if call.batch else CURATOR_REJECTED_CHECK
    return CURATOR_CHECK


def _titled_line(item: object) -> str:
    if isinstance(item, Hit):
        return f"{item.passage.title} [{item.id}]: {item.passage.text}"
    return str(item)


async def research(
    caller: StructuredCaller,
    model: str,
    index: BM25Index,
    question: str,
    *,
    observer: ObserverArg = None,
    config: LoopConfig = DEMO_CONFIG,
) -> ToolLoopResult[Hit, GroundedAnswer]:
    """Run the retrieval loop for one question: searches, then the answer citing a retrieved passage."""
    tool = search_tool(index)
    agent = Researcher(model=model, tools=(tool,))
    return await run_tool_loop(caller, agent, tool, question, config, observer=observer, answer=GroundedAnswer)


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
    tools: tuple[FunctionTool[Any, Any], ...] = (search_tool(index), delete_tool(index))
    return await run_tool_loop_tiered(caller, Curator(model=model, tools=tools), tools, task, config, observer=observer)
