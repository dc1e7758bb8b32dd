"""InstructorCaller (the `instructor` extra) over an instructor client against FakeOpenAIServer.

instructor pins jiter below what the newest openai needs, so the test extra leaves it out: these tests skip
where it is not installed, and .ci/coinstall.sh runs them in a venv of their own with the extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, TypeVar

import openai
import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, RetryPolicy, StructuredRequest, Usage, run_tool_loop
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, UsageError
from agentkit.providers import Reasoning
from agentkit.testing import FakeAnthropicServer, FakeOpenAIServer, FakeReply, call_step, done_step
from tests.support import Query, corpus_search

instructor = pytest.importorskip("instructor")

from agentkit.providers.instructor import InstructorCaller  # noqa: E402  (after the skip)

REQUEST = StructuredRequest(system="Rate it.", dynamic="the text", model="m")

M = TypeVar("M", bound=BaseModel)


class Verdict(BaseModel):
    score: int


@contextlib.asynccontextmanager
async def caller_on(server: FakeOpenAIServer, max_reasks: int = 1) -> AsyncIterator[InstructorCaller]:
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
        yield InstructorCaller(instructor.from_openai(client, mode=instructor.Mode.TOOLS), max_reasks=max_reasks)


async def test_an_instructor_client_answers_with_a_validated_value_and_its_usage() -> None:
    """A reply through the instructor client is validated against the schema, with the server's usage."""
    with FakeOpenAIServer([FakeReply.value({"score": 4}, prompt_tokens=11, completion_tokens=3)]) as server:
        async with caller_on(server) as caller:
            completion = await caller.complete(REQUEST, Verdict)
    assert isinstance(completion.value, Verdict)
    assert completion.value.score == 4
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (11, 3)
    assert "tools" in server.requests[0]


async def test_an_instructor_caller_runs_the_tool_loop() -> None:
    """run_tool_loop runs on an InstructorCaller: a tool call, then done."""
    from tests.support import Searcher

    with FakeOpenAIServer([call_step(Query(query="otters")), done_step("enough")]) as server:
        async with caller_on(server) as caller:
            result = await run_tool_loop(
                caller,
                Searcher(fallback=None),
                corpus_search,
                "find otters",
                LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0)),
            )
    assert result.outcome is Outcome.APPLIED
    assert result.items == ["doc:otters"]


async def test_a_429_through_instructor_is_throttled() -> None:
    """HTTP 429, which instructor wraps in its own errors, comes out as Throttled."""
    with FakeOpenAIServer([FakeReply.error(429)]) as server, pytest.raises(Throttled):
        async with caller_on(server, max_reasks=0) as caller:
            await caller.complete(REQUEST, Verdict)


async def test_a_server_error_through_instructor_is_a_transient_provider_error() -> None:
    """A 5xx comes out as a transient ProviderError with its status."""
    with FakeOpenAIServer([FakeReply.error(503)]) as server, pytest.raises(ProviderError) as raised:
        async with caller_on(server, max_reasks=0) as caller:
            await caller.complete(REQUEST, Verdict)
    assert (raised.value.status, raised.value.transient) == (503, True)


async def test_a_reply_invalid_after_the_reasks_is_a_structured_output_error() -> None:
    """A reply that stays invalid through instructor's re-asks is a StructuredOutputError naming the schema."""
    with (
        FakeOpenAIServer([FakeReply.value({"score": "x"}), FakeReply.value({"score": "y"})]) as server,
        pytest.raises(StructuredOutputError, match="Verdict"),
    ):
        async with caller_on(server, max_reasks=1) as caller:
            await caller.complete(REQUEST, Verdict)
    assert len(server.requests) == 2


def test_a_client_that_is_not_an_instructor_client_is_refused() -> None:
    """Anything but an instructor client is a UsageError that says what to pass."""
    with pytest.raises(UsageError, match="instructor client"):
        InstructorCaller(object())  # type: ignore[arg-type]  # the wrong client on purpose


