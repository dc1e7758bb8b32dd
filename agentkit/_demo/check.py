"""Checking the demo's answers against the passage each cites: supported, or not and why.

A cited passage that the run retrieved is not yet evidence: a small model can cite a retrieved
passage about something else and copy its words. `AnswerVerifier` is the pair's verifier for the
researcher's `GroundedAnswer` (`agentkit.Verifier`), in two steps, the cheap one first:

1. **Rules, no model.** The cited passage must be one the run retrieved, and the answer must be in
   its words: every content word of the answer that the question does not hold is in the passage.
2. **A judge model**, asked once (`run_once`) only when the rules pass. It is shown the question and
   the passages the run retrieved, not the answer, and picks the one that states the answer (or
   none); the answer is supported when it picks the cited passage. Measured on the 0.5B model, a
   choice among the passages is what a small model does well: asked yes or no about one passage, it
   said yes to the Hubble passage for the Voyager question while naming the passage's subject as
   the Hubble Space Telescope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentkit._agent import Prompt, RoleSpec, RoundInfo
from agentkit._demo.search import Hit, Passage, terms
from agentkit._observe import ObserverArg
from agentkit._once import run_once
from agentkit._pair import Review
from agentkit._structured import StructuredCaller

__all__ = ["NONE", "AnswerJudge", "AnswerVerifier", "Judgement", "Sources", "judgement_type", "rules_review"]

NONE = "none"
"""The judge's pick when no passage it was shown states the answer."""


class _Answer(BaseModel):
    """What the verifier reads of an answer: the researcher's `GroundedAnswer` and the benchmark's loose one."""

    passage_id: str
    answer: str


class Judgement(BaseModel):
    """The judge's reply: why, then its pick (the reason first: constrained decoding emits fields in schema
    order, so a small model reasons before it decides). `AnswerVerifier` restricts `passage_id` to the ids
    it shows and `none`."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        max_length=120,
        description="Which passage is about what the question asks and states the answer, in a sentence.",
    )
    passage_id: str = Field(description="The id of the passage that states the answer, or none.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Sources:
    """What the judge is shown: the question and the passages the run retrieved (not the answer)."""

    question: str
    passages: tuple[Passage, ...]


_JUDGE_SYSTEM = (
    "You pick, from the passages, the one that states the answer to the question. Read the question's subject "
    "carefully: a passage about a different thing does not answer it. If none states it, pick none."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerJudge:
    """The judge: one call, at temperature 0, that renders `Sources`."""

    model: str
    """The model to ask."""
    seed: int = 7
    """Sampling seed."""
    max_tokens: int = 120
    """Reply token limit; the judgement is short JSON."""

    def role(self) -> RoleSpec:
        """Deterministic settings, as for the researcher."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_judge"
        )

    def render(self, ctx: Sources, info: RoundInfo) -> Prompt:
        """The rule in the system part; the question and the passages, one a line, after it."""
        shown = "\n".join(f"[{p.id}] {p.title}: {p.text}" for p in ctx.passages)
        return Prompt(system=_JUDGE_SYSTEM, dynamic=f"Question: {ctx.question}\n\nPassages:\n{shown}")


def judgement_type(ids: Sequence[str]) -> type[Judgement]:
    """`Judgement` whose `passage_id` is one of `ids` or `none`: the judge cannot name another passage."""
    choices: Any = Literal[(*ids, NONE)]
    return create_model(
        "Judgement",
        __base__=Judgement,
        passage_id=(choices, Field(description="The id of the passage that states the answer, or none.")),
    )


_POSSESSIVE = re.compile(r"['\u2019]s\b", re.IGNORECASE)


def _words(text: str) -> list[str]:
    """The index terms of `text` with possessives dropped first: "Babbage's" is "Babbage", not "Babbage" and
    an "s" (the 0.5B model once wrote "and's" for "its", which is no claim about the passage)."""
    return terms(_POSSESSIVE.sub("", text))


def rules_review(question: str, retrieved: Sequence[Hit], passage_id: str, answer: str) -> Review:
    """The check without a model: the cited passage was retrieved, and the answer is in its words.

    An answer word counts as the passage's when its index term (`terms`: lower-cased, stop words out,
    lightly stemmed) is the passage's (title or text) or the question's.
    """
    passage = next((hit.passage for hit in retrieved if hit.id == passage_id), None)
    if passage is None:
        return Review(approved=False, feedback=f"it cites {passage_id!r}, which no search of the run returned")
    known = set(_words(f"{passage.title} {passage.text}")) | set(_words(question))
    foreign = [word for word in dict.fromkeys(_words(answer)) if word not in known]
    if foreign:
        listed = ", ".join(repr(word) for word in foreign)
        return Review(approved=False, feedback=f"the answer's words {listed} are not in passage {passage.id}")
    return Review(approved=True)


class AnswerVerifier:
    """Judges a `GroundedAnswer` against the passage it cites: the rules first, then the judge model.

    A `Verifier` for `pair`, bound to one question and what its run retrieved. The judge's run is
    reported to `observer` (a `JournalObserver` records it); the rules' verdict costs no call.

    Raises (from `review`):
        AgentkitError: the judge's call failed.
    """

    def __init__(
        self,
        caller: StructuredCaller,
        model: str,
        question: str,
        retrieved: Sequence[Hit],
        *,
        observer: ObserverArg = None,
    ) -> None:
        self.caller = caller
        self.judge = AnswerJudge(model=model)
        self.question = question
        self.retrieved = tuple(retrieved)
        self.observer = observer

    async def review(self, draft: BaseModel) -> Review:
        """`Review(approved=True)` when the cited passage supports the answer, else the reason it does not."""
        answer = _Answer.model_validate(draft.model_dump())
        ruled = rules_review(self.question, self.retrieved, answer.passage_id, answer.answer)
        if not ruled.approved:
            return ruled
        passages = tuple({hit.id: hit.passage for hit in self.retrieved}.values())  # once each, in retrieval order
        sources = Sources(question=self.question, passages=passages)
        schema = judgement_type([p.id for p in passages])
        judged = await run_once(self.caller, self.judge, sources, schema=schema, observer=self.observer)
        if judged.value is None:
            assert judged.error is not None
            raise judged.error
        picked = judged.value.passage_id
        if picked == answer.passage_id:
            return Review(approved=True, usage=judged.usage)
        found = next((p for p in passages if p.id == picked), None)
        where = "no passage the run retrieved" if found is None else f"[{found.id}] {found.title}"
        return Review(
            approved=False,
            feedback=f"the judge finds the answer in {where}, not in the cited [{answer.passage_id}]",
            usage=judged.usage,
        )
