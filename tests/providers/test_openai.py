"""OpenAICaller through the wire: the official openai client against FakeOpenAIServer on loopback."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any, Generic, Literal, TypeVar

import openai
import pytest
from pydantic import BaseModel

from agentkit import (
    LoopConfig,
    Outcome,
    RetryPolicy,
    RoleSpec,
    StopReason,
    StructuredRequest,
    Tier,
    UsageError,
    run_tool_loop,
    tool,
)
from agentkit.errors import ProviderError, StructuredOutputError, Truncated
from agentkit.providers.openai import OpenAICaller, StructuredMode, _plan
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from tests.support import Query, Searcher, corpus_search, http_server

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))
NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
T = TypeVar("T")


class Verdict(BaseModel):
    score: int


class Box(BaseModel, Generic[T]):
    item: T


@tool(tier=Tier.READ_ONLY)
def lookup(args: Verdict) -> list[str]:
    """Look a score up."""
    return [f"score:{args.score}"]


def request(**fields: Any) -> StructuredRequest:
    return StructuredRequest(**{"system": "Rate it.", "dynamic": "the text", "model": "m", **fields})


@pytest.fixture
async def caller(server: FakeOpenAIServer) -> AsyncIterator[OpenAICaller]:
    async with OpenAICaller(base_url=server.base_url) as built:
        yield built


def last_message(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


# --- the loop end to end ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(StructuredMode))
async def test_loop_runs_end_to_end_in_every_mode(server: FakeOpenAIServer, mode: StructuredMode) -> None:
    """A tool call then done, through the wire in each structured mode, gathers the tool's batch."""
    server.add(call_step(Query(query="otters")), done_step("enough"))
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        result = await run_tool_loop(caller, Searcher(), corpus_search, "find otters", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert result.items == ["doc:otters"]
    assert len(server.requests) == 2
    server.assert_complete()


@pytest.mark.parametrize(
    ("mode", "wire"),
    [
        (StructuredMode.JSON_SCHEMA, lambda body: body["response_format"]["type"] == "json_schema"),
        (
            StructuredMode.TOOLS,
            lambda body: body["tool_choice"]["function"]["name"] == body["tools"][0]["function"]["name"],
        ),
        (StructuredMode.JSON, lambda body: body["response_format"] == {"type": "json_object"}),
        (StructuredMode.MD_JSON, lambda body: "response_format" not in body and "```json" in last_message(body)),
    ],
)
async def test_each_mode_puts_the_schema_on_the_wire_its_own_way(
    server: FakeOpenAIServer, mode: StructuredMode, wire: Any
) -> None:
    """Each mode sends its own request shape; JSON and MD_JSON carry the schema in the system prompt."""
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        completion = await caller.complete(request(), Verdict)
    body = server.requests[0]
    assert wire(body)
    assert isinstance(completion.value, Verdict)
    if mode in (StructuredMode.JSON, StructuredMode.MD_JSON):
        assert '"score"' in body["messages"][0]["content"]


async def test_multi_tool_step_names_the_tool_it_calls(server: FakeOpenAIServer) -> None:
    """With a set of tools, the wire step is {"tool", "args"} and the named tool runs."""
    server.add(call_step(Verdict(score=3), tool="lookup"), done_step())
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        result = await run_tool_loop(caller, Searcher(), [corpus_search, lookup], "score 3", FAST)
    assert result.items == ["score:3"]


async def test_request_fields_and_a_byte_stable_system_message_reach_the_wire(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """Model, temperature, max_tokens and seed are sent; the system message is first and identical each round."""
    server.add(call_step(Query(query="a")), call_step(Query(query="b")), done_step())
    await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    first, second, _ = server.requests
    for body in (first, second):
        assert (body["model"], body["temperature"], body["max_tokens"], body["seed"]) == ("primary-model", 0.2, 300, 7)
        assert body["messages"][0] == {"role": "system", "content": "You search a corpus."}
        assert body["messages"][1]["role"] == "user"
    assert first["messages"][1]["content"] != second["messages"][1]["content"]


async def test_max_completion_tokens_field_can_be_chosen(server: FakeOpenAIServer) -> None:
    """``max_tokens_field="max_completion_tokens"`` sends the limit under that name (OpenAI reasoning models)."""
    async with OpenAICaller(base_url=server.base_url, max_tokens_field="max_completion_tokens") as caller:
        await caller.complete(request(max_tokens=50), Verdict)
    assert server.requests[0]["max_completion_tokens"] == 50
    assert "max_tokens" not in server.requests[0]


class Uncapped(Searcher):
    def role(self) -> RoleSpec:
        return RoleSpec(model="primary-model")


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_a_step_has_no_default_token_cap(
    server: FakeOpenAIServer, field: Literal["max_tokens", "max_completion_tokens"]
) -> None:
    """A role that sets no max_tokens sends no token limit with any step: agentkit has no default cap (docs)."""
    server.add(call_step(Query(query="a")), done_step())
    async with OpenAICaller(base_url=server.base_url, max_tokens_field=field) as caller:
        result = await run_tool_loop(caller, Uncapped(), corpus_search, "ctx", FAST)
    assert result.items == ["doc:a"]
    assert len(server.requests) == 2
    for body in server.requests:
        assert "max_tokens" not in body
        assert "max_completion_tokens" not in body


@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS])
async def test_schema_names_on_the_wire_are_valid_for_openai(server: FakeOpenAIServer, mode: StructuredMode) -> None:
    """A generic schema (``Box[int]``) goes on the wire under a name OpenAI accepts."""
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        completion = await caller.complete(request(), Box[int])
    body = server.requests[0]
    name = (
        body["response_format"]["json_schema"]["name"]
        if mode is StructuredMode.JSON_SCHEMA
        else body["tools"][0]["function"]["name"]
    )
    assert NAME_OK.fullmatch(name)
    assert completion.value == Box[int](item=0)


