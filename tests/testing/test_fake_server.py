"""FakeOpenAIServer on its own: the wire format, streaming, faults, and the requests it rejects."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel, Field

from agentkit import LoopConfig, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop, tool
from agentkit._step import build_step_model
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step
from agentkit.testing._fake_wire import instance_of
from tests.media_support import PDF, PNG


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    tags: list[str] = Field(min_length=2)
    when: str = Field(json_schema_extra={"format": "date-time"})


class Outer(BaseModel):
    name: str = Field(min_length=12, max_length=20)
    count: int = Field(gt=3, le=9)
    ratio: float = Field(ge=0.5)
    color: Color
    kind: Literal["a", "b"]
    inner: Inner
    maybe: Inner | None
    flag: bool


class Score(BaseModel):
    score: int


@pytest.fixture
def client(server: FakeOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as built:
        yield built


def post(
    server: FakeOpenAIServer, body: object, path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, body=raw, headers={"content-type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def chat(client: openai.OpenAI, **body: Any) -> Any:
    """``chat.completions.create`` with plain dicts (the wire is what is under test, not the client's types)."""
    create: Callable[..., Any] = client.chat.completions.create
    return create(**{"model": "m", "messages": messages(), **body})


def messages(text: str = "hi") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def schema_format(model: type[BaseModel], name: str | None = None) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name or model.__name__, "schema": model.model_json_schema()}}


def forced_tool(model: type[BaseModel], name: str = "answer") -> dict[str, Any]:
    return {
        "tools": [{"type": "function", "function": {"name": name, "parameters": model.model_json_schema()}}],
        "tool_choice": {"type": "function", "function": {"name": name}},
    }


# --- unscripted replies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [Outer, Score, build_step_model(Score), build_step_model((("a", Score), ("b", Inner)))]
)
def test_minimal_instance_validates_against_its_model(model: type[BaseModel]) -> None:
    """The default instance satisfies the schema's constraints, refs, enums, unions and lengths."""
    model.model_validate(instance_of(model.model_json_schema()))


def test_unscripted_reply_is_valid_for_the_response_format_schema(client: openai.OpenAI) -> None:
    """With nothing scripted, a json_schema request gets content that validates against the schema."""
    reply = chat(client, response_format=schema_format(Outer))
    choice = reply.choices[0]
    Outer.model_validate_json(choice.message.content or "")
    assert (choice.finish_reason, reply.model, reply.object) == ("stop", "m", "chat.completion")


def test_unscripted_reply_calls_the_forced_tool_with_valid_arguments(client: openai.OpenAI) -> None:
    """With a forced tool, the default reply is a call of that tool with schema-valid arguments."""
    reply = chat(client, **forced_tool(Outer))
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "answer"
    Outer.model_validate_json(call.function.arguments)


def test_unscripted_reply_finds_a_schema_written_into_the_prompt(client: openai.OpenAI) -> None:
    """In JSON mode the schema is read from the system prompt; a ```json request gets a fenced answer."""
    prompt = [{"role": "system", "content": f"Answer as: {json.dumps(Score.model_json_schema())}"}]
    plain = chat(client, messages=[*prompt, {"role": "user", "content": "go"}], response_format={"type": "json_object"})
    Score.model_validate_json(plain.choices[0].message.content or "")
    fenced = chat(client, messages=[*prompt, {"role": "user", "content": "in ```json"}])
    content = fenced.choices[0].message.content or ""
    assert content.startswith("```json\n")
    Score.model_validate_json(content.removeprefix("```json\n").removesuffix("\n```"))


def test_unscripted_reply_without_a_schema_is_text(client: openai.OpenAI) -> None:
    """A request that carries no schema gets a plain sentence."""
    reply = chat(client)
    assert "fake OpenAI server" in (reply.choices[0].message.content or "")


def test_every_reply_carries_a_usage_block(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """The usage block is present and adds up; scripted token counts are reported as given."""
    server.add(FakeReply.text("x", prompt_tokens=21, completion_tokens=5))
    first = chat(client)
    second = chat(client, messages=messages("a longer question " * 20))
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.total_tokens) == (21, 5, 26)
    assert second.usage is not None
    assert second.usage.total_tokens == second.usage.prompt_tokens + second.usage.completion_tokens
    assert second.usage.prompt_tokens > 21


# --- the script --------------------------------------------------------------------------------------


