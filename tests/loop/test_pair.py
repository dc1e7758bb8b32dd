"""Behaviour of ``pair``: draft, review, revise, always ending on an executor turn."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit import Outcome, StopReason, Usage
from agentkit._pair import Critique, LLMVerifier, PairConfig, PairResult, Review, RulesVerifier, pair
from agentkit.errors import AgentkitError, ProviderError, Throttled, UsageError, VerifierError
from agentkit.events import LLMCallFinished, RoundStarted, RunFinished, RunStarted
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, ScriptedCaller, ScriptedReply, ScriptExhausted
from tests.support import NO_WAIT, Answer, Critic, Drafter, Recorder, good

FEEDBACK = "MARKER-the total is wrong"


def bad(total: int = 9) -> dict[str, object]:
    return {"total": total, "parts": [1, 1]}


def sums(answer: Answer) -> tuple[bool, str]:
    return answer.total == sum(answer.parts), FEEDBACK


@dataclass
class Scripted:
    """A verifier replaying decisions (True approves), recording what it was shown."""

    decisions: list[bool | BaseException]
    shown: list[Answer] = field(default_factory=list)

    async def review(self, draft: Answer) -> Review:
        self.shown.append(draft)
        decision = self.decisions.pop(0)
        if isinstance(decision, BaseException):
            raise decision
        return Review(approved=decision, feedback="" if decision else FEEDBACK)


async def test_approved_draft_is_returned() -> None:
    """A draft the verifier approves ends the run APPLIED, VERIFIER_APPROVED, after one round."""
    caller = ScriptedCaller([good()])
    result = await pair(caller, Drafter(), RulesVerifier(sums), "1+2", schema=Answer)
    assert result.value == Answer.model_validate(good())
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.VERIFIER_APPROVED)
    assert (result.rounds, result.reviews) == (1, 1)
    assert result.approved


async def test_rejected_draft_is_revised_seeing_feedback() -> None:
    """After a rejection the executor renders round 2 with the feedback and the draft it revises."""
    drafter = Drafter()
    caller = ScriptedCaller([bad(), good()])
    await pair(caller, drafter, RulesVerifier(sums), "1+2", PairConfig(max_rounds=3), schema=Answer)
    assert [i.round for i in drafter.seen] == [1, 2]
    assert drafter.seen[0].feedback is None
    assert drafter.seen[0].previous is None
    assert drafter.seen[1].feedback == FEEDBACK
    assert drafter.seen[1].previous == Answer.model_validate(bad())
    assert FEEDBACK in caller.requests[1].dynamic


async def test_final_round_draft_is_not_reviewed() -> None:
    """With the default two rounds the verifier runs once; the second draft is returned unreviewed."""
    verifier = Scripted([False])
    caller = ScriptedCaller([bad(9), bad(8)])
    result = await pair(caller, Drafter(), verifier, "x", schema=Answer)
    assert verifier.shown == [Answer.model_validate(bad(9))]
    assert result.value == Answer.model_validate(bad(8))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.ROUND_CEILING)
    assert (result.rounds, result.reviews) == (2, 1)
    assert not result.approved


async def test_run_ends_on_an_executor_turn() -> None:
    """Every rejection is followed by an executor turn; the result is the executor's last draft."""
    verifier = Scripted([False, False, False])
    caller = ScriptedCaller([bad(9), bad(8), bad(7), bad(6)])
    result = await pair(caller, Drafter(), verifier, "x", PairConfig(max_rounds=4), schema=Answer)
    assert len(caller.requests) == 4
    assert len(verifier.shown) == 3
    assert result.value == Answer.model_validate(bad(6))
    caller.assert_complete()


async def test_verifier_text_is_never_returned() -> None:
    """No field of the result carries the verifier's feedback."""
    caller = ScriptedCaller([bad(9), bad(8)])
    result = await pair(caller, Drafter(), RulesVerifier(sums), "x", schema=Answer)
    names = {f.name for f in dataclasses.fields(result)}
    assert not names & {"feedback", "review", "reviews_text", "critique"}
    assert FEEDBACK not in repr(result)


