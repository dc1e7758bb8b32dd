"""The demo's answers checked against the passage each cites: the rules, the judge, the verdict the demo shows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from agentkit import PairConfig, Prompt, RoleSpec, RoundInfo, pair
from agentkit._demo.agent import QUESTIONS, DeleteArgs
from agentkit._demo.check import NONE, AnswerVerifier, judgement_type, rules_review
from agentkit._demo.cli import run_demo
from agentkit._demo.search import BM25Index, Hit, SearchArgs, load_corpus
from agentkit._outcome import StopReason
from agentkit.errors import ProviderError
from agentkit.journal import open_journal
from agentkit.testing import ScriptedCaller, call_step

VOYAGER = QUESTIONS[0]
CORPUS = {p.id: p for p in load_corpus()}
HUBBLE = CORPUS["space-07"].text.split(". ")[0] + "."
"""The Hubble passage's first sentence: what the embedded model answered the Voyager question with."""


def answered(passage_id: str, answer: str) -> dict[str, object]:
    """The researcher's done step with its cited answer."""
    return {"rationale": "found it", "decision": {"done": True, "answer": {"passage_id": passage_id, "answer": answer}}}


def judged(passage_id: str, reason: str = "It states the answer.") -> dict[str, object]:
    """The judge's reply: the passage it finds the answer in."""
    return {"reason": reason, "passage_id": passage_id}


def retrieved(*ids: str) -> list[Hit]:
    return [Hit(passage=CORPUS[i], score=1.0) for i in ids]


def planning() -> list[dict[str, object]]:
    """The curator's search, then its delete (proposed): the demo's planning run after the questions."""
    return [
        call_step(SearchArgs(query="archived Pluto ninth planet"), tool="search_corpus"),
        call_step(DeleteArgs(passage_id="space-04", reason="outdated"), tool="delete_passage"),
    ]


async def demo(caller: ScriptedCaller, tmp_path: Path, question: str = VOYAGER) -> tuple[int, str]:
    out = io.StringIO()
    async with open_journal(tmp_path / "journal.db") as journal:
        code = await run_demo(caller, "m", [question], out=out, journal=journal)
    caller.assert_complete()
    return code, out.getvalue()


async def test_demo_flags_an_answer_that_cites_and_copies_a_passage_about_something_else(tmp_path: Path) -> None:
    """The Voyager question answered with the retrieved Hubble passage's words: the rules pass (the passage was
    retrieved and holds the words), the judge, shown the question and the retrieved passages, finds the answer
    in the Voyager passage, and the demo says NOT SUPPORTED, in the answer's verdict and in the summary."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-07", HUBBLE),
            judged("space-01"),
            *planning(),
        ]
    )
    code, out = await demo(caller, tmp_path)
    assert code == 0  # the demo ran; the verdict says what the answer is worth
    assert "  cites    [space-07] Hubble Space Telescope" in out
    found = "the judge finds the answer in [space-01] Voyager 1, not in the cited [space-07]"
    assert f"  verdict  NOT SUPPORTED: {found} (the judge, " in out
    assert "Answers checked against the passage each cites: 0 supported, 1 NOT SUPPORTED ([1])." in out
    assert "1 judge calls" in out
    [judge_request] = [r for r in caller.requests if r.prompt_type == "demo_judge"]
    assert judge_request.dynamic.startswith(f"Question: {VOYAGER}\n")
    for passage_id in ("space-01", "space-02", "space-07"):  # every passage the run retrieved, once
        passage = CORPUS[passage_id]
        assert judge_request.dynamic.count(f"[{passage_id}] {passage.title}: {passage.text}") == 1


async def test_demo_flags_an_answer_the_judge_finds_in_no_retrieved_passage(tmp_path: Path) -> None:
    """A judge that finds the answer in none of the passages makes the answer not supported, and says so."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-07", HUBBLE),
            judged("none"),
            *planning(),
        ]
    )
    _, out = await demo(caller, tmp_path)
    assert (
        "NOT SUPPORTED: the judge finds the answer in no passage the run retrieved, not in the cited [space-07]" in out
    )


async def test_demo_records_the_judges_run_in_its_journal(tmp_path: Path) -> None:
    """The judge's call is a run of its own in the journal the demo records its runs in."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-07", HUBBLE),
            judged("space-01"),
            *planning(),
        ]
    )
    await demo(caller, tmp_path)
    async with open_journal(tmp_path / "journal.db", create=False) as journal:
        agents = [run.agent for run in await journal.runs()]
    assert sorted(agents) == ["AnswerJudge", "Curator", "Researcher"]


async def test_demo_flags_an_answer_whose_words_are_not_in_its_passage_without_asking_the_judge(
    tmp_path: Path,
) -> None:
    """An answer citing the right passage with a date the passage does not hold is refused by the rules: the
    verdict names the foreign words, and no judge call is made (the script holds none)."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-01", "Voyager 1 was launched in March 1980."),
            *planning(),
        ]
    )
    _, out = await demo(caller, tmp_path)
    assert "  verdict  NOT SUPPORTED: the answer's words 'march', '1980' are not in passage space-01 (the rules" in out
    assert "0 judge calls" in out