async def test_reasoning_and_extra_body_reach_an_openai_client_as_openai_caller_sends_them() -> None:
    """Over an openai client: `reasoning_effort`, the limit as `max_completion_tokens`, `extra_body` in the body."""
    request = replace(
        REQUEST,
        max_tokens=4000,
        reasoning=Reasoning(effort="low"),
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    with FakeOpenAIServer([{"score": 1}]) as server:
        async with caller_on(server) as caller:
            await caller.complete(request, Verdict)
    [body] = server.requests
    assert (body["reasoning_effort"], body["max_completion_tokens"]) == ("low", 4000)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "max_tokens" not in body


async def test_reasoning_off_is_sent_to_an_openai_client_as_none() -> None:
    """`Reasoning(effort="off")` is OpenAI's `reasoning_effort: "none"`, as OpenAICaller sends it."""
    with FakeOpenAIServer([{"score": 1}]) as server:
        async with caller_on(server) as caller:
            await caller.complete(replace(REQUEST, reasoning=Reasoning(effort="off")), Verdict)
    assert server.requests[0]["reasoning_effort"] == "none"


async def test_without_reasoning_the_limit_goes_in_max_tokens_field() -> None:
    """A role without a reasoning setting keeps its limit in `max_tokens_field` (`max_tokens` by default)."""
    with FakeOpenAIServer([{"score": 1}]) as server:
        async with caller_on(server) as caller:
            await caller.complete(replace(REQUEST, max_tokens=300), Verdict)
    assert server.requests[0]["max_tokens"] == 300
    assert "max_completion_tokens" not in server.requests[0]


async def test_the_usage_details_of_an_openai_reply_are_read() -> None:
    """The cached prompt tokens and the reasoning tokens of an OpenAI reply are in the completion's usage."""
    reply = FakeReply.value(
        {"score": 2}, prompt_tokens=1200, cached_tokens=1024, completion_tokens=93, reasoning_tokens=90
    )
    with FakeOpenAIServer([reply]) as server:
        async with caller_on(server) as caller:
            completion = await caller.complete(REQUEST, Verdict)
    assert completion.usage == Usage(
        requests=1, input_tokens=1200, output_tokens=93, cached_input_tokens=1024, reasoning_tokens=90
    )


async def test_thinking_and_extra_body_reach_an_anthropic_client_as_anthropic_caller_sends_them() -> None:
    """Over an anthropic client: `thinking` with the effort's budget, no temperature beside it, `extra_body` merged."""
    anthropic = pytest.importorskip("anthropic")
    from agentkit.providers.anthropic import THINKING_BUDGETS

    request = replace(
        REQUEST,
        max_tokens=4000,
        temperature=0.3,
        reasoning=Reasoning(effort="low"),
        extra_body={"metadata": {"user_id": "u1"}},
    )
    with FakeAnthropicServer([{"score": 1}]) as server:
        async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
            await InstructorCaller(instructor.from_anthropic(client)).complete(request, Verdict)
    [body] = server.requests
    assert body["thinking"] == {"type": "enabled", "budget_tokens": THINKING_BUDGETS["low"]}
    assert (body["max_tokens"], body["metadata"]) == (4000, {"user_id": "u1"})
    assert "temperature" not in body


async def test_an_anthropic_replys_cache_reads_are_input_tokens() -> None:
    """Over an anthropic client, the tokens read from the cache are counted in the input, as AnthropicCaller does."""
    anthropic = pytest.importorskip("anthropic")
    request = replace(REQUEST, max_tokens=500)
    with FakeAnthropicServer([FakeReply.value({"score": 1}, prompt_tokens=12, cached_tokens=3000)]) as server:
        async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
            completion = await InstructorCaller(instructor.from_anthropic(client)).complete(request, Verdict)
    assert (completion.usage.input_tokens, completion.usage.cached_input_tokens) == (3012, 3000)


class Shaped:
    """An instructor client's double whose raw reply carries `usage` as given."""

    def __init__(self, usage: object) -> None:
        self.usage = usage
        self.calls = 0

    async def create_with_completion(
        self, messages: list[Any], response_model: type[M], max_retries: int = 1, **kwargs: Any
    ) -> tuple[M, Any]:
        self.calls += 1
        return response_model.model_validate({"score": 1}), SimpleNamespace(id="r", model="m", usage=self.usage)


async def test_anthropic_shaped_usage_counts_cache_reads_and_writes_as_input() -> None:
    """Messages API usage: input is fresh + cache read + cache write, with the read and the write kept apart."""
    usage = SimpleNamespace(
        input_tokens=12, output_tokens=20, cache_read_input_tokens=3000, cache_creation_input_tokens=500
    )
    completion = await InstructorCaller(Shaped(usage)).complete(REQUEST, Verdict)
    assert completion.usage == Usage(
        requests=1, input_tokens=3512, output_tokens=20, cached_input_tokens=3000, cache_write_tokens=500
    )


async def test_a_broken_usage_detail_count_is_a_provider_error() -> None:
    """A cached count above the prompt tokens it is part of is refused, as OpenAICaller refuses it."""
    usage = SimpleNamespace(prompt_tokens=10, completion_tokens=1, prompt_tokens_details={"cached_tokens": 11})
    with pytest.raises(ProviderError, match=r"prompt_tokens_details\.cached_tokens=11"):
        await InstructorCaller(Shaped(usage)).complete(REQUEST, Verdict)


@pytest.mark.parametrize(
    "settings",
    [{"reasoning": Reasoning(effort="low")}, {"extra_body": {"top_k": 5}}],
    ids=["reasoning", "extra_body"],
)
async def test_a_setting_another_providers_client_cannot_take_is_refused_before_any_request(
    settings: dict[str, Any],
) -> None:
    """Through a client over neither openai nor anthropic, `reasoning` or `extra_body` is a UsageError, unsent."""
    client = Shaped(None)
    with pytest.raises(UsageError, match=r"InstructorCaller sends RoleSpec\.(reasoning|extra_body) only"):
        await InstructorCaller(client).complete(replace(REQUEST, **settings), Verdict)
    assert client.calls == 0


async def test_extra_body_naming_the_schemas_part_is_refused_before_any_request() -> None:
    """`extra_body` may not set `tools` (instructor writes the schema's part); nothing is sent."""
    with FakeOpenAIServer([{"score": 1}]) as server, pytest.raises(UsageError, match="may not name 'tools'"):
        async with caller_on(server) as caller:
            await caller.complete(replace(REQUEST, extra_body={"tools": []}), Verdict)
    assert server.requests == []


async def test_a_thinking_budget_not_below_max_tokens_is_refused_before_any_request() -> None:
    """Over an anthropic client, a thinking budget needs a `max_tokens` above it: refused, unsent, otherwise."""
    anthropic = pytest.importorskip("anthropic")
    with FakeAnthropicServer([{"score": 1}]) as server:
        async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
            caller = InstructorCaller(instructor.from_anthropic(client))
            for max_tokens in (None, 2048):
                request = replace(REQUEST, max_tokens=max_tokens, reasoning=Reasoning(budget_tokens=2048))
                with pytest.raises(UsageError, match=r"thinking budget \(2048 tokens\) must be below"):
                    await caller.complete(request, Verdict)
    assert server.requests == []
