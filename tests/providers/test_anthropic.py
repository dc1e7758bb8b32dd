"""AnthropicCaller through the wire: the official anthropic SDK against FakeAnthropicServer on loopback.

What every caller promises is in test_contract.py; here is what is Anthropic's own: the forced tool, the
prompt-cache breakpoint and its accounting, thinking, and the Messages API's rules."""

from __future__ import annotations

import base64
import http.server
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    RetryPolicy,
    ToolRoundInfo,
    UsageError,
    run_tool_loop,
)
from agentkit.errors import ProviderError, StructuredOutputError, Truncated
from agentkit.prompting import DocumentPart, ImagePart
from agentkit.providers import Reasoning, ReasoningEffort
from agentkit.providers.anthropic import DEFAULT_MAX_TOKENS, THINKING_BUDGETS, AnthropicCaller
from agentkit.testing import FakeAnthropicServer, FakeReply, call_step, done_step
from tests.media_support import JPEG, PDF, PNG
from tests.providers.support import Verdict, message_text, request
from tests.support import Query, Searcher, corpus_search, http_server

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


@pytest.fixture
def server(anthropic_server: FakeAnthropicServer) -> FakeAnthropicServer:
    """This module's server is Anthropic's (`anthropic_server`)."""
    return anthropic_server


@pytest.fixture
async def caller(server: FakeAnthropicServer) -> AsyncIterator[AnthropicCaller]:
    async with AnthropicCaller(base_url=server.base_url) as built:
        yield built


# --- the request -------------------------------------------------------------------------------------


async def test_the_step_goes_as_one_forced_tool_with_the_union_schema(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """The schema is the input_schema of one tool, forced by name, with parallel calls off."""
    completion = await caller.complete(request(), Verdict)
    body = server.requests[0]
    (tool,) = body["tools"]
    assert tool == {
        "name": "Verdict",
        "description": "A score for the text.",
        "input_schema": {
            "properties": {"score": {"title": "Score", "type": "integer"}},
            "required": ["score"],
            "type": "object",
        },
    }
    assert body["tool_choice"] == {"type": "tool", "name": "Verdict", "disable_parallel_tool_use": True}
    assert completion.finish_reasons == ("tool_use",)


async def test_role_fields_reach_the_wire_and_the_system_block_is_a_cache_breakpoint(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """Model, temperature and max_tokens are sent; the system block, identical each round, carries cache_control."""
    server.add(call_step(Query(query="a")), call_step(Query(query="b")), done_step())
    await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    first, second, _ = server.requests
    for body in (first, second):
        assert (body["model"], body["temperature"], body["max_tokens"]) == ("primary-model", 0.2, 300)
        assert body["system"] == [
            {"type": "text", "text": "You search a corpus.", "cache_control": {"type": "ephemeral"}}
        ]
        assert "seed" not in body  # the Messages API has none, and refuses unknown fields
    assert first["messages"] != second["messages"]


async def test_cache_system_false_sends_no_breakpoint(server: FakeAnthropicServer) -> None:
    """With cache_system=False the system block carries no cache_control, and nothing is cached."""
    async with AnthropicCaller(base_url=server.base_url, cache_system=False) as caller:
        await caller.complete(request(), Verdict)
        completion = await caller.complete(request(), Verdict)
    assert server.requests[0]["system"] == [{"type": "text", "text": "Rate it."}]
    assert completion.usage.input_tokens == server.responses[1]["usage"]["input_tokens"]  # type: ignore[index]  # answered
    assert server.responses[1]["usage"]["cache_read_input_tokens"] == 0  # type: ignore[index]  # answered


async def test_a_role_without_max_tokens_sends_the_default(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """The Messages API requires max_tokens: a role that sets none sends default_max_tokens."""
    await caller.complete(request(), Verdict)
    assert server.requests[0]["max_tokens"] == DEFAULT_MAX_TOKENS


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
async def test_a_role_with_reasoning_and_without_max_tokens_keeps_the_default_room_after_the_thinking(
    server: FakeAnthropicServer, caller: AnthropicCaller, effort: ReasoningEffort
) -> None:
    """The thinking budget counts within max_tokens: a role that sets an effort and no max_tokens sends the default
    plus the budget, so the answer keeps its room and no effort level needs a limit set beside it."""
    await caller.complete(request(reasoning=Reasoning(effort=effort)), Verdict)
    budget = THINKING_BUDGETS[effort]
    assert server.requests[0]["max_tokens"] == DEFAULT_MAX_TOKENS + budget
    assert server.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": budget}


async def test_complete_text_sends_no_tool(server: FakeAnthropicServer, caller: AnthropicCaller) -> None:
    """complete_text sends the cached system block and the user's turn, and no tool."""
    server.add(FakeReply.text("Otters hold hands."))
    assert (await caller.complete_text(request())).text == "Otters hold hands."
    body = server.requests[0]
    assert "tools" not in body
    assert "tool_choice" not in body
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "the text"}]}]


