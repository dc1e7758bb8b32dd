"""AnthropicCaller's streamed replies: the Messages API's server-sent events folded into the message a whole body
would have been (what every streaming caller promises is in test_contract_streamed.py; here is Anthropic's own:
the event types, thinking, the cache's counts and the `error` event)."""

from __future__ import annotations

import http.server
import json
from typing import Any

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit.errors import AgentkitError, ProviderError, Throttled
from agentkit.providers import Reasoning
from agentkit.providers._messages import BrokenStream, Event, Message, Streamed, StreamFailed
from agentkit.providers.anthropic import AnthropicCaller
from agentkit.testing import FakeAnthropicServer, FakeReply
from agentkit.testing._fake_anthropic import _events
from tests.providers.support import Verdict, request
from tests.support import http_server


@pytest.fixture
def server(anthropic_server: FakeAnthropicServer) -> FakeAnthropicServer:
    """This module's server is Anthropic's (`anthropic_server`)."""
    return anthropic_server


def fold(events: list[dict[str, Any]]) -> Message:
    folded = Streamed()
    for event in events:
        folded.add(Event.model_validate(event))
    return folded.reply()


START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 25, "cache_read_input_tokens": 10, "output_tokens": 1},
    },
}
TOOL: dict[str, Any] = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "tool_use", "id": "t", "name": "V", "input": {}},
}
STOP: list[dict[str, Any]] = [
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 15}},
    {"type": "message_stop"},
]


def piece(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": text}}


# --- the fold ----------------------------------------------------------------------------------------


def test_the_folded_message_joins_the_tool_input_and_takes_the_final_usage() -> None:
    """Input pieces join into the tool's input; message_delta's cumulative counts replace message_start's."""
    reply = fold([START, {"type": "ping"}, TOOL, piece('{"sco'), {"type": "ping"}, piece('re": 4}'), *STOP])
    assert reply.content[0].input == {"score": 4}
    assert (reply.id, reply.model, reply.stop_reason) == ("msg_1", "m", "tool_use")
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens, reply.usage.output_tokens) == (25, 10, 15)


def test_cumulative_input_counts_in_message_delta_replace_the_starts() -> None:
    """A message_delta that reports input counts too (as the API now does) is the usage, as the SDK folds it."""
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use"},
        "usage": {"input_tokens": 30, "output_tokens": 9},
    }
    reply = fold([START, TOOL, piece("{}"), STOP[0], end, STOP[2]])
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens, reply.usage.output_tokens) == (30, 10, 9)


@pytest.mark.parametrize(
    ("events", "why"),
    [
        ([TOOL, *STOP], "before message_start"),
        ([START, TOOL, piece("{}"), *STOP[:2]], "before message_stop"),
        ([START, piece("{}"), *STOP], "no block that was started"),
        ([START, TOOL, piece('{"score": 4'), *STOP], "not JSON"),
        ([START, START], "a second one"),
    ],
)
def test_events_that_make_no_message_are_a_broken_stream(events: list[dict[str, Any]], why: str) -> None:
    """Out of order, unfinished or with a tool input that is not JSON: the stream is broken, never half used."""
    with pytest.raises(BrokenStream, match=why):
        fold(events)


def test_an_input_cut_off_by_the_token_limit_is_kept_as_far_as_it_goes() -> None:
    """A stream that stops at max_tokens mid-input is not broken: it is a truncated reply, kept as far as it goes."""
    end = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}
    reply = fold([START, TOOL, piece('{"score": 4, "no'), STOP[0], end, STOP[2]])
    assert reply.stop_reason == "max_tokens"
    assert reply.content[0].input == {"score": 4}


def test_an_error_event_is_raised_with_its_type() -> None:
    """An `error` event ends the fold with the error's type and message."""
    with pytest.raises(StreamFailed) as failed:
        fold([START, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}])
    assert (failed.value.kind, failed.value.message) == ("overloaded_error", "Overloaded")


def test_unknown_events_and_deltas_are_skipped() -> None:
    """Event and delta types this version does not know (citations, new ones) add nothing and break nothing."""
    other = {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}}
    reply = fold([START, {"type": "something_new"}, TOOL, other, piece('{"score": 1}'), *STOP])
    assert reply.content[0].input == {"score": 1}


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)  # UTF-8: no lone surrogates, as JSON from the API