class Node(BaseModel):
    """A tree: a model that refers to itself."""

    name: str
    children: list[Node]


TREE = Node(name="root", children=[Node(name="a", children=[Node(name="b", children=[])])])


def names_in(node: Node) -> list[str]:
    return [node.name, *(name for child in node.children for name in names_in(child))]


@tool(tier=Tier.READ_ONLY)
def plant(args: Node) -> list[str]:
    """Plant a tree: one item per node."""
    return names_in(args)


def sent_schema(body: dict[str, Any], mode: StructuredMode) -> dict[str, Any]:
    if mode is StructuredMode.JSON_SCHEMA:
        schema: dict[str, Any] = body["response_format"]["json_schema"]["schema"]
    else:
        schema = body["tools"][0]["function"]["parameters"]
    return schema


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("tools", ["one", "set"])
@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS])
async def test_recursive_tool_args_go_through_the_wire(
    server: FakeOpenAIServer, mode: StructuredMode, tools: str, strict: bool
) -> None:
    """A tree model as a tool's args works in both modes: the step schema's root is an object, its $defs kept."""
    server.add(call_step(TREE, tool=None if tools == "one" else "plant"), done_step())
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=strict) as caller:
        result = await run_tool_loop(caller, Searcher(), plant if tools == "one" else [plant], "a tree", FAST)
    assert (result.stop_reason, result.error) == (StopReason.EXECUTOR_DONE, None)
    assert result.items == ["root", "a", "b"]
    schema = sent_schema(server.requests[0], mode)
    assert (schema.get("type"), "$ref" in schema) == ("object", False)
    assert "Node" in schema["$defs"]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS])
async def test_a_recursive_answer_type_goes_through_the_wire(
    server: FakeOpenAIServer, mode: StructuredMode, strict: bool
) -> None:
    """A tree model as ``answer=`` works in both modes: the answer comes back whole, the schema's root an object."""
    server.add(call_step(Query(query="trees")), done_step(answer=TREE))
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=strict) as caller:
        result = await run_tool_loop(caller, Searcher(), corpus_search, "a tree", FAST, answer=Node)
    assert (result.stop_reason, result.error) == (StopReason.EXECUTOR_DONE, None)
    assert result.answer == TREE
    schema = sent_schema(server.requests[1], mode)
    assert (schema.get("type"), "$ref" in schema) == ("object", False)
    assert "Node" in schema["$defs"]


def test_the_per_schema_request_plan_is_built_once() -> None:
    """The instructor request handler runs once per (schema, mode); later calls reuse the plan."""
    first = _plan(Verdict, StructuredMode.TOOLS)
    assert _plan(Verdict, StructuredMode.TOOLS) is first
    assert _plan(Verdict, StructuredMode.JSON) is not first


# --- provider errors (the ones every caller shares are in test_contract.py) ----------------------------


