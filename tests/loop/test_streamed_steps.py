"""Streamed steps: OpenAICaller streams through FakeOpenAIServer, and the run emits the step as it arrives."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from agentkit import (
    LoopConfig,
    Observer,
    OnceAgent,
    Prompt,
    RoleSpec,
    RoundInfo,
    StopReason,
    run_once_text,
    run_tool_loop,
)
from agentkit._deltas import StepDeltas
from agentkit.errors import Throttled
from agentkit.events import (
    AnswerDelta,
    Event,
    LLMCallFinished,
    PartialDiscarded,
    RationaleDelta,
    TextDelta,
    ToolCallStarted,
    iter_tool_loop,
)
from agentkit.journal import Journal, JournalObserver
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply
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
from tests.support import NO_WAIT, Finder, Recorder, search


@pytest.fixture
async def caller(server: FakeOpenAIServer) -> AsyncIterator[OpenAICaller]:
    async with OpenAICaller(base_url=server.base_url) as built:
        yield built


async def test_a_streamed_step_emits_its_rationale_as_it_grows_then_the_complete_step(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """Each round's rationale arrives in growing `RationaleDelta`s before the round's call is reported complete."""
    server.add(FakeReply.value(LOOK, chunk_chars=6), FakeReply.value(DONE, chunk_chars=6))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    assert_rationale_grew(events, 1, LOOK["rationale"])
    kinds = [e.kind for e in events]
    assert kinds.index("rationale_delta") < kinds.index("llm_call") < kinds.index("tool_call")
    assert not any(isinstance(e, PartialDiscarded) for e in events)
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_a_streamed_answer_is_validated_as_far_as_it_goes(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """Every `AnswerDelta` holds the answer so far, valid as far as it goes; the last one is the whole answer."""
    server.add(FakeReply.value(LOOK), FakeReply.value(DONE, chunk_chars=5))
    events, _ = await streamed_events(caller)
    partials = [e.partial for e in events if isinstance(e, AnswerDelta)]
    assert len(partials) > 3
    assert all(partials)  # an answer object just opened (`{}`) is nothing yet: no delta
    assert partials[-1] == ANSWER
    for partial in partials:
        assert isinstance(partial, dict)
        assert set(partial) <= {"title", "points"}
        assert isinstance(partial.get("title", ""), str)
        assert ANSWER["title"].startswith(str(partial.get("title", "")))
        points = partial.get("points", [])
        assert isinstance(points, list)
        assert all(isinstance(point, str) for point in points)


async def test_a_streamed_step_that_fails_validation_is_reasked_and_its_partial_discarded(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """A streamed step that does not validate is re-asked as today; the UI is told its partial was discarded."""
    invalid = {"rationale": "I will stop without the answer.", "decision": {"done": True}}
    server.add(FakeReply.value(invalid), FakeReply.value(DONE))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    deltas = [e for e in events if isinstance(e, RationaleDelta | PartialDiscarded)]
    [discarded] = [e for e in deltas if isinstance(e, PartialDiscarded)]
    before = deltas[: deltas.index(discarded)]
    after = deltas[deltas.index(discarded) + 1 :]
    assert before[-1].text == invalid["rationale"]  # type: ignore[union-attr]  # RationaleDeltas only, before it
    assert after[-1].text == DONE["rationale"]  # type: ignore[union-attr]  # and after it
    assert "answer" in discarded.reason
    assert len(server.requests) == 2
    assert "Correct your JSON" in json.dumps(server.requests[1]["messages"])


async def test_a_streamed_run_ends_as_a_run_that_does_not_stream(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """Streamed or not, the same replies give the same result: outcome, answer, rounds, items and usage."""
    replies = [FakeReply.value(LOOK, prompt_tokens=40, completion_tokens=7), FakeReply.value(DONE, prompt_tokens=50)]
    server.add(*replies)
    _, streamed = await streamed_events(caller)
    server.add(*replies)
    _, plain = await streamed_events(caller, PLAIN)
    assert "stream" not in server.requests[2]
    assert "stream_options" not in server.requests[2]
    fields = ("outcome", "stop_reason", "answer", "rounds", "items", "usage")
    assert [getattr(streamed, name) for name in fields] == [getattr(plain, name) for name in fields]
    assert streamed.usage.input_tokens == 90  # from the final chunk of each stream
    assert streamed.usage.output_tokens == 7 + plain.trace[1].usage.output_tokens


async def test_a_step_cut_off_mid_stream_ends_the_run_at_the_token_limit(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """`finish_reason: length` in a stream is a truncated reply, as without streaming; its partial is discarded."""
    server.add(FakeReply.truncated(json.dumps(LOOK)[:60]))
    events, result = await streamed_events(caller)
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert any(isinstance(e, RationaleDelta) for e in events)
    [discarded] = [e for e in events if isinstance(e, PartialDiscarded)]
    assert "cut off by the token limit" in discarded.reason


async def test_a_throttled_streamed_request_is_not_retried(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """HTTP 429 to a streamed request surfaces as `Throttled` after exactly one request, as today."""
    server.add(FakeReply.error(429, retry_after=7))
    _, result = await streamed_events(caller)
    assert isinstance(result.error, Throttled)
    assert result.error.retry_after == 7
    assert len(server.requests) == 1


async def test_a_failed_attempt_discards_its_partial_and_the_retry_streams_afresh(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """An attempt whose replies stay invalid fails, its partial discarded; the retry's deltas carry attempt 2."""
    broken = FakeReply.text('{"rationale": "half a tho')
    server.add(broken, broken, FakeReply.value(LOOK), FakeReply.value(DONE))
    events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    discarded = [e for e in events if isinstance(e, PartialDiscarded)]
    assert [e.attempt for e in discarded] == [1, 1]  # the re-ask within attempt 1, then attempt 1 itself
    assert "does not match schema" in discarded[1].reason
    attempts = [e.attempt for e in events if isinstance(e, RationaleDelta) and e.round == 1]
    assert attempts[0] == 1
    assert attempts[-1] == 2
    assert [e.attempt for e in events if isinstance(e, LLMCallFinished)][:2] == [1, 2]


