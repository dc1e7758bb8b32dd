"""The provider contract for streamed replies: every caller that streams (`OpenAICaller`, `AnthropicCaller`),
set to `stream=True`, folds its server's stream into the reply a whole body would have been, so the same
promises hold as without streaming, and reports the reply's text as it grows (`agentkit._deltas`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, RetryPolicy, run_tool_loop
from agentkit._deltas import listening
from agentkit.errors import ProviderError, Throttled, Truncated
from agentkit.testing import FakeReply, call_step, done_step
from tests.providers.support import WIRES, Caller, Wire, fake_server, open_wire, request
from tests.support import Query, Searcher, corpus_search

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


class Verdict(BaseModel):
    score: int
    note: str = ""


class Heard:
    """A streaming listener that keeps what the caller reports."""

    wanted = False

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.starts = 0
        self.rejections: list[str] = []

    def started(self) -> None:
        self.starts += 1

    def grew(self, text: str) -> None:
        self.texts.append(text)

    def rejected(self, reason: str) -> None:
        self.rejections.append(reason)


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """Each provider's caller with its fake server."""
    with fake_server(request.param) as server:
        yield open_wire(request.param, server)
        server.assert_no_errors()


@pytest.fixture
async def streaming(wire: Wire) -> AsyncIterator[Caller]:
    built = wire.caller(stream=True)
    try:
        yield built
    finally:
        await built.aclose()


async def test_a_streamed_reply_completes_as_its_body_does(wire: Wire, streaming: Caller) -> None:
    """The same reply, streamed or whole, gives the same completion: value, usage (cache counts included), reasons."""
    reply = FakeReply.value({"score": 4, "note": "fine"}, chunk_chars=3, prompt_tokens=30, completion_tokens=9)
    cached = FakeReply.value({"score": 4, "note": "fine"}, prompt_tokens=30, completion_tokens=9, cached_tokens=12)
    wire.server.add(reply, cached)
    streamed = [await streaming.complete(request(), Verdict) for _ in range(2)]
    wire.forget_cache()
    wire.server.add(reply, cached)
    plain = wire.caller()
    try:
        whole = [await plain.complete(request(), Verdict) for _ in range(2)]
    finally:
        await plain.aclose()
    assert [body.get("stream") for body in wire.server.requests] == [True, True, None, None]
    for one, other in zip(streamed, whole, strict=True):
        assert (one.value, one.usage, one.finish_reasons, one.reasoning) == (
            other.value,
            other.usage,
            other.finish_reasons,
            other.reasoning,
        )
    assert streamed[1].usage.cached_input_tokens == 12
    assert sum(c.usage.input_tokens for c in streamed) == sum(given for given, _ in wire.usage_blocks()[:2])


async def test_a_streamed_reply_reports_its_text_as_it_grows(wire: Wire, streaming: Caller) -> None:
    """Each report is the reply's JSON so far, growing, and the last is the whole answer."""
    wire.server.add(FakeReply.value({"score": 4, "note": "a longer note"}, chunk_chars=4))
    heard = Heard()
    with listening(heard):
        completion = await streaming.complete(request(), Verdict)
    assert completion.value == Verdict(score=4, note="a longer note")
    assert heard.starts == 1
    assert len(heard.texts) > 3
    assert all(later.startswith(earlier) for earlier, later in zip(heard.texts, heard.texts[1:], strict=False))
    assert json.loads(heard.texts[-1]) == {"score": 4, "note": "a longer note"}


async def test_a_run_through_a_streaming_caller_ends_as_one_that_does_not(wire: Wire, streaming: Caller) -> None:
    """A call, a re-ask and done: the streamed run's items, rounds and usage equal the server's own counts."""
    wire.server.add({"done": False}, call_step(Query(query="x")), done_step())
    result = await run_tool_loop(streaming, Searcher(), corpus_search, "ctx", FAST)
    assert result.outcome is Outcome.APPLIED
    assert "a step with done=false must carry a call" in wire.last_text(wire.server.requests[1])
    blocks = wire.usage_blocks()
    assert result.usage.requests == len(wire.server.requests) == 3
    assert result.usage.input_tokens == sum(given for given, _ in blocks)
    assert result.usage.output_tokens == sum(taken for _, taken in blocks)