async def test_unchanged_revision_is_stalemate_with_last_draft() -> None:
    """A revision equal to the rejected draft ends STALEMATE, DEGENERATION, returning that revision."""
    verifier = Scripted([False, False])
    caller = ScriptedCaller([bad(9), bad(9)])
    result = await pair(caller, Drafter(), verifier, "x", PairConfig(max_rounds=3), schema=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert result.value == Answer.model_validate(bad(9))
    assert (result.rounds, result.reviews) == (2, 1)


async def test_unchanged_revision_on_final_round_is_stalemate() -> None:
    """Even on the last round an unchanged revision is a stalemate, not a ceiling."""
    caller = ScriptedCaller([bad(9), bad(9)])
    result = await pair(caller, Drafter(), RulesVerifier(sums), "x", schema=Answer)
    assert result.stop_reason is StopReason.DEGENERATION


async def test_comparator_decides_what_is_materially_unchanged() -> None:
    """A custom comparator (same total) makes a cosmetically different revision a stalemate."""
    caller = ScriptedCaller([{"total": 9, "parts": [1, 1]}, {"total": 9, "parts": [2, 2]}])

    def same_total(a: Answer, b: Answer) -> bool:
        return a.total == b.total

    result = await pair(
        caller, Drafter(), RulesVerifier(sums), "x", PairConfig(max_rounds=3), schema=Answer, same=same_total
    )
    assert result.outcome is Outcome.STALEMATE
    assert result.value == Answer(total=9, parts=[2, 2])


async def test_return_to_an_earlier_draft_is_stalemate() -> None:
    """A revision that cycles back to an earlier rejected draft (A, B, A) is a stalemate."""
    caller = ScriptedCaller([bad(9), bad(8), bad(9)])
    result = await pair(caller, Drafter(), Scripted([False, False]), "x", PairConfig(max_rounds=4), schema=Answer)
    assert result.stop_reason is StopReason.DEGENERATION
    assert result.rounds == 3


async def test_verifier_error_discards_the_draft() -> None:
    """A verifier that raises ends ERROR, VERIFIER_ERROR, with no value: the unverified draft is dropped."""
    caller = ScriptedCaller([good()])
    result = await pair(caller, Drafter(), Scripted([ValueError("rule crashed")]), "x", schema=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.VERIFIER_ERROR)
    assert result.value is None
    assert isinstance(result.error, VerifierError)
    assert isinstance(result.error.__cause__, ValueError)
    assert "Scripted" in str(result.error)
    with pytest.raises(AgentkitError):
        result.raise_for_error()


async def test_rules_function_that_raises_is_verifier_error() -> None:
    """A RulesVerifier whose rule raises fails the run the same way."""

    def crash(answer: Answer) -> tuple[bool, str]:
        raise KeyError("missing")

    result = await pair(ScriptedCaller([good()]), Drafter(), RulesVerifier(crash), "x", schema=Answer)
    assert result.stop_reason is StopReason.VERIFIER_ERROR
    assert result.value is None


async def test_verifier_throttle_is_throttled() -> None:
    """A throttled verifier ends ERROR, THROTTLED, so a queue consumer releases the work."""
    result = await pair(ScriptedCaller([good()]), Drafter(), Scripted([Throttled()]), "x", schema=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    assert isinstance(result.error, Throttled)
    assert result.value is None


async def test_executor_failure_is_llm_error_and_drops_drafts() -> None:
    """An executor that fails on a revision ends ERROR, LLM_ERROR, without the rejected draft."""
    caller = ScriptedCaller([bad(), ProviderError("400", status=400)])
    result = await pair(caller, Drafter(), RulesVerifier(sums), "x", PairConfig(retry=NO_WAIT), schema=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert result.value is None
    assert result.rounds == 2


async def test_executor_throttle_is_throttled() -> None:
    """A 429 on the executor ends ERROR, THROTTLED after one request, before any review."""
    verifier = Scripted([])
    caller = ScriptedCaller([Throttled()])
    result = await pair(caller, Drafter(), verifier, "x", schema=Answer)
    assert result.stop_reason is StopReason.THROTTLED
    assert verifier.shown == []
    assert len(caller.requests) == 1


async def test_non_material_approved_draft_is_silent() -> None:
    """A non-material draft that the verifier approves ends SILENT, VERIFIER_APPROVED."""
    result = await pair(ScriptedCaller([{"total": 0, "parts": []}]), Drafter(), RulesVerifier(sums), "x", schema=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.VERIFIER_APPROVED)


async def test_rules_verifier_drops_feedback_when_it_approves() -> None:
    """RulesVerifier returns a Review: approval carries no feedback, rejection carries the rule's."""
    verifier = RulesVerifier(sums)
    assert await verifier.review(Answer.model_validate(good())) == Review(approved=True)
    assert await verifier.review(Answer.model_validate(bad())) == Review(approved=False, feedback=FEEDBACK)


@pytest.mark.parametrize("rounds", [0, 1, -3, True])
def test_fewer_than_two_rounds_is_usage_error(rounds: int) -> None:
    """A pair needs a draft and a revision; a lower ceiling is refused, naming run_once."""
    with pytest.raises(UsageError, match="run_once"):
        PairConfig(max_rounds=rounds)


async def test_schema_that_is_not_a_model_is_usage_error() -> None:
    """schema= must be a pydantic model class; anything else is refused before any call."""
    caller = ScriptedCaller()
    with pytest.raises(UsageError, match="pydantic model"):
        await pair(caller, Drafter(), RulesVerifier(sums), "x", schema=int)  # type: ignore[misc]  # under test
    assert caller.requests == []


async def test_llm_verifier_rejects_then_pair_revises() -> None:
    """The LLM verifier's critique gates the draft; its feedback reaches the executor."""
    executor = ScriptedCaller([bad(), good()])
    critic = ScriptedCaller([{"feedback": FEEDBACK, "approve": False}])
    drafter = Drafter()
    verifier = LLMVerifier(critic, Critic(task="1+2"))
    result = await pair(executor, drafter, verifier, "1+2", schema=Answer)
    assert drafter.seen[1].feedback == FEEDBACK
    assert result.value == Answer.model_validate(good())
    assert "Draft:" in critic.requests[0].dynamic
    assert critic.requests[0].model == "critic"


async def test_llm_verifier_usage_is_summed_into_the_pair() -> None:
    """Tokens spent by the LLM verifier count in the pair's usage."""
    executor = ScriptedCaller([ScriptedReply(value=good(), usage=Usage(requests=1, input_tokens=10))])
    critic = ScriptedCaller([ScriptedReply(value=Critique(approve=True), usage=Usage(requests=1, output_tokens=4))])
    result = await pair(executor, Drafter(), LLMVerifier(critic, Critic(task="t")), "x", schema=Answer)
    assert result.approved
    assert result.usage == Usage(requests=2, input_tokens=10, output_tokens=4)


async def test_llm_verifier_failure_is_verifier_error_with_its_usage() -> None:
    """A critic whose call fails ends the pair VERIFIER_ERROR, and the critic's spend is counted."""
    executor = ScriptedCaller([good()])
    critic = ScriptedCaller([ProviderError("400", status=400)])
    verifier = LLMVerifier(critic, Critic(task="t"), retry=NO_WAIT)
    result = await pair(executor, Drafter(), verifier, "x", schema=Answer)
    assert result.stop_reason is StopReason.VERIFIER_ERROR
    assert isinstance(result.error, ProviderError)
    assert result.value is None
    assert result.usage.requests == 2


async def test_llm_verifier_throttle_is_throttled() -> None:
    """A throttled critic ends the pair THROTTLED."""
    verifier = LLMVerifier(ScriptedCaller([Throttled()]), Critic(task="t"))
    result = await pair(ScriptedCaller([good()]), Drafter(), verifier, "x", schema=Answer)
    assert result.stop_reason is StopReason.THROTTLED


async def test_verifier_wiring_mistake_raises() -> None:
    """A critic whose script runs dry is a wiring mistake: it raises, never a VERIFIER_ERROR."""
    verifier = LLMVerifier(ScriptedCaller(), Critic(task="t"))
    with pytest.raises(ScriptExhausted):
        await pair(ScriptedCaller([good()]), Drafter(), verifier, "x", schema=Answer)


async def test_llm_verifier_calls_are_reported_under_the_verifier_role() -> None:
    """The critic's model calls reach observers as role "verifier", not "executor"; the pair's own
    calls keep the executor's label."""
    recorder = Recorder()
    critic = ScriptedCaller([{"feedback": "", "approve": True}])
    verifier = LLMVerifier(critic, Critic(task="t"), observer=recorder)
    result = await pair(ScriptedCaller([good()]), Drafter(), verifier, "x", schema=Answer, observer=recorder)
    assert result.approved
    roles = [e.role for e in recorder.events if isinstance(e, LLMCallFinished)]
    assert roles == ["drafter", "verifier"]


@dataclass
class TupleVerifier:
    """A verifier wired wrongly: it returns the rule's tuple instead of a ``Review``."""

    async def review(self, draft: Answer) -> Review:
        return (True, "")  # type: ignore[return-value]  # the wiring mistake under test


async def test_verifier_that_returns_no_review_is_a_usage_error() -> None:
    """A verifier returning anything but a ``Review`` is a wiring mistake named as such, not an AttributeError."""
    with pytest.raises(UsageError, match=r"TupleVerifier\.review\(\) returned a tuple, not a Review"):
        await pair(ScriptedCaller([good()]), Drafter(), TupleVerifier(), "x", schema=Answer)


async def test_observer_sees_each_executor_round() -> None:
    """Observers see the pair start, each executor round with its position, its calls and the end."""
    recorder = Recorder()
    caller = ScriptedCaller([bad(), good()])
    result = await pair(caller, Drafter(), RulesVerifier(sums), "x", schema=Answer, observer=recorder)
    kinds = [e.kind for e in recorder.events]
    assert kinds == ["run_start", "round_start", "llm_call", "round_start", "llm_call", "run_end"]
    start = recorder.events[0]
    assert isinstance(start, RunStarted)
    assert (start.model, start.max_rounds) == ("exec", 2)
    rounds = [e.info for e in recorder.events if isinstance(e, RoundStarted)]
    assert [(i.round, i.is_final_round) for i in rounds] == [(1, False), (2, True)]
    calls = [e for e in recorder.events if isinstance(e, LLMCallFinished)]
    assert {c.role for c in calls} == {"drafter"}
    end = recorder.events[-1]
    assert isinstance(end, RunFinished)
    assert (end.result.stop_reason, end.result.rounds) == (StopReason.ROUND_CEILING, 2)
    assert end.result.run_id == result.run_id


@settings(max_examples=60, deadline=None)
@given(max_rounds=st.integers(2, 5), decisions=st.lists(st.booleans(), min_size=5, max_size=5))
async def test_any_review_sequence_ends_on_an_executor_draft(max_rounds: int, decisions: list[bool]) -> None:
    """For any verdicts: the value is the last draft, the last round is never reviewed, reviews <= rounds."""
    drafts = [bad(100 + n) for n in range(max_rounds)]
    verifier = Scripted(list(decisions))
    caller = ScriptedCaller(drafts)
    result: PairResult[Answer] = await pair(
        caller, Drafter(), verifier, "x", PairConfig(max_rounds=max_rounds), schema=Answer
    )
    assert result.value == Answer.model_validate(drafts[result.rounds - 1])
    assert len(caller.requests) == result.rounds
    if result.approved:
        assert result.reviews == result.rounds
        assert decisions[result.rounds - 1] is True
    else:
        assert result.stop_reason is StopReason.ROUND_CEILING
        assert result.rounds == max_rounds
        assert result.reviews == max_rounds - 1
        assert not any(decisions[: max_rounds - 1])


async def test_pair_over_the_wire_revises_and_is_approved() -> None:
    """Over a real HTTP exchange, a rejected draft is revised with the feedback, and the revision returned."""
    async with (
        FakeOpenAIServer([bad(), good()]) as server,
        OpenAICaller(base_url=server.base_url, api_key="k") as caller,
    ):
        result = await pair(caller, Drafter(), RulesVerifier(sums), "1+2", PairConfig(retry=NO_WAIT), schema=Answer)
    assert result.approved is False  # the second draft was the last permitted: returned unreviewed
    assert result.value == Answer.model_validate(good())
    assert FEEDBACK in server.requests[1]["messages"][-1]["content"]
    assert result.usage.requests == 2