@settings(max_examples=60, deadline=None)
@given(
    thought=_TEXT,
    said=_TEXT,
    value=st.dictionaries(_TEXT, st.one_of(_TEXT, st.integers(), st.booleans(), st.none()), max_size=4),
    size=st.one_of(st.none(), st.integers(1, 9)),
    stop=st.sampled_from(["tool_use", "end_turn", "max_tokens"]),
)
def test_any_message_streamed_in_any_pieces_folds_into_its_body(
    thought: str, said: str, value: dict[str, Any], size: int | None, stop: str
) -> None:
    """Whatever the blocks and however they are cut, the folded stream is the message its body carries."""
    content = [
        {"type": "thinking", "thinking": thought, "signature": "sig"},
        {"type": "text", "text": said},
        {"type": "tool_use", "id": "toolu_1", "name": "V", "input": value},
    ]
    usage = {"input_tokens": 7, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 11}
    body: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content}
    body |= {"stop_reason": stop, "stop_sequence": None, "usage": usage}
    folded = Streamed()
    for event in _events(body, size):
        data = event.decode().split("\ndata: ", 1)[1]
        folded.add(Event.model_validate_json(data))
    whole = Message.model_validate(body)
    assert folded.reply() == whole
    assert [b.model_dump(exclude_unset=True) for b in folded.reply().content] == content


# --- through the wire ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 529, 500, 400, 401, 403, 404, 413])
async def test_an_error_event_mid_stream_is_the_error_of_its_status(server: FakeAnthropicServer, status: int) -> None:
    """`overloaded_error` mid-stream is what a 529 is, `rate_limit_error` what a 429 is, and so on."""
    server.add(FakeReply.error(status), FakeReply.error(status, mid_stream=True))
    async with (
        AnthropicCaller(base_url=server.base_url) as whole,
        AnthropicCaller(base_url=server.base_url, stream=True) as streaming,
    ):
        with pytest.raises(AgentkitError) as body_error:
            await whole.complete(request(), Verdict)
        with pytest.raises(AgentkitError) as stream_error:
            await streaming.complete(request(), Verdict)
    assert type(stream_error.value) is type(body_error.value)
    if isinstance(body_error.value, ProviderError):
        assert isinstance(stream_error.value, ProviderError)
        assert (stream_error.value.transient, stream_error.value.status) == (
            body_error.value.transient,
            body_error.value.status,
        )
    else:
        assert isinstance(stream_error.value, Throttled)
    assert "mid-stream" in str(stream_error.value)
    assert stream_error.value.usage is not None
    assert stream_error.value.usage.requests == 1


async def test_a_streamed_thinking_reply_keeps_its_reasoning_and_sends_its_signature_back(
    server: FakeAnthropicServer,
) -> None:
    """Thinking deltas fold into the reasoning; a re-ask sends the thinking block back with its signature."""
    server.add(FakeReply.value({"score": "high"}, reasoning="Weigh it first.", chunk_chars=4), {"score": 3})
    async with AnthropicCaller(base_url=server.base_url, stream=True) as caller:
        completion = await caller.complete(request(max_tokens=4000, reasoning=Reasoning(budget_tokens=1024)), Verdict)
    assert completion.value == Verdict(score=3)
    sent_back = server.requests[1]["messages"][1]["content"]
    answered = server.responses[0]
    assert answered is not None
    assert sent_back == answered["content"]  # thinking (its signature included) and tool_use, as the body had them
    assert sent_back[0]["thinking"] == "Weigh it first."


async def test_a_streamed_request_is_the_plain_request_asking_to_stream(server: FakeAnthropicServer) -> None:
    """Streaming adds `stream: true` and nothing else; a caller not set to stream sends no `stream` at all."""
    async with (
        AnthropicCaller(base_url=server.base_url) as plain,
        AnthropicCaller(base_url=server.base_url, stream=True) as streaming,
    ):
        await plain.complete(request(), Verdict)
        await streaming.complete(request(), Verdict)
    whole, streamed = server.requests
    assert "stream" not in whole
    assert streamed == {**whole, "stream": True}