async def test_a_streamed_reasked_reply_is_reported_rejected(wire: Wire, streaming: Caller) -> None:
    """A streamed reply that does not validate is re-asked, and the listener is told before the re-ask starts."""
    wire.server.add('{"score": "many"}', {"score": 2})
    heard = Heard()
    with listening(heard):
        completion = await streaming.complete(request(), Verdict)
    assert completion.value.score == 2
    assert heard.starts == 2
    [reason] = heard.rejections
    assert "did not validate" in reason


async def test_a_streamed_reply_cut_off_is_truncated(wire: Wire, streaming: Caller) -> None:
    """A stream that ends at the token limit is `Truncated`, for a step and for prose, never parsed."""
    wire.server.add(FakeReply.truncated('{"score": 1'), FakeReply.truncated("Otters ho"))
    with pytest.raises(Truncated):
        await streaming.complete(request(), Verdict)
    with pytest.raises(Truncated) as cut:
        await streaming.complete_text(request())
    assert cut.value.raw == "Otters ho"
    assert len(wire.server.requests) == 2


async def test_a_broken_stream_is_a_transient_provider_error(wire: Wire, streaming: Caller) -> None:
    """A stream whose event is not JSON is a retried `ProviderError`, with the request's usage on it."""
    wire.server.add(FakeReply.malformed())
    with pytest.raises(ProviderError, match="unreadable stream") as raised:
        await streaming.complete(request(), Verdict)
    assert raised.value.transient
    assert raised.value.usage is not None
    assert raised.value.usage.requests == 1


async def test_a_server_error_mid_stream_is_transient(wire: Wire, streaming: Caller) -> None:
    """A server that fails after its 200 (an error in the stream) fails the call as a retried `ProviderError`."""
    wire.server.add(FakeReply.error(500, mid_stream=True))
    with pytest.raises(ProviderError, match="mid-stream") as raised:
        await streaming.complete(request(), Verdict)
    assert raised.value.transient


@pytest.mark.parametrize(("status", "transient"), [(529, True), (500, True), (400, False), (404, False)])
async def test_http_errors_of_a_streamed_request_map_as_without_streaming(
    wire: Wire, streaming: Caller, status: int, transient: bool
) -> None:
    """An HTTP error status to a streamed request is the error it is to a whole one."""
    wire.server.add(FakeReply.error(status))
    with pytest.raises(ProviderError) as raised:
        await streaming.complete(request(), Verdict)
    assert (raised.value.transient, raised.value.status) == (transient, status)


async def test_a_throttled_streamed_request_is_throttled_after_one_request(wire: Wire, streaming: Caller) -> None:
    """HTTP 429 to a streamed request is `Throttled` with its retry-after, after exactly one request."""
    wire.server.add(FakeReply.error(429, retry_after=7))
    with pytest.raises(Throttled) as raised:
        await streaming.complete(request(), Verdict)
    assert raised.value.retry_after == 7
    assert len(wire.server.requests) == 1


async def test_the_deadline_covers_the_whole_stream(wire: Wire) -> None:
    """A stream still arriving when `timeout` runs out is a transient timeout, however fast each event comes."""
    wire.server.add(FakeReply.value({"score": 4, "note": "a note long enough"}, chunk_chars=1, pace=0.05))
    caller = wire.caller(stream=True, timeout=0.3)
    try:
        with pytest.raises(ProviderError, match="timed out") as raised:
            await caller.complete(request(), Verdict)
    finally:
        await caller.aclose()
    assert raised.value.transient


async def test_streamed_requests_keep_their_connection_alive(wire: Wire, streaming: Caller) -> None:
    """Each stream is read to its end, so the next request goes on the same connection."""
    wire.server.add({"score": 1}, {"score": 2}, "prose")
    assert (await streaming.complete(request(), Verdict)).value.score == 1
    assert (await streaming.complete(request(), Verdict)).value.score == 2
    assert (await streaming.complete_text(request())).text == "prose"
    assert wire.server.connections == 1
