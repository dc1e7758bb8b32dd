"""OpenAICaller against a misbehaving server: a reply dripped byte by byte, broken usage counts, odd text."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, create_model

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    RoleSpec,
    RoundInfo,
    StopReason,
    StructuredRequest,
    ToolRoundInfo,
    Usage,
    UsageError,
    run_once,
    run_tool_loop,
)
from agentkit.errors import ProviderError
from agentkit.providers._wire import json_in_text, token_count
from agentkit.providers.openai import MAX_TOKENS_PER_REPLY, OpenAICaller, StructuredMode, _plan
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step
from agentkit.testing._fake_server import ReplyOptions
from tests.support import NO_WAIT, corpus_search

DRIP = 0.2
"""Seconds between the bytes of a dripped reply: each read is far inside any per-read timeout."""
GUARD = 30.0
"""Seconds after which a test that should have been cut off long before fails instead of hanging."""


class Verdict(BaseModel):
    score: int


class Searcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="primary-model")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", dynamic=f"round {info.round}: {ctx}")


class Rater:
    def role(self) -> RoleSpec:
        return RoleSpec(model="primary-model")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Rate it.", dynamic=ctx)


def request(**fields: Any) -> StructuredRequest:
    return StructuredRequest(**{"system": "Rate it.", "dynamic": "the text", "model": "m", **fields})


# --- a reply dripped one byte at a time ------------------------------------------------------------


async def test_dripped_reply_is_cut_off_by_the_whole_request_timeout(server: FakeOpenAIServer) -> None:
    """Headers, then a byte every 0.2 s: timeout=1 bounds the whole request, a transient ProviderError."""
    server.add(FakeReply.auto(drip=DRIP))
    async with OpenAICaller(base_url=server.base_url, timeout=1) as caller:
        with pytest.raises(ProviderError, match=r"timed out after 1\.0s for the whole request") as raised:
            await asyncio.wait_for(caller.complete(request(), Verdict), GUARD)
    assert raised.value.transient
    assert raised.value.usage == Usage(requests=1)


async def test_dripped_reply_ends_the_loop_with_llm_error(server: FakeOpenAIServer) -> None:
    """A loop with no deadline over a dripping server ends LLM_ERROR with a transient ProviderError."""
    server.add(FakeReply.auto(drip=DRIP), FakeReply.auto(drip=DRIP))
    config = LoopConfig(retry=NO_WAIT)
    async with OpenAICaller(base_url=server.base_url, timeout=1) as caller:
        result = await asyncio.wait_for(run_tool_loop(caller, Searcher(), corpus_search, "q", config), GUARD)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, ProviderError)
    assert result.error.transient
    assert len(server.requests) == 2  # the primary's two attempts, each cut off


async def test_dripped_reply_ends_run_once_with_an_error(server: FakeOpenAIServer) -> None:
    """run_once over a dripping server returns an ERROR result with a transient ProviderError."""
    server.add(FakeReply.auto(drip=DRIP), FakeReply.auto(drip=DRIP))
    async with OpenAICaller(base_url=server.base_url, timeout=1) as caller:
        result = await asyncio.wait_for(run_once(caller, Rater(), "text", schema=Verdict, retry=NO_WAIT), GUARD)
    assert result.outcome is Outcome.ERROR
    assert isinstance(result.error, ProviderError)
    assert result.error.transient


async def test_a_slow_but_steady_reply_within_the_timeout_is_read(server: FakeOpenAIServer) -> None:
    """A dripped reply that ends inside the timeout is read and validated as usual."""
    server.add(FakeReply.value({"score": 3}, drip=0.001))
    async with OpenAICaller(base_url=server.base_url, timeout=30) as caller:
        completion = await caller.complete(request(), Verdict)
    assert completion.value == Verdict(score=3)


async def test_a_passed_clients_numeric_timeout_bounds_the_whole_request(server: FakeOpenAIServer) -> None:
    """A client passed in with timeout=1 and no OpenAICaller timeout is bounded as a whole too."""
    import openai

    server.add(FakeReply.auto(drip=DRIP))
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", timeout=1)
    try:
        with pytest.raises(ProviderError, match="timed out") as raised:
            await asyncio.wait_for(OpenAICaller(client).complete(request(), Verdict), GUARD)
    finally:
        await client.close()
    assert raised.value.transient


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "2"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_a_usage_error(timeout: Any) -> None:
    """OpenAICaller(timeout=...) refuses zero, negatives, NaN, infinity, bools and strings."""
    with pytest.raises(UsageError, match="timeout"):
        OpenAICaller(base_url="http://127.0.0.1:1/v1", timeout=timeout)


# --- usage counts from the wire --------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts",
    [
        {"prompt_tokens": -1_000_000},
        {"completion_tokens": -1},
        {"prompt_tokens": MAX_TOKENS_PER_REPLY + 1},
        {"completion_tokens": 10**30},
    ],
)
async def test_negative_or_absurd_token_counts_are_a_protocol_error(
    server: FakeOpenAIServer, counts: ReplyOptions
) -> None:
    """A negative or absurd usage count is a non-transient ProviderError naming the field; nothing is summed."""
    server.add(FakeReply.value({"score": 1}, **counts))
    async with OpenAICaller(base_url=server.base_url) as caller:
        with pytest.raises(ProviderError, match=rf"usage\.{next(iter(counts))}=") as raised:
            await caller.complete(request(), Verdict)
    assert not raised.value.transient
    assert raised.value.usage == Usage(requests=1)


async def test_negative_token_counts_cannot_defeat_the_token_budget(server: FakeOpenAIServer) -> None:
    """A server reporting prompt_tokens=-1000000 every round ends the run at once, not after many rounds."""
    server.add(*[FakeReply.value(call_step({"query": "x"}), prompt_tokens=-1_000_000) for _ in range(10)])
    config = LoopConfig(max_rounds=10, token_budget=100, retry=NO_WAIT)
    async with OpenAICaller(base_url=server.base_url) as caller:
        result = await run_tool_loop(caller, Searcher(), corpus_search, "q", config)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert result.rounds == 1
    assert len(server.requests) == 1
    assert result.usage.input_tokens >= 0


@pytest.mark.parametrize("value", [1.5, "12", True, [], -0.5])
def test_token_counts_that_are_not_whole_numbers_are_a_protocol_error(value: object) -> None:
    """A count that is not a whole number (a fraction, a string, a bool) is refused like a negative one."""
    with pytest.raises(ProviderError, match=r"usage\.prompt_tokens"):
        token_count(value, "prompt_tokens", "m")


@pytest.mark.parametrize(("value", "count"), [(None, 0), (0, 0), (12, 12), (12.0, 12), (MAX_TOKENS_PER_REPLY,) * 2])
def test_valid_token_counts_are_read_as_sent(value: object, count: int) -> None:
    """A missing count is 0; a whole number in range (even written 12.0) is taken as is."""
    assert token_count(value, "prompt_tokens", "m") == count


# --- what goes on the wire -------------------------------------------------------------------------


async def test_text_with_a_lone_surrogate_reaches_the_server_intact(server: FakeOpenAIServer) -> None:
    """Prompt text that is not valid UTF-8 (a lone surrogate) is sent as JSON escapes, losslessly."""
    async with OpenAICaller(base_url=server.base_url) as caller:
        await caller.complete(request(dynamic="bad \ud800 text, ünïcode"), Verdict)
    assert server.requests[0]["messages"][-1]["content"] == "bad \ud800 text, ünïcode"


async def test_the_request_carries_the_schema_once_beside_the_messages(server: FakeOpenAIServer) -> None:
    """The prebuilt schema part is spliced into the body exactly once, next to model and messages."""
    async with OpenAICaller(base_url=server.base_url) as caller:
        await caller.complete(request(temperature=0.5), Verdict)
    body = server.requests[0]
    assert set(body) == {"model", "messages", "temperature", "response_format"}
    assert body["response_format"]["json_schema"]["schema"]["properties"] == {
        "score": {"title": "Score", "type": "integer"}
    }


class Lookup(BaseModel):
    query: str


def test_a_step_request_carries_its_schema_compactly_in_every_mode() -> None:
    """The step schema goes out as compact JSON: no root title beside its name, no stand-in function
    description, and no indentation where JSON and MD_JSON put it in the prompt."""
    from agentkit._step import build_step_model

    step = build_step_model(Lookup)
    schema = step.model_json_schema()
    compact = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    sent = _plan(step, StructuredMode.JSON_SCHEMA).extra["response_format"]["json_schema"]
    assert sent["name"] == schema["title"]
    assert sent["schema"] == {key: value for key, value in schema.items() if key != "title"}
    function = _plan(step, StructuredMode.TOOLS).extra["tools"][0]["function"]
    assert "description" not in function
    for mode in (StructuredMode.JSON, StructuredMode.MD_JSON):
        prompt = "".join(slot.prefix + slot.suffix for slot in _plan(step, mode).template)
        assert compact in prompt
        assert json.dumps(schema, indent=2) not in prompt
    plan = _plan(step, StructuredMode.JSON_SCHEMA)
    assert plan.extra_json == json.dumps(plan.extra, separators=(",", ":"), ensure_ascii=False)[1:-1]


def test_the_plans_of_schemas_made_per_request_go_with_them() -> None:
    """A plan is kept on its schema: built once, and once the schemas are gone nothing holds them."""
    schemas = [create_model(f"Model{number}", x=(int, ...)) for number in range(20)]
    first = _plan(schemas[0], StructuredMode.JSON_SCHEMA)
    assert _plan(schemas[0], StructuredMode.JSON_SCHEMA) is first
    for schema in schemas:
        _plan(schema, StructuredMode.TOOLS, True)
    gone = [weakref.ref(schema) for schema in schemas]
    del schemas, schema, first
    gc.collect()
    assert [ref for ref in gone if ref() is not None] == []


# --- requests in flight ----------------------------------------------------------------------------


async def test_requests_in_flight_are_bounded_by_max_in_flight(server: FakeOpenAIServer) -> None:
    """With max_in_flight=2, six concurrent calls all complete, never more than two at the server at once."""
    server.add(*[FakeReply.value({"score": n}, delay=0.3) for n in range(6)])
    async with OpenAICaller(base_url=server.base_url, max_in_flight=2) as caller:
        completions = await asyncio.gather(*(caller.complete(request(), Verdict) for _ in range(6)))
    assert sorted(c.value.score for c in completions) == list(range(6))
    assert server.max_concurrent <= 2


async def test_without_a_bound_every_request_is_sent_at_once(server: FakeOpenAIServer) -> None:
    """max_in_flight=None hands every call to the client at once: the server sees them overlap."""
    server.add(*[FakeReply.value({"score": n}, delay=1.0) for n in range(4)])
    async with OpenAICaller(base_url=server.base_url, max_in_flight=None) as caller:
        await asyncio.gather(*(caller.complete(request(), Verdict) for _ in range(4)))
    assert server.max_concurrent > 2


@pytest.mark.parametrize("bound", [0, -1, True, 1.5])
def test_a_max_in_flight_that_is_not_a_positive_int_is_a_usage_error(bound: Any) -> None:
    """max_in_flight must be an int >= 1 or None."""
    with pytest.raises(UsageError, match="max_in_flight"):
        OpenAICaller(base_url="http://127.0.0.1:1/v1", max_in_flight=bound)


# --- MD_JSON's fenced block ------------------------------------------------------------------------


def test_the_json_in_a_reply_is_its_last_complete_object() -> None:
    """MD_JSON takes the last complete JSON object of the reply: JSON quoted earlier (from the prompt) never answers."""
    reply = 'The user wrote {"score": 10}, but I judge:\n```json\n{"score": 3, "why": "a } brace"}\n```'
    assert json_in_text(reply) == '{"score": 3, "why": "a } brace"}'
    assert json_in_text("no JSON here") == "no JSON here"
    assert json_in_text("```json\n[1, 2]\n```") == "[1, 2]"


@given(st.text(alphabet='{}[]":,x1 ', max_size=300))
def test_the_search_for_json_ends_on_any_text(text: str) -> None:
    """Malformed brackets and quotes end the search (linear work), with the text itself or a JSON span of it."""
    found = json_in_text(text)
    if found != text:
        json.loads(found)
        assert found in text


async def test_an_md_json_reply_with_quoted_json_before_the_answer_validates_the_answer(
    server: FakeOpenAIServer,
) -> None:
    """Over the wire, an MD_JSON reply that quotes other JSON before its fenced answer validates the answer."""

    class Verdict(BaseModel):
        score: int

    server.add(FakeReply.text('You said {"score": 9}.\n```json\n{"score": 2}\n```'))
    async with OpenAICaller(base_url=server.base_url, mode=StructuredMode.MD_JSON) as caller:
        completion = await caller.complete(StructuredRequest(system="", dynamic="rate", model="m"), Verdict)
    assert completion.value.score == 2