async def test_a_caller_set_to_stream_streams_every_run(server: FakeOpenAIServer) -> None:
    """`OpenAICaller(stream=True)` streams a run that does not ask for it; a caller not set to, only runs that ask."""
    server.add(FakeReply.value(DONE))
    async with OpenAICaller(base_url=server.base_url, stream=True) as streaming:
        events, result = await streamed_events(streaming, PLAIN)
    assert result.answer == Summary.model_validate(ANSWER)
    assert server.requests[0]["stream"] is True
    assert any(isinstance(e, AnswerDelta) for e in events)


@pytest.mark.parametrize("mode", [StructuredMode.TOOLS, StructuredMode.JSON, StructuredMode.MD_JSON])
async def test_every_structured_mode_streams_its_step(server: FakeOpenAIServer, mode: StructuredMode) -> None:
    """A forced tool's arguments, JSON content and a fenced block all stream their rationale and answer."""
    server.add(FakeReply.value(DONE, chunk_chars=8))
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    assert [e.text for e in events if isinstance(e, RationaleDelta)][-1] == DONE["rationale"]
    assert [e.partial for e in events if isinstance(e, AnswerDelta)][-1] == ANSWER


async def test_a_passed_client_streams_through_its_own_post(server: FakeOpenAIServer) -> None:
    """A client you pass streams through its documented `post` (its hooks apply), with the same events."""
    seen: list[str] = []

    async def hook(request: Any) -> None:
        seen.append(str(request.url))

    client = openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key="k",
        http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [hook]}),
    )
    server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
    async with client:
        events, result = await streamed_events(OpenAICaller(client))
    assert result.answer == Summary.model_validate(ANSWER)
    assert len(seen) == 2
    assert any(isinstance(e, RationaleDelta) for e in events)