async def test_demo_shows_a_supported_answer_as_supported(tmp_path: Path) -> None:
    """An answer in its passage's words, in the passage the judge picks too, is shown supported, and counted so."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-01", "Voyager 1 was launched by NASA on 5 September 1977."),
            judged("space-01"),
            *planning(),
        ]
    )
    _, out = await demo(caller, tmp_path)
    assert "  verdict  supported by [space-01] (the judge, " in out
    assert "Answers checked against the passage each cites: 1 supported." in out


async def test_demo_says_an_answer_is_unchecked_when_the_judges_call_fails(tmp_path: Path) -> None:
    """A judge that cannot be asked leaves the answer unchecked, said on its line, and out of the count."""
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="voyager 1 space probe launched")),
            answered("space-01", "Voyager 1 was launched by NASA on 5 September 1977."),
            ProviderError("server error", status=500),
            *planning(),
        ]
    )
    _, out = await demo(caller, tmp_path)
    assert "  verdict  unchecked: the judge's call failed: " in out
    assert "Answers checked" not in out


def test_the_scripted_demo_shows_each_built_in_answer_supported(capsys: pytest.CaptureFixture[str]) -> None:
    """``agentkit demo --scripted`` checks each answer and shows the verdicts and their summary."""
    from agentkit._cli import main

    assert main(["demo", "--scripted"]) == 0
    out = capsys.readouterr().out
    for passage_id in ("space-01", "chem-01", "comp-01"):
        assert f"  verdict  supported by [{passage_id}] (the judge, " in out
    assert "Answers checked against the passage each cites: 3 supported." in out


# --- the rules ----------------------------------------------------------------------------------------------


def test_rules_refuse_a_citation_the_run_did_not_retrieve() -> None:
    """A cited id that no search returned is not supported, whatever the answer says."""
    review = rules_review(VOYAGER, retrieved("space-02"), "space-01", "1977")
    assert (review.approved, review.feedback) == (False, "it cites 'space-01', which no search of the run returned")


@pytest.mark.parametrize(
    "answer",
    [
        "Voyager 1 is a space probe launched by NASA on 5 September 1977.",
        "It was launched on 5 September 1977.",  # "launched": the question's and the passage's word
        "5 September 1977",
        "The Voyager 1 probe launched in September 1977.",  # inflected forms meet
        "NASA's Voyager 1 was launched on 5 September 1977.",  # a possessive is its word, not the word and an "s"
    ],
)
def test_rules_pass_an_answer_in_the_words_of_its_passage_and_question(answer: str) -> None:
    review = rules_review(VOYAGER, retrieved("space-01"), "space-01", answer)
    assert review.approved, review.feedback


@pytest.mark.parametrize(
    ("answer", "foreign"),
    [
        ("Voyager 1 was launched on 20 August 1977.", "'20'"),  # Voyager 2's date ("August" is in 2012's)
        ("Voyager 1 was launched by ESA in 1977.", "'esa'"),
    ],
)
def test_rules_refuse_an_answer_with_words_its_passage_does_not_hold(answer: str, foreign: str) -> None:
    review = rules_review(VOYAGER, retrieved("space-01"), "space-01", answer)
    assert (review.approved, review.feedback) == (False, f"the answer's words {foreign} are not in passage space-01")


# --- the verifier in the executor-verifier pair -------------------------------------------------------------


class _Writer:
    """An answer writer for `pair`: drafts a `GroundedAnswer` from the passages it is given."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Answer from the passages.", dynamic=f"{ctx}\nFeedback: {info.feedback}")


async def test_answer_verifier_gates_a_pair_run_and_its_feedback_reaches_the_revision() -> None:
    """As `pair`'s verifier, the check rejects a draft citing the Hubble passage, the writer sees why and
    revises to the Voyager passage, which the judge picks too."""
    hits = BM25Index(load_corpus()).search("voyager 1 space probe launched")
    caller = ScriptedCaller(
        [
            {"passage_id": "space-07", "answer": HUBBLE},
            judged("space-01"),
            {"passage_id": "space-01", "answer": "Voyager 1 was launched on 5 September 1977."},
            judged("space-01"),
        ]
    )
    verifier = AnswerVerifier(caller, "m", VOYAGER, hits)
    result = await pair(caller, _Writer(), verifier, VOYAGER, PairConfig(max_rounds=3), schema=_Draft)
    assert result.stop_reason is StopReason.VERIFIER_APPROVED
    assert result.unwrap().passage_id == "space-01"
    assert "Feedback: the judge finds the answer in [space-01] Voyager 1" in caller.requests[2].dynamic
    caller.assert_complete()


class _Draft(BaseModel):
    passage_id: str
    answer: str


def test_the_judge_reasons_first_then_picks_only_a_passage_it_was_shown_or_none() -> None:
    """A small model fills the fields in schema order, so the reason comes before the pick; the pick is an enum
    of the ids shown and none, so the judge cannot name another passage."""
    schema = judgement_type(["space-01", "space-07"])
    properties = schema.model_json_schema()["properties"]
    assert list(properties) == ["reason", "passage_id"]
    assert properties["passage_id"]["enum"] == ["space-01", "space-07", NONE]
    with pytest.raises(ValidationError):
        schema.model_validate({"reason": "", "passage_id": "space-02"})
