"""FakeAnthropicServer on its own, through the official anthropic SDK: the Messages wire format, the simulated
prompt cache, the faults in Anthropic's error format, and the requests it rejects as the API does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from pydantic import BaseModel

from agentkit.testing import FakeAnthropicServer, FakeReply

SYSTEM = [{"type": "text", "text": "You rate texts. " * 40, "cache_control": {"type": "ephemeral"}}]


class Score(BaseModel):
    score: int


TOOL = {"name": "Score", "input_schema": Score.model_json_schema()}


@pytest.fixture
def server(anthropic_server: FakeAnthropicServer) -> FakeAnthropicServer:
    """This module's server is Anthropic's (`anthropic_server`)."""
    return anthropic_server


@pytest.fixture
def client(server: FakeAnthropicServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0) as built:
        yield built


def ask(client: anthropic.Anthropic, **body: Any) -> Any:
    fields: dict[str, Any] = {"model": "claude-test", "max_tokens": 2000, "messages": user("hi"), **body}
    return client.messages.create(**fields)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def post(server: FakeAnthropicServer, body: object, **headers: str) -> httpx2.Response:
    sent = {"x-api-key": "k", "anthropic-version": "2023-06-01", **headers}
    return httpx2.post(f"{server.base_url}/v1/messages", content=json.dumps(body), headers=sent)


def rejected(server: FakeAnthropicServer, **body: Any) -> str:
    """The error message of a request the fake refuses with 400 (in Anthropic's error format)."""
    response = post(server, {"model": "m", "max_tokens": 2000, "messages": user("hi"), **body})
    assert response.status_code == 400, response.text
    error = response.json()
    assert (error["type"], error["error"]["type"]) == ("error", "invalid_request_error")
    return str(error["error"]["message"])


def accepted(server: FakeAnthropicServer, **body: Any) -> bool:
    """Whether the fake answers a request with 200."""
    response = post(server, {"model": "m", "max_tokens": 2000, "messages": user("hi"), **body})
    return response.status_code == 200


# --- the wire format ---------------------------------------------------------------------------------


def test_unscripted_reply_calls_the_forced_tool_with_valid_input(client: anthropic.Anthropic) -> None:
    """A forced tool gets a tool_use block whose input validates against the tool's schema."""
    message = ask(client, tools=[TOOL], tool_choice={"type": "tool", "name": "Score"})
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert (block.type, block.name) == ("tool_use", "Score")
    Score.model_validate(block.input)


def test_unscripted_reply_without_tools_is_text(client: anthropic.Anthropic) -> None:
    """Without tools the reply is one text block ending the turn."""
    message = ask(client)
    assert (message.stop_reason, [block.type for block in message.content]) == ("end_turn", ["text"])


def test_thinking_request_gets_a_thinking_block_first(client: anthropic.Anthropic) -> None:
    """With thinking on, the reply opens with a signed thinking block."""
    message = ask(client, thinking={"type": "enabled", "budget_tokens": 1024}, tools=[TOOL])
    assert [block.type for block in message.content] == ["thinking", "tool_use"]
    assert message.content[0].signature


def test_several_tool_calls_come_as_several_blocks(server: FakeAnthropicServer, client: anthropic.Anthropic) -> None:
    """FakeReply.tool_calls answers with one tool_use block per call."""
    server.add(FakeReply.tool_calls({"score": 1}, {"score": 2}))
    message = ask(client, tools=[TOOL], tool_choice={"type": "tool", "name": "Score"})
    assert [block.input for block in message.content] == [{"score": 1}, {"score": 2}]


def test_truncated_fault_stops_at_max_tokens(server: FakeAnthropicServer, client: anthropic.Anthropic) -> None:
    """FakeReply.truncated ends the message with stop_reason max_tokens."""
    server.add(FakeReply.truncated("half a rep"))
    message = ask(client)
    assert (message.stop_reason, message.content[0].text) == ("max_tokens", "half a rep")


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [
        (429, "rate_limit_error", anthropic.RateLimitError),
        (529, "overloaded_error", anthropic.OverloadedError),
        (500, "api_error", anthropic.InternalServerError),
        (401, "authentication_error", anthropic.AuthenticationError),
    ],
)
def test_error_faults_come_in_anthropics_error_format(
    server: FakeAnthropicServer, client: anthropic.Anthropic, status: int, kind: str, error: type[Exception]
) -> None:
    """Each error status answers Anthropic's error body with its type; a 429 carries retry-after."""
    server.add(FakeReply.error(status, retry_after=3))
    with pytest.raises(error) as raised:
        ask(client)
    assert isinstance(raised.value, anthropic.APIStatusError)
    assert raised.value.status_code == status
    body = raised.value.response.json()
    assert (body["type"], body["error"]["type"]) == ("error", kind)
    assert raised.value.response.headers["retry-after"] == "3"


