"""InstructorCaller (the `instructor` extra) over an instructor client against FakeOpenAIServer.

instructor pins jiter below what the newest openai needs, so the test extra leaves it out: these tests skip
where it is not installed, and .ci/coinstall.sh runs them in a venv of their own with the extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import openai
import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, RetryPolicy, StructuredRequest, run_tool_loop
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, UsageError
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from tests.support import Query, corpus_search

instructor = pytest.importorskip("instructor")

from agentkit.providers.instructor import InstructorCaller  # noqa: E402  (after the skip)

REQUEST = StructuredRequest(system="Rate it.", dynamic="the text", model="m")


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