# --- images and documents ----------------------------------------------------------------------------


async def test_images_and_documents_go_as_base64_blocks_in_reading_order(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """A dynamic part's images and PDF are image and document blocks with base64 sources, between its text."""
    parts = (
        "Compare",
        ImagePart(data=PNG, media_type="image/png"),
        "with",
        ImagePart(data=JPEG, media_type="image/jpeg"),
        ImagePart(url="https://example.com/chart.png"),
        DocumentPart(data=PDF, filename="invoice.pdf"),
    )
    await caller.complete(request(dynamic="", parts=parts), Verdict)
    (turn,) = server.requests[0]["messages"]
    assert turn["content"] == [
        {"type": "text", "text": "Compare"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
        },
        {"type": "text", "text": "with"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/jpeg", "data": base64.b64encode(JPEG).decode()},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(PDF).decode()},
            "title": "invoice.pdf",
        },
    ]


async def test_a_tools_image_reaches_the_model_the_next_round_as_an_image_block(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """A loop whose prompt shows an image: it goes out as an image block the fake server accepts."""

    class Looking(Searcher):
        def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
            prompt = super().render(ctx, info)
            return Prompt(system=prompt.system, parts=(prompt.dynamic, ImagePart(data=PNG, media_type="image/png")))

    server.add(call_step(Query(query="a")), done_step())
    result = await run_tool_loop(caller, Looking(), corpus_search, "ctx", FAST)
    assert result.items == ["doc:a"]
    kinds = [[block["type"] for block in body["messages"][0]["content"]] for body in server.requests]
    assert kinds == [["text", "image"], ["text", "image"]]


# --- the prompt cache ------------------------------------------------------------------------------


async def test_the_stable_system_part_is_read_from_the_cache_from_the_second_round(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """Round one writes the tool and system prompt to the cache, later rounds read them: all counted as input,
    the read part as cached_input_tokens and the written part as cache_write_tokens."""
    server.add(call_step(Query(query="a")), call_step(Query(query="b")), done_step())
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    usages = [body["usage"] for body in server.responses if body is not None]
    assert usages[0]["cache_creation_input_tokens"] > 0
    assert usages[0]["cache_read_input_tokens"] == 0
    for usage in usages[1:]:
        assert usage["cache_read_input_tokens"] == usages[0]["cache_creation_input_tokens"]
        assert usage["cache_creation_input_tokens"] == 0
    every = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    assert result.usage.input_tokens == every
    assert result.usage.cached_input_tokens == sum(usage["cache_read_input_tokens"] for usage in usages)
    assert result.usage.cache_write_tokens == usages[0]["cache_creation_input_tokens"]
    assert result.usage.cached_input_tokens > result.usage.cache_write_tokens


# --- thinking ---------------------------------------------------------------------------------------


async def test_thinking_offers_the_tool_without_forcing_it(server: FakeAnthropicServer) -> None:
    """With a thinking budget the tool is offered with tool_choice auto (the API refuses a forced one), the call
    asked for in the user's turn, and no temperature sent."""
    thinking = Reasoning(budget_tokens=2048)
    async with AnthropicCaller(base_url=server.base_url) as caller:
        completion = await caller.complete(request(temperature=0.2, max_tokens=4000, reasoning=thinking), Verdict)
    body = server.requests[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "temperature" not in body
    assert "calling the tool `Verdict`" in message_text(body["messages"][0])
    assert isinstance(completion.value, Verdict)
    assert completion.reasoning == server.responses[0]["content"][0]["thinking"]  # type: ignore[index]  # answered


@pytest.mark.parametrize(
    ("reasoning", "budget"),
    [
        (Reasoning(effort="low"), THINKING_BUDGETS["low"]),
        (Reasoning(effort="high"), THINKING_BUDGETS["high"]),
        (Reasoning(effort="high", budget_tokens=3000), 3000),
        (Reasoning(effort="off"), None),
        (Reasoning(), None),
    ],
)
async def test_the_reasoning_setting_becomes_the_thinking_budget(
    server: FakeAnthropicServer, caller: AnthropicCaller, reasoning: Reasoning, budget: int | None
) -> None:
    """RoleSpec.reasoning maps to thinking: a budget as given, an effort by THINKING_BUDGETS, off or unset none."""
    completion = await caller.complete_text(request(reasoning=reasoning, max_tokens=20_000))
    thinking = server.requests[0].get("thinking")
    assert thinking == (None if budget is None else {"type": "enabled", "budget_tokens": budget})
    assert (completion.reasoning is None) is (budget is None)


async def test_a_budget_below_the_apis_least_is_a_usage_error(caller: AnthropicCaller) -> None:
    """The Messages API takes no budget below 1024 tokens: refused before any request, naming the fix."""
    with pytest.raises(UsageError, match="below 1024"):
        await caller.complete(request(reasoning=Reasoning(budget_tokens=500)), Verdict)


async def test_extra_body_reaches_the_top_level_but_may_not_name_the_tool(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """RoleSpec.extra_body is merged into the request; naming tools or tool_choice is a UsageError."""
    await caller.complete(request(extra_body={"top_k": 5, "metadata": {"user_id": "u1"}}), Verdict)
    assert (server.requests[0]["top_k"], server.requests[0]["metadata"]) == (5, {"user_id": "u1"})
    with pytest.raises(UsageError, match="tool_choice"):
        await caller.complete(request(extra_body={"tool_choice": {"type": "any"}}), Verdict)


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"max_tokens": 20_000, "extra_body": {"max_tokens": 500}}, r"below max_tokens \(500\)"),
        ({"max_tokens": 20_000, "fallback_model": "b", "fallback_max_tokens": 2000}, "below RoleSpec.fallback_max"),
        ({"extra_body": {"thinking": {"type": "enabled", "budget_tokens": 2048}}}, "thinking is set by"),
    ],
)
async def test_a_thinking_budget_or_setting_the_request_cannot_carry_is_refused_before_any_request(
    server: FakeAnthropicServer, caller: AnthropicCaller, settings: dict[str, Any], refused: str
) -> None:
    """The budget must fit the limit extra_body sets and the fallback's limit; extra_body may not set thinking (the
    tool would be forced beside it): each a UsageError before the first request, not a 400 later."""
    reasoning = Reasoning(budget_tokens=4096) if "thinking" not in settings.get("extra_body", {}) else None
    with pytest.raises(UsageError, match=refused):
        await caller.complete(request(reasoning=reasoning, **settings), Verdict)
    assert server.requests == []


async def test_a_reask_with_thinking_sends_the_thinking_blocks_back(server: FakeAnthropicServer) -> None:
    """A rejected tool call is answered by its tool_result after the assistant turn as sent, thinking included."""
    server.add({"score": "high"}, {"score": 3})
    async with AnthropicCaller(base_url=server.base_url) as caller:
        completion = await caller.complete(request(max_tokens=4000, reasoning=Reasoning(budget_tokens=1024)), Verdict)
    assert completion.value == Verdict(score=3)
    assistant, answer = server.requests[1]["messages"][1:]
    assert [block["type"] for block in assistant["content"]] == ["thinking", "tool_use"]
    assert assistant["content"][0]["signature"]
    (result,) = answer["content"]
    assert (result["type"], result["tool_use_id"], result["is_error"]) == (
        "tool_result",
        assistant["content"][1]["id"],
        True,
    )
    assert "score" in result["content"]


async def test_a_thinking_budget_not_below_max_tokens_is_a_usage_error(server: FakeAnthropicServer) -> None:
    """The budget is part of max_tokens: a budget that does not fit is refused before any request."""
    async with AnthropicCaller(base_url=server.base_url) as caller:
        with pytest.raises(UsageError, match="below max_tokens"):
            await caller.complete(request(max_tokens=1000, reasoning=Reasoning(budget_tokens=2048)), Verdict)
    assert server.requests == []


# --- replies that are not a valid step ---------------------------------------------------------------


async def test_a_reply_without_the_tool_call_is_reasked(server: FakeAnthropicServer, caller: AnthropicCaller) -> None:
    """A text reply is re-asked, the text kept as the assistant's turn and the error after it."""
    server.add("I would rather chat.", {"score": 4})
    completion = await caller.complete(request(), Verdict)
    assert completion.value.score == 4
    assistant, told = server.requests[1]["messages"][1:]
    assert assistant["content"] == [{"type": "text", "text": "I would rather chat."}]
    assert "made no call to the tool 'Verdict'" in message_text(told)


async def test_several_tool_calls_are_each_answered_and_reasked(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """Two calls in one reply are a schema failure: each gets its tool_result with the error."""
    server.add(FakeReply.tool_calls({"score": 1}, {"score": 2}), {"score": 3})
    completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=3)
    assistant, answer = server.requests[1]["messages"][1:]
    assert [block["tool_use_id"] for block in answer["content"]] == [block["id"] for block in assistant["content"]]
    assert "made 2 calls to the tool" in answer["content"][0]["content"]


async def test_an_empty_reply_is_reasked_in_the_users_turn(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """A reply with no content blocks leaves nothing to answer: the error joins the user's turn."""
    server.add(FakeReply.no_choices(), {"score": 2})
    assert (await caller.complete(request(), Verdict)).value == Verdict(score=2)
    (turn,) = server.requests[1]["messages"]
    assert [block["type"] for block in turn["content"]] == ["text", "text"]


@pytest.mark.parametrize("text", ["", " \n"], ids=["empty", "blank"])
async def test_an_empty_or_blank_text_reply_is_reasked_in_the_users_turn(
    server: FakeAnthropicServer, caller: AnthropicCaller, text: str
) -> None:
    """The API sends empty text blocks but refuses them (and blank ones) in a request: a reply of nothing else is
    re-asked as an empty one, never sent back to be refused with a 400."""
    server.add(FakeReply.text(text), {"score": 2})
    assert (await caller.complete(request(), Verdict)).value == Verdict(score=2)
    (turn,) = server.requests[1]["messages"]
    assert "made no call to the tool 'Verdict'" in message_text(turn)


def replies(*messages: dict[str, Any], seen: list[dict[str, Any]]) -> type[http.server.BaseHTTPRequestHandler]:
    """A server that answers its requests with `messages` in turn (each a message's content and stop reason; the
    last one answers every request after), and keeps each request's body in `seen`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            usage = {"input_tokens": 5, "output_tokens": 2}
            body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "usage": usage}
            data = json.dumps({**body, **messages[min(len(seen), len(messages)) - 1]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def called(value: object, stop: str = "tool_use", *before: dict[str, Any]) -> dict[str, Any]:
    """A message that calls the tool `Verdict` with `value`, after the blocks `before`, stopped for `stop`."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Verdict", "input": value}
    return {"content": [*before, call], "stop_reason": stop}


async def test_a_blank_text_block_beside_an_invalid_call_is_not_sent_back() -> None:
    """A re-ask sends the rejected reply back without its empty text block, which the API would refuse."""
    seen: list[dict[str, Any]] = []
    blank = {"type": "text", "text": ""}
    with http_server(replies(called({"score": "high"}, "tool_use", blank), called({"score": 3}), seen=seen)) as url:
        async with AnthropicCaller(base_url=url) as caller:
            assert (await caller.complete(request(), Verdict)).value == Verdict(score=3)
    assistant = seen[1]["messages"][1]
    assert [block["type"] for block in assistant["content"]] == ["tool_use"]


async def test_a_reply_stopped_by_the_context_window_is_truncated_never_parsed() -> None:
    """`stop_reason: "model_context_window_exceeded"` cut the reply off as the token limit does: `Truncated`, even
    when the call's input so far validates, and for a text reply too; the message says to shorten the prompt."""
    seen: list[dict[str, Any]] = []
    text = {"content": [{"type": "text", "text": "Otters eat fi"}], "stop_reason": "model_context_window_exceeded"}
    with http_server(replies(called({"score": 1}, "model_context_window_exceeded"), text, seen=seen)) as url:
        async with AnthropicCaller(base_url=url) as caller:
            with pytest.raises(Truncated, match=r"context window.*shorten the prompt") as structured:
                await caller.complete(request(), Verdict)
            with pytest.raises(Truncated, match="context window") as prose:
                await caller.complete_text(request())
    assert structured.value.schema_name == "Verdict"
    assert prose.value.raw == "Otters eat fi"
    assert len(seen) == 2


async def test_a_refusal_is_reasked_even_when_its_call_validates() -> None:
    """A reply the API stopped as a refusal is not the model's answer, even if its call's input validates: it is
    asked again, told that the model refused."""
    seen: list[dict[str, Any]] = []
    with http_server(replies(called({"score": 1}, "refusal"), called({"score": 3}), seen=seen)) as url:
        async with AnthropicCaller(base_url=url) as caller:
            assert (await caller.complete(request(), Verdict)).value == Verdict(score=3)
    assert "the model refused" in message_text(seen[1]["messages"][-1])


async def test_a_run_reaches_the_fallback_after_overloaded(
    server: FakeAnthropicServer, caller: AnthropicCaller
) -> None:
    """529 overloaded_error is retried, then the fallback model answers."""
    server.add(FakeReply.error(529), FakeReply.error(529), call_step(Query(query="x")), done_step())
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.outcome is Outcome.APPLIED
    assert [body["model"] for body in server.requests][:3] == ["primary-model", "primary-model", "fallback-model"]


# --- usage from the wire ------------------------------------------------------------------------------


def bad_usage(field: str, value: object) -> type[http.server.BaseHTTPRequestHandler]:
    """A server whose every message calls the tool `Verdict` and reports `field` as `value`."""
    usage: dict[str, object] = {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 0, field: value}
    return replies({**called({"score": 1}), "usage": usage}, seen=[])


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
)
@pytest.mark.parametrize("value", [-1000, 10**12, 2.5, "7"])
async def test_a_broken_usage_count_is_a_provider_error(field: str, value: object) -> None:
    """A negative, absurd or non-integer token count, cache counts included, is a ProviderError, never summed."""
    with http_server(bad_usage(field, value)) as url:
        async with AnthropicCaller(base_url=url) as caller:
            with pytest.raises(ProviderError, match=f"usage.{field}=") as raised:
                await caller.complete(request(), Verdict)
    assert not raised.value.transient