async def test_empty_choices_is_an_error_with_a_clear_message(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """A reply without choices is a ProviderError that says so, with the usage the server reported."""
    server.add(FakeReply.no_choices(prompt_tokens=9, completion_tokens=0))
    with pytest.raises(ProviderError, match="no choices") as raised:
        await caller.complete(request(), Verdict)
    assert raised.value.usage is not None
    assert raised.value.usage.input_tokens == 9


# --- replies that are not a valid step ---------------------------------------------------------------


async def test_truncated_tool_call_is_an_error(server: FakeOpenAIServer) -> None:
    """A forced tool call cut off by the token limit is an error too."""
    server.add(FakeReply.truncated())
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        with pytest.raises(StructuredOutputError, match="cut off"):
            await caller.complete(request(), Verdict)


async def test_reask_echoes_the_rejected_reply_as_the_assistant_message(
    server: FakeOpenAIServer, caller: OpenAICaller
) -> None:
    """The re-ask carries the rejected reply as the assistant's message, then the validation error."""
    server.add({"done": False}, call_step(Query(query="x")), done_step())
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.items == ["doc:x"]
    reask = server.requests[1]
    assert "a step with done=false must carry a call" in last_message(reask)
    assert reask["messages"][-2] == {"role": "assistant", "content": '{"done": false}'}
    assert result.usage.requests == 3


async def test_reask_in_tools_mode_answers_the_tool_call(server: FakeOpenAIServer) -> None:
    """In TOOLS mode the re-ask is a tool message answering the model's call (a protocol a server accepts)."""
    server.add(FakeReply.tool_call({"score": "high"}), {"score": 2})
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=2)
    follow_up = server.requests[1]["messages"]
    assert follow_up[-1]["role"] == "tool"
    assert follow_up[-1]["tool_call_id"] == follow_up[-2]["tool_calls"][0]["id"]
    assert "score" in follow_up[-1]["content"]


async def test_empty_content_is_an_error_with_a_clear_message(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """An empty reply is re-asked, then fails with a message saying it was empty."""
    server.add("", "  ")
    with pytest.raises(StructuredOutputError, match="the reply was empty"):
        await caller.complete(request(), Verdict)


async def test_tools_reply_without_a_call_is_reasked(server: FakeOpenAIServer) -> None:
    """A server that ignores tool_choice and answers in text is told to call the function."""
    server.add("I would rather chat.", {"score": 4})
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        completion = await caller.complete(request(), Verdict)
    assert completion.value.score == 4
    assert "Recall the function correctly" in last_message(server.requests[1])


async def test_tools_mode_asks_for_exactly_one_call(server: FakeOpenAIServer) -> None:
    """TOOLS mode forces the one function and sends ``parallel_tool_calls: false`` through the openai client."""
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        await caller.complete(request(), Verdict)
    body = server.requests[0]
    assert body["parallel_tool_calls"] is False
    assert body["tool_choice"]["function"]["name"] == body["tools"][0]["function"]["name"]


@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.JSON, StructuredMode.MD_JSON])
async def test_modes_without_tools_send_no_parallel_tool_calls(server: FakeOpenAIServer, mode: StructuredMode) -> None:
    """``parallel_tool_calls`` goes only with tools (a real server refuses it alone)."""
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        await caller.complete(request(), Verdict)
    assert "parallel_tool_calls" not in server.requests[0]


async def test_reply_with_several_tool_calls_is_reasked_not_truncated_to_the_first(server: FakeOpenAIServer) -> None:
    """Two calls in one reply are a schema failure: each is answered with the error and the model asked again."""
    server.add(FakeReply.tool_calls({"score": 1}, {"score": 2}), {"score": 3})
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=3)
    follow_up = server.requests[1]["messages"]
    calls = follow_up[-3]["tool_calls"]
    assert [message["tool_call_id"] for message in follow_up[-2:]] == [call["id"] for call in calls]
    assert "made 2 calls to the function; make exactly one call" in follow_up[-1]["content"]


async def test_several_tool_calls_every_time_fail_with_all_of_them_as_raw(server: FakeOpenAIServer) -> None:
    """Still several calls after the re-asks: a StructuredOutputError whose raw reply shows every call."""
    server.add(FakeReply.tool_calls({"score": 1}, {"score": 2}), FakeReply.tool_calls({"score": 4}, {"score": 5}))
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
        with pytest.raises(StructuredOutputError, match="made 2 calls") as raised:
            await caller.complete(request(), Verdict)
    assert raised.value.raw == '{"score": 4}\n{"score": 5}'


# --- wiring ------------------------------------------------------------------------------------------