def test_script_is_used_in_order_then_the_default_takes_over(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """Scripted answers come one per request; a value follows the request's shape; then defaults."""
    server.add("first", {"score": 2})
    texts = [chat(client).choices[0].message.content]
    call = chat(client, **forced_tool(Score))
    third = chat(client, response_format=schema_format(Score))
    assert texts == ["first"]
    assert json.loads(call.choices[0].message.tool_calls[0].function.arguments) == {"score": 2}
    assert json.loads(third.choices[0].message.content or "") == {"score": 0}
    server.assert_complete()


def test_unused_script_fails_assert_complete() -> None:
    """``assert_complete`` fails while scripted answers are left."""
    with FakeOpenAIServer(["never sent"]) as server:
        assert server.remaining == 1
        with pytest.raises(AssertionError, match="never used"):
            server.assert_complete()


def test_every_request_body_is_recorded_rejected_ones_included(server: FakeOpenAIServer) -> None:
    """Bodies are recorded in order, including one the server refused."""
    post(server, {"model": "m", "messages": messages("one")})
    post(server, {"model": "m", "messages": []})
    assert [body["messages"] for body in server.requests] == [messages("one"), []]
    assert server.responses[1] is not None
    assert server.responses[1]["error"]["param"] == "messages"


# --- streaming ---------------------------------------------------------------------------------------


def test_streamed_content_arrives_in_chunks_with_a_usage_chunk(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """stream=True sends SSE chunks that join to the reply, then the usage chunk, then [DONE]."""
    server.add(FakeReply.text("Otters hold hands while they sleep.", prompt_tokens=8, completion_tokens=9))
    stream = chat(client, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Otters hold hands while they sleep."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (8, 9)


def test_an_error_mid_stream_is_an_error_chunk_after_the_first(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """``FakeReply.error(500, mid_stream=True)`` starts a 200 stream, then sends an ``{"error": ...}`` chunk; a
    request without ``stream`` gets the HTTP error."""
    server.add(
        FakeReply.error(500, mid_stream=True, message="the model crashed"), FakeReply.error(500, mid_stream=True)
    )
    stream = chat(client, stream=True)
    with pytest.raises(openai.APIError, match="the model crashed"):
        list(stream)
    with pytest.raises(openai.InternalServerError):
        chat(client)


def test_streamed_tool_call_arguments_join_to_the_call(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """A streamed tool call sends its name first and its arguments in pieces."""
    server.add({"score": 12345})
    stream = chat(client, stream=True, **forced_tool(Score))
    calls = [c.choices[0].delta.tool_calls[0] for c in stream if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0].function.name == "answer"
    assert json.loads("".join(call.function.arguments or "" for call in calls)) == {"score": 12345}


def test_several_tool_calls_in_one_reply(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """``FakeReply.tool_calls`` answers one message with several calls, each with its own id, streamed or not."""
    server.add(FakeReply.tool_calls({"score": 1}, Score(score=2)), FakeReply.tool_calls({"score": 3}, "{}"))
    reply = chat(client, **forced_tool(Score))
    calls = reply.choices[0].message.tool_calls or []
    assert [(call.id, call.function.name, call.function.arguments) for call in calls] == [
        ("call_fake_0", "answer", '{"score": 1}'),
        ("call_fake_1", "answer", '{"score":2}'),
    ]
    stream = chat(client, stream=True, **forced_tool(Score))
    joined: dict[int, str] = {}
    for chunk in stream:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            joined[call.index] = joined.get(call.index, "") + (call.function.arguments or "" if call.function else "")
    assert joined == {0: '{"score": 3}', 1: "{}"}


async def test_async_streaming_and_async_context_manager() -> None:
    """The server works from async tests too (``async with``), streaming included."""
    server = FakeOpenAIServer(["streamed"])
    async with server, openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
        create: Callable[..., Any] = client.chat.completions.create
        stream = await create(model="m", messages=messages(), stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "streamed"


# --- faults ------------------------------------------------------------------------------------------


def test_error_fault_sends_the_status_retry_after_and_an_openai_error_body(server: FakeOpenAIServer) -> None:
    """An error fault answers its status, the Retry-After header and an OpenAI-shaped error."""
    server.add(FakeReply.error(429, retry_after=3, message="slow down"))
    status, headers, body = post(server, {"model": "m", "messages": messages()})
    assert (status, headers["retry-after"]) == (429, "3")
    assert json.loads(body)["error"]["message"] == "slow down"


def test_malformed_fault_body_is_not_json(server: FakeOpenAIServer) -> None:
    """The malformed fault claims JSON and is not."""
    server.add(FakeReply.malformed())
    status, headers, body = post(server, {"model": "m", "messages": messages()})
    assert (status, headers["content-type"]) == (200, "application/json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)


def test_truncated_fault_ends_with_length(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """A truncated reply is half of the default answer with finish_reason "length"."""
    server.add(FakeReply.truncated())
    reply = chat(client, response_format=schema_format(Outer))
    assert reply.choices[0].finish_reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.choices[0].message.content or "")


def test_no_choices_fault(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    """The no-choices fault answers 200 with an empty choices list and a usage block."""
    server.add(FakeReply.no_choices())
    reply = chat(client)
    assert reply.choices == []
    assert reply.usage is not None


def test_delay_fault_outlasts_a_client_timeout(server: FakeOpenAIServer) -> None:
    """A delayed answer makes a client with a shorter timeout give up; stop() does not wait it out."""
    server.add(FakeReply.auto(delay=30))
    with (
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.2) as client,
        pytest.raises(openai.APITimeoutError),
    ):
        chat(client)


def test_drip_fault_sends_the_headers_then_the_body_a_byte_at_a_time(server: FakeOpenAIServer) -> None:
    """drip= sends the headers at once, then the body in many small pieces, whole and unchanged."""
    server.add(FakeReply.error(503, message="busy", drip=0.02))
    host, port = server.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    body = json.dumps({"model": "m", "messages": messages()}).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        head, _, payload = received.partition(b"\r\n\r\n")
        header = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        length = int(header.split(b":")[1])
        reads = 0
        while len(payload) < length:
            payload += sock.recv(65536)
            reads += 1
    assert head.startswith(b"HTTP/1.1 503")
    assert json.loads(payload)["error"]["message"] == "busy"
    assert reads > 10  # ~100 bytes, one every 20 ms: far more pieces than a plain reply's one or two


def test_max_concurrent_counts_requests_handled_at_once(server: FakeOpenAIServer) -> None:
    """max_concurrent is 0 before any request and 1 after requests made one at a time."""
    assert server.max_concurrent == 0
    post(server, {"model": "m", "messages": messages()})
    post(server, {"model": "m", "messages": messages()})
    assert server.max_concurrent == 1


def test_stop_leaves_no_thread_behind() -> None:
    """Stopping ends keep-alive connections and joins every handler thread."""
    before = set(threading.enumerate())
    server = FakeOpenAIServer().start()
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
        chat(client)
        assert set(threading.enumerate()) - before  # the server thread and the connection's handler
        server.stop()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


def test_client_resetting_its_connection_is_not_a_server_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A client that resets its keep-alive connection (as openai's stream does at [DONE]) is no error, nor noise."""
    server = FakeOpenAIServer().start()
    host, port = server.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    body = json.dumps({"model": "m", "messages": messages()}).encode()
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n"
        raw.sendall(head.encode() + body)
        assert raw.recv(65536).startswith(b"HTTP/1.1 200")
        # Linger 0 makes close() send a reset, which the handler meets waiting for the next request.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    httpd = server._httpd
    assert httpd is not None
    wait_for(lambda: not httpd._connections)  # the handler has met the reset and ended
    server.stop()  # joins the handler thread, so its error, had it been one, is recorded by now
    assert server.errors == []
    server.assert_complete()
    assert "Exception occurred" not in capsys.readouterr().err


def test_server_failing_on_a_request_fails_assert_complete(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception in the server is recorded and fails assert_complete (and assert_no_errors), traceback on stderr."""

    def broken(request: dict[str, Any], reply: FakeReply) -> None:
        raise RuntimeError("composer broke")

    monkeypatch.setattr("agentkit.testing._fake_server._compose", broken)
    with pytest.raises(http.client.RemoteDisconnected):
        post(server, {"model": "m", "messages": messages()})
    assert [repr(error) for error in server.errors] == ["RuntimeError('composer broke')"]
    with pytest.raises(AssertionError, match=r"failed on 1 request\(s\), first with RuntimeError\('composer broke'\)"):
        server.assert_no_errors()
    with pytest.raises(AssertionError, match="composer broke"):
        server.assert_complete()
    assert "RuntimeError: composer broke" in capsys.readouterr().err


def wait_for(condition: Callable[[], bool], seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# --- requests a real server rejects ------------------------------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "answer", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": messages()}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]}]}, "messages"),
        (
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": [CALL]}, {"role": "user", "content": "?"}]},
            "messages[1]",
        ),
        ({"model": "m", "messages": messages(), "response_format": schema_format(Score, "Score[int]")}, None),
        ({"model": "m", "messages": messages(), "response_format": {"type": "yaml"}}, "response_format"),
        ({"model": "m", "messages": messages(), **forced_tool(Score, "a.b")}, None),
        ({"model": "m", "messages": messages(), **forced_tool(Score, "x" * 65)}, None),
        ({"model": "m", "messages": messages(), **forced_tool(Score, "answer\n")}, None),
        ({"model": "m", "messages": messages(), "response_format": schema_format(Score, "Score\n")}, None),
        ({"model": "m", "messages": messages(), "tool_choice": "auto"}, "tool_choice"),
        (
            {
                "model": "m",
                "messages": messages(),
                **forced_tool(Score),
                "tool_choice": {"type": "function", "function": {"name": "other"}},
            },
            "tool_choice",
        ),
        ({"model": "m", "messages": messages(), "temperature": 3}, "temperature"),
        ({"model": "m", "messages": messages(), "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": messages(), "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "m", "messages": messages(), "parallel_tool_calls": False}, "parallel_tool_calls"),
        (
            {"model": "m", "messages": messages(), **forced_tool(Score), "parallel_tool_calls": "no"},
            "parallel_tool_calls",
        ),
        (b"{not json", None),
    ],
)
def test_requests_a_real_server_rejects_get_400(server: FakeOpenAIServer, body: object, param: str | None) -> None:
    """Malformed messages, invalid names and bad options are answered 400 with an OpenAI error body."""
    status, _, raw = post(server, body)
    error = json.loads(raw)["error"]
    assert (status, error["type"]) == (400, "invalid_request_error")
    if param is not None:
        assert error["param"] == param


STRICT_OK: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "d", "pattern": "^a", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "pick": {"anyOf": [{"$ref": "#/$defs/Pick"}, {"type": "null"}]},
        "kind": {"type": "string", "enum": ["a", "b"]},
    },
    "required": ["name", "tags", "pick", "kind"],
    "additionalProperties": False,
    "$defs": {
        "Pick": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        }
    },
}


def strict_variant(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(json.dumps(STRICT_OK))
    change(schema)
    return schema


BREAKS_STRICT_MODE: dict[str, Callable[[dict[str, Any]], None]] = {
    "an open root": lambda s: s.pop("additionalProperties"),
    "an open object in $defs": lambda s: s["$defs"]["Pick"].pop("additionalProperties"),
    "a property not required": lambda s: s["required"].remove("kind"),
    "a required key not a property": lambda s: s["required"].append("ghost"),
    "oneOf": lambda s: s["properties"]["pick"].update(oneOf=s["properties"]["pick"].pop("anyOf")),
    "a discriminator": lambda s: s["properties"]["pick"].update(discriminator={"propertyName": "n"}),
    "a default": lambda s: s["properties"]["name"].update(default="x"),
    "maxLength": lambda s: s["properties"]["name"].update(maxLength=5),
    "allOf": lambda s: s["properties"].update(kind={"allOf": [{"type": "string"}]}),
    "a $ref with a sibling": lambda s: s["properties"]["pick"]["anyOf"][0].update(description="d"),
    "an unsupported format": lambda s: s["properties"]["name"].update(format="uri"),
    "an untyped value": lambda s: s["properties"].update(kind={"description": "anything"}),
    "a union at the root": lambda s: s.update(anyOf=[{"type": "object"}]),
}


@pytest.mark.parametrize("where", ["response_format", "tools"])
@pytest.mark.parametrize("breaks", list(BREAKS_STRICT_MODE))
def test_strict_schema_outside_openai_subset_gets_400(server: FakeOpenAIServer, where: str, breaks: str) -> None:
    """A schema marked strict that breaks a strict-mode rule is refused, as OpenAI refuses it."""
    schema = strict_variant(BREAKS_STRICT_MODE[breaks])
    status, _, raw = post(server, {"model": "m", "messages": messages(), **strict_request(where, schema)})
    error = json.loads(raw)["error"]
    assert (status, error["type"]) == (400, "invalid_request_error"), breaks
    assert error["param"] == ("response_format" if where == "response_format" else "tools[0].function.parameters")
    assert error["message"].startswith("Invalid schema for ")


@pytest.mark.parametrize("where", ["response_format", "tools"])
def test_strict_schema_inside_openai_subset_is_answered_with_an_instance(server: FakeOpenAIServer, where: str) -> None:
    """A strict schema within the rules is accepted, and the same schema unmarked is never checked."""
    status, _, raw = post(server, {"model": "m", "messages": messages(), **strict_request(where, STRICT_OK)})
    assert status == 200
    message = json.loads(raw)["choices"][0]["message"]
    value = json.loads(
        message["content"] if where == "response_format" else message["tool_calls"][0]["function"]["arguments"]
    )
    assert value == {"name": "a@example.com", "tags": [], "pick": {"n": 0}, "kind": "a"}
    loose = strict_request(where, strict_variant(BREAKS_STRICT_MODE["oneOf"]), strict=False)
    assert post(server, {"model": "m", "messages": messages(), **loose})[0] == 200


def strict_request(where: str, schema: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    if where == "response_format":
        spec = {"name": "answer", "schema": schema, "strict": strict}
        return {"response_format": {"type": "json_schema", "json_schema": spec}}
    function = {"name": "answer", "parameters": schema, "strict": strict}
    return {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": "answer"}},
    }


def test_a_well_formed_tool_protocol_is_accepted(server: FakeOpenAIServer) -> None:
    """An assistant call answered by a tool message, then a user turn, is a valid conversation."""
    conversation = [
        *messages(),
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
    ]
    status, _, _ = post(server, {"model": "m", "messages": conversation, "temperature": 0, "seed": 1})
    assert status == 200


def test_unknown_route_is_404(server: FakeOpenAIServer) -> None:
    """Only the chat-completions route exists."""
    status, _, _ = post(server, {"model": "m", "messages": messages()}, path="/v1/completions")
    assert status == 404


def test_request_bytes_records_each_body_as_received(server: FakeOpenAIServer) -> None:
    """request_bytes holds each request body's size in bytes, in order, malformed bodies included."""
    first = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
    post(server, first)
    post(server, "not json")
    assert server.request_bytes == [len(json.dumps(first).encode()), len(json.dumps("not json").encode())]
    assert len(server.requests) == 2


class Topic(BaseModel):
    query: str


@tool(tier=Tier.READ_ONLY)
def search(args: Topic) -> list[str]:
    """Search."""
    return [f"doc:{args.query}"]


class Searcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="Search.", dynamic=f"topic <{ctx}> round {info.round}")


def _user_text(request: dict[str, Any]) -> str:
    return " ".join(str(message.get("content")) for message in request["messages"] if message["role"] == "user")


async def test_respond_serves_concurrent_runs_each_from_its_own_script() -> None:
    """A function of the request gives each of several concurrent runs its own script."""

    topics = [f"t{n}" for n in range(6)]
    scripts = {
        topic: [call_step(Topic(query=f"{topic}-a"), tool=search), call_step(Topic(query=f"{topic}-b"), tool=search)]
        for topic in topics
    }
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> Any:
        topic = _user_text(request).split("<", 1)[1].split(">", 1)[0]
        with lock:
            script = scripts[topic]
            return script.pop(0) if script else None  # then the minimal instance: done

    with FakeOpenAIServer(respond=respond) as server:
        async with OpenAICaller(base_url=server.base_url) as caller:
            results = await asyncio.gather(
                *(run_tool_loop(caller, Searcher(), [search], topic, LoopConfig(max_rounds=5)) for topic in topics)
            )
        server.assert_complete()
    assert [result.items for result in results] == [[f"doc:{t}-a", f"doc:{t}-b"] for t in topics]
    assert all(not script for script in scripts.values())


def test_respond_returning_none_takes_the_script_then_the_default() -> None:
    """``None`` from the function falls back to the script in order, then to the minimal instance."""
    seen: list[str] = []

    def respond(request: dict[str, Any]) -> str | None:
        text = _user_text(request)
        seen.append(text)
        return "from the function" if "special" in text else None

    with FakeOpenAIServer(["scripted"], respond=respond) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as own:
            answers = [
                own.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
                .choices[0]
                .message.content
                for text in ("plain", "special", "plain again")
            ]
        server.assert_complete()
    assert answers == ["scripted", "from the function", "This is a reply from the fake OpenAI server."]
    assert seen == ["plain", "special", "plain again"]


def test_respond_raising_is_recorded_as_a_server_error(capsys: pytest.CaptureFixture[str]) -> None:
    """What the function raises fails ``assert_no_errors`` and the client sees the connection dropped."""

    def respond(request: dict[str, Any]) -> str:
        raise LookupError("no script for this run")

    with FakeOpenAIServer(respond=respond) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as own, pytest.raises(openai.APIError):
            own.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(AssertionError, match="LookupError"):
            server.assert_no_errors()


# --- replies leave at once --------------------------------------------------------------------------


def test_a_reply_leaves_the_server_in_one_write(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply's status line, headers and body go out in one write: no part of it waits behind another."""
    main = threading.main_thread()
    sent: list[bytes] = []

    def recorded(name: str) -> Callable[..., Any]:
        write = getattr(socket.socket, name)

        def recording(sock: socket.socket, data: Any, *flags: int) -> Any:
            if threading.current_thread() is not main:  # the server's handler threads; the client is this one
                sent.append(bytes(data))
            return write(sock, data, *flags)

        return recording

    for name in ("send", "sendall"):
        monkeypatch.setattr(socket.socket, name, recorded(name))
    status, _, body = post(server, {"model": "m", "messages": messages()})
    assert status == 200
    assert len(sent) == 1, [len(data) for data in sent]
    assert sent[0].startswith(b"HTTP/1.1 200")
    assert sent[0].endswith(b"\r\n\r\n" + body)


def test_every_accepted_connection_sends_small_writes_at_once(server: FakeOpenAIServer) -> None:
    """TCP_NODELAY is set on the server's side of each connection, so a write (a stream's next chunk, a
    dripped byte) never waits for the client's delayed ACK of the one before."""
    host, port = server.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    connections = []
    for _ in range(2):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("POST", "/v1/chat/completions", body=json.dumps({"model": "m", "messages": messages()}))
        connection.getresponse().read()
        connections.append(connection)  # kept open (keep-alive), so the server still holds its side
    try:
        assert server._httpd is not None
        accepted = list(server._httpd._connections)
        assert len(accepted) == 2
        assert all(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for sock in accepted)
    finally:
        for connection in connections:
            connection.close()


# --- content parts: images and documents ---------------------------------------------------------------

PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF_DATA = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
GOOD_PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "look"},
    {"type": "image_url", "image_url": {"url": PNG_URL}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
    {"type": "file", "file": {"filename": "a.pdf", "file_data": PDF_DATA}},
    {"type": "file", "file": {"file_id": "file-abc"}},
]
BAD_PARTS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "an image in a system message": ("system", [{"type": "image_url", "image_url": {"url": PNG_URL}}]),
    "an image_url that is a bare string": ("user", [{"type": "image_url", "image_url": PNG_URL}]),
    "a data URL of another type": ("user", [{"type": "image_url", "image_url": {"url": PDF_DATA}}]),
    "a data URL without base64": ("user", [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]),
    "bytes that are not base64": ("user", [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]),
    "bytes that are not the image type": (
        "user",
        [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(PNG).decode()}}],
    ),
    "an unknown detail": ("user", [{"type": "image_url", "image_url": {"url": PNG_URL, "detail": "max"}}]),
    "an unknown key in a part": ("user", [{"type": "image_url", "image_url": {"url": PNG_URL}, "cache": 1}]),
    "a file without a filename": ("user", [{"type": "file", "file": {"file_data": PDF_DATA}}]),
    "a file that is not a PDF": (
        "user",
        [{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,aGk="}}],
    ),
    "a file with both data and an id": (
        "user",
        [{"type": "file", "file": {"filename": "a.pdf", "file_data": PDF_DATA, "file_id": "f"}}],
    ),
    "a file in an assistant message": ("assistant", [{"type": "file", "file": {"file_id": "f"}}]),
}


def test_well_formed_image_and_file_parts_are_accepted(server: FakeOpenAIServer) -> None:
    """Text, image_url (data URL or http URL) and file (data or id) parts in a user message are answered 200."""
    status, _, _ = post(server, {"model": "m", "messages": [{"role": "user", "content": GOOD_PARTS}]})
    assert status == 200


@pytest.mark.parametrize("case", sorted(BAD_PARTS))
def test_content_parts_of_a_wrong_shape_get_400_naming_the_part(server: FakeOpenAIServer, case: str) -> None:
    """A content part a real server refuses (its role, its shape, its data) is answered 400 with the part's path."""
    role, content = BAD_PARTS[case]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": role, "content": content}]}
    status, _, raw = post(server, body)
    error = json.loads(raw)["error"]
    assert (status, error["type"]) == (400, "invalid_request_error"), case
    assert error["param"].startswith("messages[1]"), case
