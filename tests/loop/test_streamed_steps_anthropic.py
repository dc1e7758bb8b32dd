"""Streamed steps through AnthropicCaller: the Messages API's events stream through FakeAnthropicServer, and
the run emits the step as it arrives, then ends as the run that did not stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentkit import OnceAgent, Prompt, RoleSpec, RoundInfo, StopReason, run_once_text, run_tool_loop
from agentkit.events import (
    AnswerDelta,
    LLMCallFinished,
    PartialDiscarded,
    RationaleDelta,
    TextDelta,
)
from agentkit.journal import Journal, JournalObserver
from agentkit.providers.anthropic import AnthropicCaller
from agentkit.testing import FakeAnthropicServer, FakeReply
from tests.loop.support import (
    ANSWER,
    DONE,
    LOOK,
    PLAIN,
    STREAM,
    Summary,
    assert_rationale_grew,
    streamed_events,
)
from tests.support import Finder, Recorder, search


@pytest.fixture
async def caller(anthropic_server: FakeAnthropicServer) -> AsyncIterator[AnthropicCaller]:
    async with AnthropicCaller(base_url=anthropic_server.base_url) as built:
        yield built


async def test_a_run_streamed_through_anthropic_emits_its_rationale_and_answer_as_they_grow(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """The forced tool's input streams: growing `RationaleDelta`s, then `AnswerDelta`s, before each complete step."""
    anthropic_server.add(FakeReply.value(LOOK, chunk_chars=6), FakeReply.value(DONE, chunk_chars=5))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    assert_rationale_grew(events, 1, LOOK["rationale"])
    partials = [e.partial for e in events if isinstance(e, AnswerDelta)]
    assert len(partials) > 3
    assert partials[-1] == ANSWER
    kinds = [e.kind for e in events]
    assert kinds.index("rationale_delta") < kinds.index("llm_call") < kinds.index("tool_call")
    assert not any(isinstance(e, PartialDiscarded) for e in events)
    assert [body["stream"] for body in anthropic_server.requests] == [True, True]


