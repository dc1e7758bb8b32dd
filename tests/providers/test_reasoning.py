"""OpenAICaller and reasoning models: `reasoning_effort`, `max_completion_tokens` and `extra_body` on the wire, the
reasoning a server returns kept, and the usage details (cached and reasoning tokens) read and checked like the
counts they are part of."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Prompt, RetryPolicy, RoleSpec, StructuredRequest, ToolRoundInfo, Usage, run_tool_loop
from agentkit.errors import ProviderError, Truncated, UsageError
from agentkit.providers import Reasoning
from agentkit.providers._wire import Reply, detail_count
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from tests.support import Query, corpus_search

GOLDEN = Path(__file__).parent / "golden"
FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


class Rated(BaseModel):
    """A score for the text, from 0 to 10."""

    score: int
    note: str = ""


def rate(**role: Any) -> StructuredRequest:
    """The golden files' first request, with `role`'s settings."""
    return StructuredRequest(system="Rate it.", dynamic="the text", model="m", max_tokens=50, **role)


async def sent_body(request: StructuredRequest, mode: StructuredMode = StructuredMode.JSON_SCHEMA) -> dict[str, Any]:
    async with FakeOpenAIServer() as server:
        server.add(FakeReply.value({"score": 7}))
        async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
            await caller.complete(request, Rated)
        server.assert_no_errors()
        return server.requests[0]


@pytest.mark.parametrize("mode", list(StructuredMode))
async def test_without_reasoning_or_extra_body_the_body_is_the_golden_one(mode: StructuredMode) -> None:
    """A role that sets neither sends the bytes the golden files pin (explicit `None`s included)."""
    golden = json.loads((GOLDEN / f"{mode.value}.json").read_text())[0]["body"]
    assert await sent_body(rate(reasoning=None, extra_body=None), mode) == golden


async def test_reasoning_sends_its_effort_and_the_limit_as_max_completion_tokens() -> None:
    """`Reasoning(effort=...)` adds `reasoning_effort`, and the token limit goes as `max_completion_tokens`
    (a reasoning model refuses `max_tokens`); nothing else of the golden body changes."""
    golden = json.loads((GOLDEN / "json_schema.json").read_text())[0]["body"]
    body = await sent_body(rate(reasoning=Reasoning(effort="high")))
    expected = {k: v for k, v in golden.items() if k != "max_tokens"} | {
        "max_completion_tokens": 50,
        "reasoning_effort": "high",
    }
    assert body == expected
    assert (await sent_body(rate(reasoning=Reasoning(effort="off"))))["reasoning_effort"] == "none"
    budget_only = await sent_body(rate(reasoning=Reasoning(budget_tokens=1024)))
    assert "reasoning_effort" not in budget_only
    assert budget_only["max_completion_tokens"] == 50


async def test_extra_body_is_merged_into_the_request() -> None:
    """`extra_body`'s keys go at the top level of the body (vLLM's `chat_template_kwargs`), over the caller's own."""
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20, "temperature": 0.6}
    body = await sent_body(rate(temperature=0.1, extra_body=extra))
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["top_k"], body["temperature"]) == (20, 0.6)
    assert body["response_format"]["type"] == "json_schema"


async def test_extra_body_may_not_name_what_the_mode_writes() -> None:
    """An `extra_body` key the mode writes from the schema is refused before anything is sent, naming the key."""
    async with FakeOpenAIServer() as server:
        async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.TOOLS) as caller:
            with pytest.raises(UsageError, match=r"'tool_choice', which OpenAICaller's mode TOOLS writes"):
                await caller.complete(rate(extra_body={"tool_choice": "auto"}), Rated)
        assert server.requests == []


async def test_extra_body_may_not_set_a_second_limit_beside_a_reasoning_roles() -> None:
    """A role with reasoning sends its limit as max_completion_tokens, which a max_tokens in extra_body beside it
    contradicts (a server refuses both): refused before anything is sent."""
    role = rate(reasoning=Reasoning(effort="low"), extra_body={"max_tokens": 500})
    async with FakeOpenAIServer() as server:
        async with OpenAICaller(base_url=server.base_url) as caller:
            with pytest.raises(UsageError, match="give the limit once"):
                await caller.complete(role, Rated)
        assert server.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["body", "streamed"])
async def test_reasoning_content_and_usage_details_are_read(stream: bool) -> None:
    """The message's `reasoning_content` is the completion's `reasoning`; cached and reasoning tokens are counted,
    whether the reply came as one body or streamed (its reasoning then comes in pieces, the usage last)."""
    async with FakeOpenAIServer() as server:
        server.add(
            FakeReply.value(
                {"score": 7},
                prompt_tokens=1000,
                completion_tokens=300,
                cached_tokens=768,
                reasoning_tokens=280,
                reasoning="The text is fine, so 7.",
            ),
            FakeReply.text("hi", prompt_tokens=10, completion_tokens=5, reasoning="greet"),
        )
        async with OpenAICaller(base_url=server.base_url, stream=stream) as caller:
            completion = await caller.complete(rate(reasoning=Reasoning(effort="low")), Rated)
            text = await caller.complete_text(rate())
        server.assert_no_errors()
        assert all(request.get("stream", False) is stream for request in server.requests)
    assert completion.reasoning == "The text is fine, so 7."
    assert completion.usage == Usage(
        requests=1, input_tokens=1000, output_tokens=300, cached_input_tokens=768, reasoning_tokens=280
    )
    assert (text.text, text.reasoning, text.usage.reasoning_tokens) == ("hi", "greet", 0)