async def test_deltas_arrive_while_the_server_is_still_streaming(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """With the server pacing its chunks, the first `RationaleDelta` reaches the run before the stream has ended."""
    server.add(FakeReply.value(DONE, chunk_chars=4, pace=0.05))
    in_flight: list[int] = []

    class Watch(Observer):
        def on_delta(self, event: RationaleDelta | AnswerDelta | TextDelta | PartialDiscarded) -> None:
            in_flight.append(server.handling)

    result = await run_tool_loop(caller, Finder(), search, "ctx", STREAM, answer=Summary, observer=Watch())
    assert result.answer == Summary.model_validate(ANSWER)
    assert in_flight[0] == 1


async def test_a_run_nobody_watches_is_not_streamed(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """`LoopConfig(stream=True)` without an observer or a stream to read: today's request, the same result."""
    server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
    result = await run_tool_loop(caller, Finder(), search, "ctx", STREAM, answer=Summary)
    assert result.answer == Summary.model_validate(ANSWER)
    assert [body.get("stream") for body in server.requests] == [None, None]  # nobody to stream to: today's bytes


async def test_a_journaled_streamed_run_records_the_complete_step(
    server: FakeOpenAIServer, caller: OpenAICaller, journal: Journal
) -> None:
    """The journal of a streamed run holds its complete steps, as a run that did not stream records them."""
    recorder = Recorder()
    with JournalObserver(journal) as observer:
        server.add(FakeReply.value(LOOK, chunk_chars=5), FakeReply.value(DONE, chunk_chars=5))
        streamed = await run_tool_loop(
            caller, Finder(), search, "ctx", STREAM, answer=Summary, observer=[observer, recorder]
        )
        server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
        plain = await run_tool_loop(caller, Finder(), search, "ctx", PLAIN, answer=Summary, observer=observer)
        assert observer.flush(timeout=30)
    assert any(isinstance(e, RationaleDelta) for e in recorder.events)
    kept = [await journal.rounds(run.run_id) for run in (streamed, plain)]
    shape = [[(r.round, r.rationale, r.tool_name, r.args_json, r.done) for r in rounds] for rounds in kept]
    assert shape[0] == shape[1]
    assert shape[0][0][1] == LOOK["rationale"]
    (await journal.state(streamed.run_id)).verify()


class Writer:
    def role(self) -> RoleSpec:
        return RoleSpec(model="writer")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Write.", dynamic=ctx)


async def test_run_once_text_streams_text_deltas(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """`run_once_text(stream=True)` emits the prose as it arrives (`TextDelta`), then returns the whole text."""
    prose = "Tiers sort tools by what they can undo, and the loop runs only those it may."
    server.add(FakeReply.text(prose, chunk_chars=10))
    recorder = Recorder()
    agent: OnceAgent[str] = Writer()
    result = await run_once_text(caller, agent, "tiers", observer=recorder, stream=True)
    assert result.text == prose
    texts = [e.text for e in recorder.events if isinstance(e, TextDelta)]
    assert len(texts) == 8
    assert texts[-1] == prose
    assert server.requests[0]["stream"] is True
    assert [e.kind for e in recorder.events].index("text_delta") < [e.kind for e in recorder.events].index("llm_call")
    assert isinstance(next(e for e in recorder.events if isinstance(e, LLMCallFinished)).usage.output_tokens, int)


async def test_a_tool_call_event_follows_the_streamed_step(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """The streamed round's call runs with the args of the complete step."""
    server.add(FakeReply.value(LOOK, chunk_chars=3), FakeReply.value(DONE))
    events, _ = await streamed_events(caller)
    [call] = [e for e in events if isinstance(e, ToolCallStarted)]
    assert call.args.model_dump() == {"query": "tiers"}


async def test_streamed_requests_keep_their_connection_alive(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """Each stream is read to its end, past `[DONE]`, so the next request goes on the same connection."""
    server.add(FakeReply.value(LOOK), FakeReply.value(DONE))
    await streamed_events(caller)
    assert len(server.requests) == 2
    assert server.connections == 1


async def test_an_unreadable_chunk_mid_stream_is_a_transient_failure(server: FakeOpenAIServer) -> None:
    """A chunk that is not a chat-completion chunk fails the attempt as a retried `ProviderError`; the retry runs."""
    server.add(FakeReply.malformed(), FakeReply.value(DONE))
    async with OpenAICaller(base_url=server.base_url) as caller:
        events, result = await streamed_events(caller)
    assert result.answer == Summary.model_validate(ANSWER)
    [first, second] = [e for e in events if isinstance(e, LLMCallFinished)]
    assert "unreadable stream" in str(first.error)
    assert second.error is None


async def test_a_streamed_step_of_several_calls_runs_each_call_once_as_a_whole_step_would(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """Streaming and several calls per step: the rationale streams, then the step's calls run, each once, in the
    step's order, and the run ends as the same script ends without streaming."""
    several = {
        "rationale": "Two things are asked; I search for both at once.",
        "decision": {"done": False, "calls": [{"query": "tiers"}, {"query": "grants"}]},
    }

    async def run(config: LoopConfig) -> tuple[list[Event], Any]:
        server.add(FakeReply.value(several, chunk_chars=5), FakeReply.value(DONE, chunk_chars=5))
        return await streamed_events(caller, config)

    streamed, result = await run(LoopConfig(retry=NO_WAIT, stream=True, max_calls_per_step=2))
    plain, expected = await run(LoopConfig(retry=NO_WAIT, max_calls_per_step=2))
    assert [e.args for e in streamed if isinstance(e, ToolCallStarted)] == [
        e.args for e in plain if isinstance(e, ToolCallStarted)
    ]
    assert [getattr(e.args, "query", None) for e in streamed if isinstance(e, ToolCallStarted)] == ["tiers", "grants"]
    assert any(isinstance(e, RationaleDelta) and e.round == 1 for e in streamed)
    assert not any(isinstance(e, RationaleDelta) for e in plain)
    assert result.items == expected.items
    assert result.answer == expected.answer == Summary.model_validate(ANSWER)
    assert all(request.get("stream") is True for request in server.requests[:2])


# --- the answer so far, checked as its type declares it --------------------------------------------------


class _Aliased(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    title: str = Field(alias="Title")
    points: list[str] = Field(alias="Points")


class _Checked(BaseModel):
    score: int = Field(le=10)
    label: str = Field(max_length=5)
    code: str = ""

    @field_validator("code")
    @classmethod
    def _upper(cls, value: str) -> str:
        if value != value.upper():
            raise ValueError("code must be upper case")
        return value


class _Numbers(BaseModel):
    amount: int
    ratio: float
    values: list[float] = []


def answer_deltas(answer: type[BaseModel], text: str) -> list[JsonValue]:
    """The `AnswerDelta` partials of a done step whose JSON is `text`, grown one character at a time."""
    emitted: list[Event] = []
    deltas = StepDeltas.of(answer)(emitted.append, "r", 1, True)
    for end in range(1, len(text) + 1):
        deltas.grew(text[:end])
    return [e.partial for e in emitted if isinstance(e, AnswerDelta)]


def done_text(answer: dict[str, Any]) -> str:
    return json.dumps({"rationale": "Answer.", "decision": {"done": True, "answer": answer}})


def test_a_streamed_answer_keeps_its_fields_aliases() -> None:
    """An answer type with aliases streams its answer so far under them, as the model writes it, the last partial
    the whole answer (not an empty object for every delta)."""
    answer = {"Title": "Tiers", "Points": ["a", "b"]}
    partials = answer_deltas(_Aliased, done_text(answer))
    assert partials[0] == {"Title": ""}
    assert partials[-1] == answer
    assert all(partials)


@pytest.mark.parametrize(
    ("answer", "bad"),
    [
        ({"label": "ok", "score": 99}, "score"),
        ({"score": 3, "label": "waytoolong"}, "label"),
        ({"score": 3, "label": "ok", "code": "low"}, "code"),
    ],
    ids=["above le", "over max_length", "refused by a field validator"],
)
def test_a_streamed_answer_is_checked_against_its_fields_constraints_and_validators(
    answer: dict[str, Any], bad: str
) -> None:
    """A partial answer whose present fields break their declared constraints or field validators is not emitted:
    none shows the value that breaks them."""
    partials = answer_deltas(_Checked, done_text(answer))
    assert partials
    assert all(isinstance(partial, dict) for partial in partials)
    assert not [partial for partial in partials if isinstance(partial, dict) and partial.get(bad) == answer[bad]]


@settings(max_examples=60, deadline=None)
@given(
    amount=st.integers(),
    ratio=st.floats(allow_nan=False, allow_infinity=False),
    values=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3),
    spaced=st.booleans(),
)
def test_a_number_cut_by_a_chunk_is_not_shown_until_it_is_complete(
    amount: int, ratio: float, values: list[float], spaced: bool
) -> None:
    """However the reply is cut, every number in an answer so far is one the model finished writing: a number at
    the end of the text so far may go on, so it is left out until a delimiter ends it."""
    answer = {"amount": amount, "ratio": ratio, "values": values}
    text = json.dumps(answer) if spaced else json.dumps(answer, separators=(",", ":"))
    partials = answer_deltas(_Numbers, done_text(json.loads(text)).replace(json.dumps(answer), text))
    for partial in partials:
        assert isinstance(partial, dict)
        assert partial.get("amount", amount) == amount
        assert partial.get("ratio", ratio) == ratio
        shown = partial.get("values", [])
        assert isinstance(shown, list)
        assert shown == values[: len(shown)]
    assert partials[-1] == _Numbers.model_validate(answer).model_dump(mode="json")


async def test_a_streamed_answer_shows_no_number_before_its_end(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """Through the wire, a number cut by a chunk boundary appears in no AnswerDelta until it is whole."""
    step = {"rationale": "A.", "decision": {"done": True, "answer": {"amount": 123456789, "ratio": 0.987654}}}
    server.add(FakeReply.value(step, chunk_chars=3))
    async with iter_tool_loop(caller, Finder(), search, "ctx", STREAM, answer=_Numbers) as run:
        partials = [event.partial async for event in run if isinstance(event, AnswerDelta)]
    assert partials
    assert all(isinstance(p, dict) and p.get("amount", 123456789) == 123456789 for p in partials)
    assert all(isinstance(p, dict) and p.get("ratio", 0.987654) == 0.987654 for p in partials)