# --- wiring ------------------------------------------------------------------------------------------


async def test_a_passed_client_is_used_with_retries_off_and_left_open(server: FakeAnthropicServer) -> None:
    """A passed client with retries on is used as a copy with max_retries=0, through its post; aclose keeps it."""
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=5) as client:
        caller = AnthropicCaller(client)
        assert caller.client.max_retries == 0
        server.add(FakeReply.error(500))
        with pytest.raises(ProviderError):
            await caller.complete(request(), Verdict)
        assert isinstance((await caller.complete(request(), Verdict)).value, Verdict)
        await caller.aclose()
        assert not client.is_closed()
    assert len(server.requests) == 2


async def test_the_built_client_has_retries_off_and_is_closed_by_aclose(server: FakeAnthropicServer) -> None:
    """The client AnthropicCaller builds has max_retries=0 and is closed by ``aclose``."""
    caller = AnthropicCaller(base_url=server.base_url, timeout=5)
    assert caller.client.max_retries == 0
    await caller.aclose()
    assert caller.client.is_closed()


async def test_a_rotated_key_is_the_one_sent() -> None:
    """The key is read from the client on each request: a key rotated on caller.client is sent."""
    keys: list[str] = []
    handler = bad_usage("input_tokens", 5)

    class Recording(handler):  # type: ignore[misc,valid-type]  # a handler class made per test
        def do_POST(self) -> None:
            keys.append(self.headers.get("x-api-key") or self.headers.get("authorization") or "")  # as the SDK sends it
            super().do_POST()

    with http_server(Recording) as url:
        async with AnthropicCaller(base_url=url, api_key="first") as caller:
            await caller.complete(request(), Verdict)
            caller.client.api_key = "second"
            await caller.complete(request(), Verdict)
    assert [key.removeprefix("Bearer ") for key in keys] == ["first", "second"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_reasks": -1},
        {"max_in_flight": 0},
        {"timeout": 0},
        {"cache_system": "yes"},
        {"default_max_tokens": 0},
        {"stream": "yes"},
    ],
)
def test_wiring_mistakes_are_usage_errors(kwargs: dict[str, Any]) -> None:
    """Invalid options raise UsageError at construction."""
    with pytest.raises(UsageError):
        AnthropicCaller(**{"base_url": "http://localhost:1", **kwargs})