@pytest.mark.parametrize(
    ("details", "message"),
    [
        ({"cached_tokens": 5, "reasoning_tokens": -1}, r"completion_tokens_details.reasoning_tokens=-1"),
        ({"cached_tokens": 11}, r"prompt_tokens_details.cached_tokens=11 .*more than the 10 tokens"),
        ({"reasoning_tokens": 1.5}, r"completion_tokens_details.reasoning_tokens=1.5"),
        ({"cached_tokens": 10**9}, r"prompt_tokens_details.cached_tokens=1000000000"),
    ],
)
async def test_a_broken_usage_detail_is_a_provider_error(details: dict[str, Any], message: str) -> None:
    """A detail count that is negative, not whole, absurd or more than its total is a protocol error, not summed."""
    options: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 10}
    if "cached_tokens" in details:
        options["cached_tokens"] = details["cached_tokens"]
    if "reasoning_tokens" in details:
        options["reasoning_tokens"] = details["reasoning_tokens"]
    async with FakeOpenAIServer() as server:
        server.add(FakeReply.value({"score": 7}, **options))
        async with OpenAICaller(base_url=server.base_url) as caller:
            with pytest.raises(ProviderError, match=message) as raised:
                await caller.complete(rate(), Rated)
    assert not raised.value.transient
    assert raised.value.usage == Usage(requests=1)


def test_a_details_block_that_is_not_an_object_is_a_provider_error() -> None:
    """`prompt_tokens_details` must be an object of counts (or absent, or null)."""
    reply = Reply.model_validate_json(json.dumps({"usage": {"prompt_tokens": 5, "prompt_tokens_details": [3]}}))
    assert reply.usage is not None
    with pytest.raises(ProviderError, match=r"usage.prompt_tokens_details=\[3\] .*must be an object"):
        detail_count(reply.usage.prompt_tokens_details, "cached_tokens", "prompt_tokens_details", "m", 5)
    assert detail_count(None, "cached_tokens", "prompt_tokens_details", "m", 5) == 0
    assert detail_count({}, "cached_tokens", "prompt_tokens_details", "m", 5) == 0


async def test_a_cut_off_reply_says_how_much_went_to_reasoning() -> None:
    """`finish_reason: "length"` is `Truncated` as before; where the server counts reasoning tokens, the error says
    the model spent them reasoning, so the fix (a larger limit, a lower effort) is clear."""
    async with FakeOpenAIServer() as server:
        server.add(FakeReply.truncated("", completion_tokens=50, reasoning_tokens=50))
        async with OpenAICaller(base_url=server.base_url) as caller:
            with pytest.raises(Truncated, match=r"50 of its 50 completion tokens went to the model's reasoning") as cut:
                await caller.complete(rate(reasoning=Reasoning(effort="high")), Rated)
    assert cut.value.usage is not None
    assert (cut.value.usage.output_tokens, cut.value.usage.reasoning_tokens) == (50, 50)


async def test_a_reply_whose_reasoning_filled_the_limit_but_that_stopped_is_not_truncated() -> None:
    """Only the server's `finish_reason` says a reply was cut: one that used every token of the limit, most of them
    reasoning, but stopped on its own (`"stop"`) is parsed and kept."""
    async with FakeOpenAIServer() as server:
        server.add(FakeReply.value({"score": 7}, completion_tokens=50, reasoning_tokens=45))
        async with OpenAICaller(base_url=server.base_url) as caller:
            completion = await caller.complete(rate(reasoning=Reasoning(effort="high")), Rated)
    assert completion.value == Rated(score=7)
    assert completion.finish_reasons == ("stop",)


class Thinker:
    def role(self) -> RoleSpec:
        return RoleSpec(model="qwen3", max_tokens=400, reasoning=Reasoning(effort="low"))

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", dynamic=f"round {info.round}: {ctx}")


async def test_a_loop_keeps_each_rounds_reasoning_and_sums_the_details() -> None:
    """Through a whole loop on the wire: each round's reasoning on its record, the details summed in the result."""
    async with FakeOpenAIServer() as server:
        server.add(
            FakeReply.value(call_step(Query(query="otters")), cached_tokens=0, reasoning_tokens=12, reasoning="search"),
            FakeReply.value(done_step("enough"), prompt_tokens=90, cached_tokens=64, reasoning_tokens=8),
        )
        async with OpenAICaller(base_url=server.base_url) as caller:
            result = await run_tool_loop(caller, Thinker(), corpus_search, "find otters", FAST)
        server.assert_no_errors()
    assert [record.reasoning for record in result.trace] == ["search", None]
    assert (result.usage.cached_input_tokens, result.usage.reasoning_tokens) == (64, 20)
    assert all(body["reasoning_effort"] == "low" and body["max_completion_tokens"] == 400 for body in server.requests)