async def test_client_retries_are_off_even_for_a_client_passed_in(server: FakeOpenAIServer) -> None:
    """A passed client with retries on is used as a copy with max_retries=0: one request per 500."""
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=5)
    async with client:
        caller = OpenAICaller(client)
        assert caller.client.max_retries == 0
        server.add(FakeReply.error(500))
        with pytest.raises(ProviderError):
            await caller.complete(request(), Verdict)
        await caller.aclose()
        assert not client.is_closed()
    assert len(server.requests) == 1


async def test_built_client_has_retries_off_and_is_closed_by_aclose(server: FakeOpenAIServer) -> None:
    """The client OpenAICaller builds has max_retries=0 and is closed by ``aclose``."""
    caller = OpenAICaller(base_url=server.base_url, timeout=5)
    assert caller.client.max_retries == 0
    await caller.aclose()
    assert caller.client.is_closed()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"client": "CLIENT", "base_url": "http://localhost:1/v1"},
        {"mode": "json_schema"},
        {"max_reasks": -1},
        {"max_tokens_field": "limit"},
        {"strict": "yes"},
    ],
)
def test_wiring_mistakes_are_usage_errors(kwargs: dict[str, Any]) -> None:
    """Conflicting or invalid options raise UsageError at construction."""
    if kwargs.get("client") == "CLIENT":
        kwargs["client"] = openai.AsyncOpenAI(base_url="http://localhost:1/v1", api_key="k")
    with pytest.raises(UsageError):
        OpenAICaller(**{"base_url": "http://localhost:1/v1", **kwargs})


def test_openai_without_a_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenAI itself (no base_url) without a key is refused, naming the fix."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UsageError, match=r"api_key=.*OPENAI_API_KEY"):
        OpenAICaller()


@pytest.mark.parametrize(
    "base_url",
    [
        "https://llm.example.com/v1",
        "http://10.0.0.5:8000/v1",
        "http://[2001:db8::1]:8000/v1",
        "http://localhost.evil.com/v1",
    ],
)
def test_remote_server_without_a_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    """A server not on this machine gets no placeholder key: a clear UsageError now, not a 401 later."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match=r"no API key .* pass api_key=\.\.\. or set OPENAI_API_KEY"):
        OpenAICaller(base_url=base_url)


def test_remote_server_from_the_environment_without_a_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OPENAI_BASE_URL`` naming a remote server is held to the same rule as ``base_url``."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.example.com/v1")
    with pytest.raises(UsageError, match=r"llm\.example\.com"):
        OpenAICaller()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.4.5.6", "[::1]", "LOCALHOST"])
def test_server_on_this_machine_needs_no_key(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """A loopback server (localhost, 127.0.0.0/8, ::1) takes any key, so a placeholder is sent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    caller = OpenAICaller(base_url=f"http://{host}:8000/v1")
    assert caller.client.api_key == "not-needed"