async def test_a_passed_client_streams_through_its_own_post(server: FakeAnthropicServer) -> None:
    """A client you pass streams through its documented `post`: its hooks apply, its body is read to the end."""
    seen: list[str] = []

    async def hook(sent: Any) -> None:
        seen.append(str(sent.url))

    http = anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [hook]})
    server.add(FakeReply.value({"score": 2}, chunk_chars=2), {"score": 5})
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", http_client=http) as client:
        caller = AnthropicCaller(client, stream=True)
        assert (await caller.complete(request(), Verdict)).value.score == 2
        assert (await caller.complete(request(), Verdict)).value.score == 5
    assert seen == [f"{server.base_url}/v1/messages"] * 2
    assert [body["stream"] for body in server.requests] == [True, True]
    assert server.connections == 1


def api_stream(events: list[bytes]) -> type[http.server.BaseHTTPRequestHandler]:
    """A server that answers every request with these bytes as a stream (closing the connection after it)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def sse(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\r\ndata: {json.dumps(data)}\r\n\r\n".encode()


async def test_a_stream_as_the_api_frames_it_is_read_comments_and_crlf_included() -> None:
    """CRLF line ends, a comment line, events split across reads and no blank line after the last: the same
    message."""
    framed = b"".join(sse(event) for event in [START, {"type": "ping"}, TOOL, piece('{"score":'), piece(" 6}"), *STOP])
    framed = b": a comment\r\n\r\n" + framed.rstrip(b"\r\n") + b"\r\n"
    cut = [framed[i : i + 7] for i in range(0, len(framed), 7)]
    with http_server(api_stream(cut)) as url:
        async with AnthropicCaller(base_url=url, stream=True) as caller:
            completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=6)
    assert (completion.usage.input_tokens, completion.usage.cached_input_tokens, completion.usage.output_tokens) == (
        35,
        10,
        15,
    )
    assert completion.response_id == "msg_1"


async def test_a_message_stop_line_without_its_newline_ends_nothing() -> None:
    """A body that stops inside the `message_stop` line (no newline after it) has not ended: a transient
    ProviderError, never taken as the model's reply; the same stream with the newline is the reply."""
    framed = b"".join(sse(event) for event in [START, TOOL, piece('{"score": 6}'), *STOP]).rstrip(b"\r\n")
    with http_server(api_stream([framed])) as url:
        async with AnthropicCaller(base_url=url, stream=True) as caller:
            with pytest.raises(ProviderError, match="ended before message_stop") as raised:
                await caller.complete(request(), Verdict)
    assert raised.value.transient
    with http_server(api_stream([framed + b"\r\n"])) as url:
        async with AnthropicCaller(base_url=url, stream=True) as caller:
            completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=6)


async def test_a_refusal_mid_input_is_reasked_not_taken_for_a_broken_stream() -> None:
    """A stream the API stops as a refusal inside the call's input is the model's refusal, asked again once (its
    partial input kept as far as it goes): not an unreadable stream retried as the server's fault."""
    refused = [
        START,
        TOOL,
        piece('{"sco'),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    whole = [START, TOOL, piece('{"score": 6}'), *STOP]
    bodies = [b"".join(sse(event) for event in refused), b"".join(sse(event) for event in whole)]
    seen: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(bodies[len(seen) - 1])

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        async with AnthropicCaller(base_url=url, stream=True) as caller:
            completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=6)
    assert len(seen) == 2
    assert "the model refused" in json.dumps(seen[1]["messages"][-1])


async def test_a_connection_broken_mid_stream_says_the_stream_broke() -> None:
    """A connection that breaks while the 200 streams is a transient error that says the stream broke (the server
    was reached), not that the server could not be reached."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", "10000")  # promised, never sent: the connection breaks
            self.end_headers()
            self.wfile.write(sse(START) + sse(TOOL))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        async with AnthropicCaller(base_url=url, stream=True) as caller:
            with pytest.raises(
                ProviderError, match="the stream of model 'm' broke after the model server answered 200"
            ):
                await caller.complete(request(), Verdict)