# --- the simulated prompt cache ----------------------------------------------------------------------


def test_a_repeated_prefix_is_written_then_read_from_the_cache(client: anthropic.Anthropic) -> None:
    """The first request writes the prefix up to the breakpoint; the next one with the same prefix reads it."""
    first = ask(client, system=SYSTEM, messages=user("one"))
    second = ask(client, system=SYSTEM, messages=user("two, a longer turn"))
    assert first.usage.cache_creation_input_tokens > 0
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens > first.usage.input_tokens


def test_no_breakpoint_or_a_changed_prefix_reads_nothing(client: anthropic.Anthropic) -> None:
    """Without cache_control nothing is cached; a changed system prompt misses the cache and writes anew."""
    plain = [{"type": "text", "text": SYSTEM[0]["text"]}]
    assert ask(client, system=plain).usage.cache_creation_input_tokens == 0
    assert ask(client, system=plain).usage.cache_read_input_tokens == 0
    ask(client, system=SYSTEM)
    changed = [{**SYSTEM[0], "text": "You rate other texts. " * 40}]
    usage = ask(client, system=changed).usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens > 0) == (0, True)


def test_a_prefix_below_the_minimum_is_not_cached() -> None:
    """min_cache_tokens: a shorter prefix is neither written nor read, as the API caches nothing below it."""
    with (
        FakeAnthropicServer(min_cache_tokens=100_000) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        ask(client, system=SYSTEM)
        usage = ask(client, system=SYSTEM).usage
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (0, 0)


# --- requests the API refuses ------------------------------------------------------------------------


def test_a_request_without_a_key_is_refused_401(server: FakeAnthropicServer) -> None:
    """No x-api-key: 401 authentication_error."""
    response = httpx2.post(
        f"{server.base_url}/v1/messages",
        content=json.dumps({"model": "m", "max_tokens": 5, "messages": user("hi")}),
        headers={"anthropic-version": "2023-06-01"},
    )
    assert (response.status_code, response.json()["error"]["type"]) == (401, "authentication_error")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"seed": 7}, "seed: Extra inputs are not permitted"),
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message must use the 'user' role"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}, "non-empty"),
        ({"system": [{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]}, "ephemeral"),
        ({"tools": [{"name": "bad name", "input_schema": {"type": "object"}}]}, "pattern"),
        ({"tools": [{"name": "t", "input_schema": {"anyOf": []}}]}, "input_schema.type"),
        ({"tool_choice": {"type": "tool", "name": "t"}}, "only be specified while providing tools"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "greater than or equal to 1024"),
        ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "`max_tokens` must be greater"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 0.2}, "only be set to 1"),
        ({"temperature": 1.5}, "temperature"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": " \n"}]}]}, "non-whitespace text"),
        ({"top_p": 7}, "top_p: Input should be a number from 0 to 1"),
        ({"top_k": -3}, "top_k: Input should be an integer >= 0"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "top_p": 0.5}, "between 0.95 and 1"),
        ({"stream": "yes"}, "stream: Input should be a valid boolean"),
    ],
)
def test_malformed_requests_are_refused_with_the_field_named(
    server: FakeAnthropicServer, body: dict[str, Any], problem: str
) -> None:
    """A body the Messages API refuses is a 400 whose message names what is wrong."""
    assert problem in rejected(server, **body)


def test_thinking_with_a_forced_tool_is_refused(server: FakeAnthropicServer) -> None:
    """The API's rule: thinking may not be enabled when tool_choice forces tool use."""
    problem = rejected(
        server, thinking={"type": "enabled", "budget_tokens": 1024}, tools=[TOOL], tool_choice={"type": "any"}
    )
    assert "Thinking may not be enabled when tool_choice forces tool use" in problem