async def test_loopback_server_without_a_key_answers(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the wire: no key anywhere, a server on 127.0.0.1, and the call goes through."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with OpenAICaller(base_url=server.base_url) as caller:
        completion = await caller.complete(request(), Verdict)
    assert isinstance(completion.value, Verdict)
    assert len(server.requests) == 1


# --- text replies ------------------------------------------------------------------------------------


async def test_complete_text_sends_no_json_mode(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """complete_text sends no response_format or tools: the system and user messages only."""
    server.add(FakeReply.text("Otters hold hands."))
    await caller.complete_text(request())
    body = server.requests[0]
    assert "response_format" not in body
    assert "tools" not in body
    assert body["messages"] == [{"role": "system", "content": "Rate it."}, {"role": "user", "content": "the text"}]


def test_import_agentkit_does_not_import_openai_instructor_or_anthropic() -> None:
    """``import agentkit`` (and its testing helpers, both fake servers) pulls in no provider SDK."""
    code = (
        "import sys, agentkit, agentkit.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'instructor', 'anthropic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


# --- a stream's end ------------------------------------------------------------------------------------


def chunk_line(choices: list[dict[str, Any]], **extra: Any) -> bytes:
    """One `data:` line of a chat-completion chunk, with the blank line that ends its event."""
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices, **extra}
    return f"data: {json.dumps(body)}\n\n".encode()


def text_chunk(text: str = "", finish: str | None = None) -> bytes:
    return chunk_line([{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}])


USAGE = chunk_line([], usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
DONE = b"data: [DONE]\n\n"
WHOLE = [text_chunk('{"score": '), text_chunk("4}"), text_chunk(finish="stop"), USAGE, DONE]


def streams(*bodies: list[bytes], cut: int | None = None) -> type[http.server.BaseHTTPRequestHandler]:
    """A server that answers the n-th request with the n-th body as a stream, then closes the connection (cleanly;
    with `cut`, it promises `cut` bytes and closes before them, so the connection breaks mid-stream)."""
    queue = list(bodies)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            if cut is not None:
                self.send_header("content-length", str(cut))
            self.end_headers()
            for line in queue.pop(0) if queue else WHOLE:
                self.wfile.write(line)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ([text_chunk('{"score": ')], "its finish_reason"),
        ([text_chunk('{"score": 4}')], "its finish_reason"),
        ([text_chunk('{"score": 4}'), DONE], "its finish_reason"),
        ([text_chunk('{"score": 4}'), text_chunk(finish="stop")], r"data: \[DONE\]"),
        ([text_chunk('{"score": 4}'), text_chunk(finish="stop"), DONE.rstrip()], r"data: \[DONE\]"),
        ([], "its first chunk"),
    ],
    ids=[
        "mid-reply",
        "before finish_reason",
        "DONE without finish_reason",
        "before usage",
        "DONE unterminated",
        "empty",
    ],
)
async def test_a_stream_that_ends_early_is_a_transient_provider_error(body: list[bytes], missing: str) -> None:
    """A stream cut before its end (its finish_reason, then its usage or `[DONE]`) is an incomplete reply: a
    transient ProviderError, never taken as the model's reply (nor its JSON re-asked as the model's mistake)."""
    with http_server(streams(body)) as url:
        async with OpenAICaller(base_url=url, stream=True) as streaming:
            with pytest.raises(ProviderError, match=f"ended before {missing}") as raised:
                await streaming.complete(request(), Verdict)
    assert raised.value.transient
    assert raised.value.usage is not None
    assert raised.value.usage.requests == 1


@pytest.mark.parametrize(
    "body",
    [
        WHOLE,
        WHOLE[:-1],
        [*WHOLE[:3], DONE],
        [text_chunk('{"score": 4}', finish="stop"), USAGE],
    ],
    ids=["all of it", "usage without DONE", "DONE without usage", "finish and text in one chunk"],
)
async def test_a_stream_that_reached_its_end_is_the_reply(body: list[bytes]) -> None:
    """A stream ends at its finish_reason followed by `[DONE]` or the usage chunk, as each server sends them."""
    with http_server(streams(body)) as url:
        async with OpenAICaller(base_url=url, stream=True) as streaming:
            completion = await streaming.complete(request(), Verdict)
    assert completion.value == Verdict(score=4)
    assert completion.finish_reasons == ("stop",)


async def test_a_cut_text_stream_is_asked_again_not_applied() -> None:
    """A prose reply whose stream is cut is retried, and the whole reply is the run's text, not the cut one."""
    whole = [text_chunk("Three sentences. "), text_chunk("The second. The third."), text_chunk(finish="stop"), DONE]
    with http_server(streams(whole[:1], whole)) as url:
        async with OpenAICaller(base_url=url, stream=True) as streaming:
            with pytest.raises(ProviderError, match="ended before"):
                await streaming.complete_text(request())
            completion = await streaming.complete_text(request())
    assert completion.text == "Three sentences. The second. The third."


async def test_a_last_line_without_a_newline_is_read_but_ends_nothing() -> None:
    """A last `data:` line with no newline is read (its finish_reason "length" makes the reply Truncated), but a
    stream that stops there has not ended (a line whose event is not finished completes no reply)."""
    length = text_chunk(finish="length").rstrip()
    stop = text_chunk(finish="stop").rstrip()
    with http_server(streams([text_chunk('{"score": '), length], [text_chunk('{"score": 4}'), stop])) as url:
        async with OpenAICaller(base_url=url, stream=True) as streaming:
            with pytest.raises(Truncated):
                await streaming.complete(request(), Verdict)
            with pytest.raises(ProviderError, match=r"ended before data: \[DONE\]"):
                await streaming.complete(request(), Verdict)


async def test_a_connection_broken_mid_stream_says_the_stream_broke() -> None:
    """A connection that breaks while the 200 streams is a transient error that says the stream broke (the server
    was reached), not that the server could not be reached."""
    with http_server(streams([text_chunk('{"score": ')], cut=10_000)) as url:
        async with OpenAICaller(base_url=url, stream=True) as streaming:
            with pytest.raises(
                ProviderError, match="the stream of model 'm' broke after the model server answered 200"
            ):
                await streaming.complete(request(), Verdict)
