"""Checking the demo's answers against the passage each cites: supported, or not and why.

A cited passage that the run retrieved is not yet evidence: a small model can cite a retrieved
passage about something else and copy its words. `AnswerVerifier` is the pair's verifier for the
researcher's `GroundedAnswer` (`agentkit.Verifier`), in two steps, the cheap one first:

1. **Rules, no model.** The cited passage must be one the run retrieved, and the answer must be in
   its words: every content word of the answer that the question does not hold is in the passage.
2. **A judge model**, asked once (`run_once`) only when the rules pass: it is shown the question,
   the cited passage and the answer, names what the question asks about and what the passage is
   about, and says whether the passage states that answer to that question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from agentkit._agent import Prompt, RoleSpec, RoundInfo
from agentkit._demo.search import Hit, Passage, terms
from agentkit._observe import ObserverArg
from agentkit._once import run_once
from agentkit._pair import Review
from agentkit._structured import StructuredCaller

__all__ = ["AnswerJudge", "AnswerVerifier", "Claim", "Judgement", "rules_review"]


class _Answer(BaseModel):
    """What the verifier reads of an answer: the researcher's `GroundedAnswer` and the benchmark's loose one."""

    passage_id: str
    answer: str


class Judgement(BaseModel):
    """The judge's reply. Its fields come in the order a small model should think in (constrained decoding
    emits them in schema order): what the question is about, what the passage is about, then the verdict."""

    model_config = ConfigDict(extra="forbid")

    question_subject: str = Field(max_length=80, description="Who or what the question asks about, in a few words.")
    passage_subject: str = Field(max_length=80, description="Who or what the passage is about, in a few words.")
    supported: bool = Field(
        description="true only when the passage is about what the question asks about and states the answer given."
    )
    reason: str = Field(max_length=160, description="Why, in one short sentence.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """What the judge is shown: the question, the passage the answer cites, and the answer."""

    question: str
    passage: Passage
    answer: str


_JUDGE_SYSTEM = (
    "You check an answer against the passage it cites. The answer is supported only when the passage is about "
    "what the question asks about and the passage itself states that answer to the question. A passage about "
    "something else does not support the answer, even when the answer copies its words."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerJudge:
    """The judge: one call, at temperature 0, that renders a `Claim`."""

    model: str
    """The model to ask."""
    seed: int = 7
    """Sampling seed."""
    max_tokens: int = 200
    """Reply token limit; the judgement is short JSON."""

    def role(self) -> RoleSpec:
        """Deterministic settings, as for the researcher."""
        return RoleSpec(
            model=self.model, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens, prompt_type="demo_judge"
        )

    def render(self, ctx: Claim, info: RoundInfo) -> Prompt:
        """The rule in the system part; the question, the passage and the answer after it."""
        passage = ctx.passage
        return Prompt(
            system=_JUDGE_SYSTEM,
            dynamic=f"Question: {ctx.question}\n\nCited passage [{passage.id}] {passage.title}: {passage.text}\n\n"
            f"Answer: {ctx.answer}",
        )


def rules_review(question: str, retrieved: Sequence[Hit], answer: _Answer) -> Review:
    """The check without a model: the cited passage was retrieved, and the answer is in its words.

    An answer word counts as the passage's when its index term (`terms`: lower-cased, stop words out,
    lightly stemmed) is the passage's (title or text) or the question's.
    """
    passage = next((hit.passage for hit in retrieved if hit.id == answer.passage_id), None)
    if passage is None:
        return Review(approved=False, feedback=f"it cites {answer.passage_id!r}, which no search of the run returned")
    known = set(terms(f"{passage.title} {passage.text}")) | set(terms(question))
    foreign = [word for word in dict.fromkeys(terms(answer.answer)) if word not in known]
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
        ruled = rules_review(self.question, self.retrieved, answer)
        if not ruled.approved:
            return ruled
        passage = next(hit.passage for hit in self.retrieved if hit.id == answer.passage_id)
        claim = Claim(question=self.question, passage=passage, answer=answer.answer)
        judged = await run_once(self.caller, self.judge, claim, schema=Judgement, observer=self.observer)
        if judged.value is None:
            assert judged.error is not None
            raise judged.error
        verdict = judged.value
        return Review(
            approved=verdict.supported, feedback="" if verdict.supported else verdict.reason, usage=judged.usage
        )