async def test_a_run_streamed_through_anthropic_ends_as_the_run_that_does_not_stream(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """Streamed or not, the same replies give the same result: outcome, answer, rounds, items and usage."""
    replies = [FakeReply.value(LOOK, prompt_tokens=40, completion_tokens=7), FakeReply.value(DONE, prompt_tokens=50)]
    anthropic_server.add(*replies)
    _, streamed = await streamed_events(caller)
    anthropic_server.clear_cache()  # the second run writes the cache as the first did
    anthropic_server.add(*replies)
    _, plain = await streamed_events(caller, PLAIN)
    assert anthropic_server.requests[0]["stream"] is True
    assert "stream" not in anthropic_server.requests[2]
    fields = ("outcome", "stop_reason", "answer", "rounds", "items", "usage")
    assert [getattr(streamed, name) for name in fields] == [getattr(plain, name) for name in fields]
    assert streamed.usage.cache_write_tokens > 0
    assert streamed.usage.cached_input_tokens > 0


async def test_a_journaled_run_streamed_through_anthropic_records_the_same_state(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller, journal: Journal
) -> None:
    """The journal of a streamed run holds the complete steps and usage a run that did not stream records."""
    recorder = Recorder()
    with JournalObserver(journal) as observer:
        anthropic_server.add(FakeReply.value(LOOK, chunk_chars=5), FakeReply.value(DONE, chunk_chars=5))
        streamed = await run_tool_loop(
            caller, Finder(), search, "ctx", STREAM, answer=Summary, observer=[observer, recorder]
        )
        anthropic_server.clear_cache()
        anthropic_server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
        plain = await run_tool_loop(caller, Finder(), search, "ctx", PLAIN, answer=Summary, observer=observer)
        assert observer.flush(timeout=30)
    assert any(isinstance(e, RationaleDelta) for e in recorder.events)
    kept = [await journal.rounds(run.run_id) for run in (streamed, plain)]
    shape = [[(r.round, r.rationale, r.tool_name, r.args_json, r.done, r.usage) for r in rounds] for rounds in kept]
    assert shape[0] == shape[1]
    assert shape[0][0][1] == LOOK["rationale"]
    states = [await journal.state(run.run_id) for run in (streamed, plain)]
    for state in states:
        state.verify()
    assert states[0].config == states[1].config  # `stream` is not part of the recorded state


async def test_a_streamed_anthropic_step_that_fails_validation_is_reasked_and_its_partial_discarded(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """A streamed step that does not validate is re-asked through its tool_result; its partial is discarded."""
    invalid = {"rationale": "I will stop without the answer.", "decision": {"done": True}}
    anthropic_server.add(FakeReply.value(invalid), FakeReply.value(DONE))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    deltas = [e for e in events if isinstance(e, RationaleDelta | PartialDiscarded)]
    [discarded] = [e for e in deltas if isinstance(e, PartialDiscarded)]
    before = deltas[: deltas.index(discarded)]
    after = deltas[deltas.index(discarded) + 1 :]
    assert before[-1].text == invalid["rationale"]  # type: ignore[union-attr]  # RationaleDeltas only, before it
    assert after[-1].text == DONE["rationale"]  # type: ignore[union-attr]  # and after it
    assert "answer" in discarded.reason
    [result_block] = anthropic_server.requests[1]["messages"][-1]["content"]
    assert (result_block["type"], result_block["is_error"]) == ("tool_result", True)


async def test_an_overloaded_error_mid_stream_is_retried_as_a_529_is(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """`overloaded_error` in the stream fails the attempt as a 529 does: retried, then the run goes on."""
    anthropic_server.add(FakeReply.error(529, mid_stream=True), FakeReply.value(DONE))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    [first, second] = [e for e in events if isinstance(e, LLMCallFinished)]
    assert "overloaded_error mid-stream" in str(first.error)
    assert second.error is None
    assert len(anthropic_server.requests) == 2


async def test_a_streamed_anthropic_step_cut_off_ends_the_run_at_the_token_limit(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """`stop_reason: max_tokens` in `message_delta` is a truncated reply, as in a body; its partial is discarded."""
    anthropic_server.add(FakeReply.truncated('{"rationale": "Nothing is known yet; I sea'))
    events, result = await streamed_events(caller)
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert [e for e in events if isinstance(e, TextDelta)] == []  # a step's text block is not its tool input
    assert [body["stream"] for body in anthropic_server.requests] == [True]


async def test_a_run_nobody_watches_sends_todays_anthropic_request(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """`LoopConfig(stream=True)` without an observer: no `stream` in the request, the same result."""
    anthropic_server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
    result = await run_tool_loop(caller, Finder(), search, "ctx", STREAM, answer=Summary)
    assert result.answer == Summary.model_validate(ANSWER)
    assert [body.get("stream") for body in anthropic_server.requests] == [None, None]


class Writer:
    def role(self) -> RoleSpec:
        return RoleSpec(model="writer")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Write.", dynamic=ctx)


async def test_run_once_text_streams_anthropic_text_deltas(
    anthropic_server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """`run_once_text(stream=True)` through AnthropicCaller emits the text blocks as they arrive."""
    prose = "Tiers sort tools by what they can undo, and the loop runs only those it may."
    anthropic_server.add(FakeReply.text(prose, chunk_chars=10))
    recorder = Recorder()
    agent: OnceAgent[str] = Writer()
    result = await run_once_text(caller, agent, "tiers", observer=recorder, stream=True)
    assert result.text == prose
    texts = [e.text for e in recorder.events if isinstance(e, TextDelta)]
    assert len(texts) == 8
    assert texts[-1] == prose
    assert anthropic_server.requests[0]["stream"] is True