def test_a_remote_server_without_a_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anthropic's API without a key is refused now, naming the fix, not with a 401 later."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(UsageError, match=r"api_key=.*ANTHROPIC_API_KEY"):
        AnthropicCaller()


async def test_the_sdks_bearer_token_from_the_environment_is_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """ANTHROPIC_AUTH_TOKEN (the SDK's bearer token, as a gateway takes it) stands for a key: a remote server is not
    refused, and the token goes out as `Authorization: Bearer`."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "gateway-token")
    headers: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            headers.append(self.headers.get("authorization"))
            content = [{"type": "tool_use", "id": "toolu_1", "name": "Verdict", "input": {"score": 5}}]
            usage = {"input_tokens": 5, "output_tokens": 2}
            body = {"id": "m", "type": "message", "content": content, "stop_reason": "tool_use", "usage": usage}
            data = json.dumps(body)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    AnthropicCaller()  # api.anthropic.com: not refused for want of a key
    with http_server(Handler) as url:
        async with AnthropicCaller(base_url=url) as caller:
            assert (await caller.complete(request(), Verdict)).value == Verdict(score=5)
    assert headers == ["Bearer gateway-token"]


def test_a_client_together_with_a_base_url_is_a_usage_error() -> None:
    """client= and base_url= together: the client's own settings would be ambiguous."""
    client = anthropic.AsyncAnthropic(base_url="http://localhost:1", api_key="k")
    with pytest.raises(UsageError, match="either client"):
        AnthropicCaller(client, base_url="http://localhost:1")


async def test_the_raw_reply_of_a_failed_validation_is_the_tool_input_as_json(
    server: FakeAnthropicServer,
) -> None:
    """After the re-asks the error's raw reply is the last call's input, as JSON."""
    server.add({"score": "high"}, {"score": "higher"})
    async with AnthropicCaller(base_url=server.base_url) as caller:
        with pytest.raises(StructuredOutputError) as raised:
            await caller.complete(request(), Verdict)
    assert json.loads(raised.value.raw or "") == {"score": "higher"}
