"""assert_type checks for agentkit.providers.anthropic and agentkit.testing's FakeAnthropicServer (mypy only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_type

import anthropic
from pydantic import BaseModel

from agentkit import Completion, StructuredCaller, StructuredRequest, Usage
from agentkit.providers import Reasoning, ReasoningEffort, TextCaller, TextCompletion
from agentkit.providers.anthropic import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIMEOUT,
    THINKING_BUDGETS,
    AnthropicCaller,
)
from agentkit.testing import FakeAnthropicServer, FakeReply


class Verdict(BaseModel):
    score: int


async def structured_and_text(request: StructuredRequest) -> None:
    caller = AnthropicCaller(base_url="http://localhost:8080", timeout=30, max_reasks=2, cache_system=False)
    assert_type(caller, AnthropicCaller)
    assert_type(caller.client, anthropic.AsyncAnthropic)
    assert_type(caller.cache_system, bool)
    assert_type(caller.default_max_tokens, int)
    assert_type(caller.provider_name, str)
    streaming = AnthropicCaller(base_url="http://localhost:8080", stream=True)
    assert_type(streaming, AnthropicCaller)
    assert_type(streaming.stream, bool)
    assert_type(AnthropicCaller(base_url="http://localhost:8080", max_in_flight=None), AnthropicCaller)
    assert_type(AnthropicCaller(api_key="k", max_in_flight=DEFAULT_MAX_IN_FLIGHT), AnthropicCaller)
    assert_type(DEFAULT_MAX_TOKENS, int)
    assert_type(DEFAULT_TIMEOUT, float)
    assert_type(THINKING_BUDGETS, Mapping[ReasoningEffort, int])
    completion = await caller.complete(request, Verdict)
    assert_type(completion, Completion[Verdict])
    assert_type(completion.value, Verdict)
    assert_type(completion.reasoning, str | None)
    assert_type(completion.usage, Usage)
    assert_type(completion.usage.cached_input_tokens, int)
    assert_type(completion.usage.cache_write_tokens, int)
    assert_type(await caller.complete_text(request), TextCompletion)
    _structured: StructuredCaller = caller
    _text: TextCaller = caller
    async with AnthropicCaller(anthropic.AsyncAnthropic(api_key="k")) as scoped:
        assert_type(scoped, AnthropicCaller)
    await caller.aclose()


def thinking(request: StructuredRequest) -> StructuredRequest:
    return StructuredRequest(
        model="claude-sonnet-4-5", system="s", dynamic="d", max_tokens=4096, reasoning=Reasoning(budget_tokens=2048)
    )


def fake_server() -> None:
    with FakeAnthropicServer([FakeReply.error(529), {"score": 1}], min_cache_tokens=1024) as server:
        assert_type(server, FakeAnthropicServer)
        assert_type(server.base_url, str)
        assert_type(server.min_cache_tokens, int)
        assert_type(server.requests, list[dict[str, Any]])
        assert_type(server.responses, list[dict[str, Any] | None])
        server.add(FakeReply.truncated("half"))
        server.add(FakeReply.error(529, mid_stream=True), FakeReply.value({"score": 2}, chunk_chars=4, pace=0.01))
        assert_type(FakeReply.error(529, mid_stream=True).mid_stream, bool)
        server.clear_cache()
        server.assert_complete()