def test_with_thinking_a_tool_calling_turn_must_start_with_its_thinking_block(server: FakeAnthropicServer) -> None:
    """The API's rule: with thinking on, the last assistant turn that calls a tool starts with its thinking block
    (sent back as it came); without thinking, or with the block first, the turn is accepted."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Score", "input": {}}
    thought = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    answer = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "bad"}]}]
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "tools": [TOOL]}
    bare = [*user("hi"), {"role": "assistant", "content": [call]}, *answer]
    assert "must start with a thinking block" in rejected(server, messages=bare, **thinking)
    assert "messages.1.content.0.type" in rejected(server, messages=bare, **thinking)
    assert accepted(server, messages=bare, tools=[TOOL])
    first = [*user("hi"), {"role": "assistant", "content": [thought, call]}, *answer]
    assert accepted(server, messages=first, **thinking)


def test_more_than_four_breakpoints_are_refused(server: FakeAnthropicServer) -> None:
    """At most four blocks may carry cache_control."""
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    assert "A maximum of 4 blocks" in rejected(server, system=[block] * 5)


def test_a_tool_use_must_be_answered_by_its_tool_result(server: FakeAnthropicServer) -> None:
    """An assistant tool_use not answered in the next user turn, or a tool_result for no call, is refused."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Score", "input": {}}
    unanswered = [*user("hi"), {"role": "assistant", "content": [call]}, *user("and?")]
    assert "without `tool_result` blocks" in rejected(server, messages=unanswered, tools=[TOOL])
    stray = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]
    assert "unexpected `tool_use_id`" in rejected(server, messages=stray)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"type": "base64", "media_type": "image/bmp", "data": "AAAA"}, "media_type"),
        ({"type": "base64", "media_type": "image/png", "data": "not base64!"}, "invalid base64"),
        ({"type": "file"}, "source.type"),
        ({"type": "url", "url": "nope"}, "source.url: Input should be an http(s) URL"),
    ],
)
def test_image_sources_are_checked(server: FakeAnthropicServer, source: dict[str, Any], problem: str) -> None:
    """An image block's source must be a known media type with base64 data (or a URL)."""
    content = [{"type": "image", "source": source}, {"type": "text", "text": "what is it?"}]
    assert problem in rejected(server, messages=[{"role": "user", "content": content}])


def test_a_wrong_route_is_a_404_in_anthropics_format(server: FakeAnthropicServer) -> None:
    """Only POST /v1/messages is served."""
    response = httpx2.post(f"{server.base_url}/v1/complete", content=b"{}", headers={"x-api-key": "k"})
    assert (response.status_code, response.json()["error"]["type"]) == (404, "not_found_error")


# --- streaming -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("thinking", [False, True])
def test_a_streamed_reply_is_the_message_the_sdks_stream_accumulates(
    server: FakeAnthropicServer, client: anthropic.Anthropic, thinking: bool
) -> None:
    """The SDK's own stream reader folds the fake's events into the message the fake answered (recorded whole)."""
    server.add(FakeReply.value({"score": 7}, chunk_chars=2, reasoning="Think it over."))
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 2000, "messages": user("hi"), "tools": [TOOL]}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    else:
        body["tool_choice"] = {"type": "tool", "name": "Score"}
    with client.messages.stream(**body) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    answered = server.responses[0]
    assert answered is not None
    assert message.model_dump(exclude_none=True, include={"id", "model", "content", "stop_reason", "usage"}) == {
        key: answered[key] for key in ("id", "model", "content", "stop_reason", "usage")
    }
    assert server.requests[0]["stream"] is True
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert kinds.count("input_json") >= 4  # the SDK's event per input_json_delta: `{"score": 7}` in pieces


def test_an_error_mid_stream_is_an_error_event_the_sdk_raises(
    server: FakeAnthropicServer, client: anthropic.Anthropic
) -> None:
    """`FakeReply.error(529, mid_stream=True)` starts a 200 stream, then sends Anthropic's `error` event."""
    server.add(FakeReply.error(529, mid_stream=True, message="Overloaded"))
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 2000, "messages": user("hi")}
    stream = client.messages.stream(**body)
    with stream as events, pytest.raises(anthropic.APIStatusError) as raised:
        for _ in events:
            pass
    assert raised.value.status_code == 200
    sent = raised.value.body
    assert isinstance(sent, dict)
    assert (sent["type"], sent["error"]) == ("error", {"type": "overloaded_error", "message": "Overloaded"})


def test_a_malformed_stream_is_an_event_that_is_not_json(server: FakeAnthropicServer) -> None:
    """`FakeReply.malformed()` to a streamed request is a 200 stream whose first event's data is cut short."""
    server.add(FakeReply.malformed())
    response = post(server, {"model": "m", "max_tokens": 2000, "messages": user("hi"), "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    event, data = response.text.split("\n")[:2]
    assert event == "event: message_start"
    with pytest.raises(json.JSONDecodeError):
        json.loads(data.removeprefix("data: "))
