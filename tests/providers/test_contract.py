"""The provider contract: every caller (`OpenAICaller`, `AnthropicCaller`) through its real SDK's wire, against
its fake server on loopback, keeps the same promises (tests/providers/support.py gives each its `Wire`)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from agentkit import LoopConfig, Outcome, RetryPolicy, StopReason, generate_structured, run_tool_loop
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, Truncated
from agentkit.testing import FakeReply, call_step, done_step
from tests.providers.support import WIRES, Caller, Verdict, Wire, fake_server, open_wire, request
from tests.support import Query, Searcher, corpus_search

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


@pytest.fixture(params=WIRES)
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """Each provider's caller with its fake server."""
    with fake_server(request.param) as server:
        yield open_wire(request.param, server)
        server.assert_no_errors()


@pytest.fixture
async def caller(wire: Wire) -> AsyncIterator[Caller]:
    built = wire.caller()
    try:
        yield built
    finally:
        await built.aclose()


# --- the loop end to end ---------------------------------------------------------------------------


async def test_loop_runs_a_call_then_done_through_the_wire(wire: Wire, caller: Caller) -> None:
    """A tool call then done, through the wire, gathers the tool's batch in two requests."""
    wire.server.add(call_step(Query(query="otters")), done_step("enough"))
    result = await run_tool_loop(caller, Searcher(), corpus_search, "find otters", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert result.items == ["doc:otters"]
    assert len(wire.server.requests) == 2
    wire.server.assert_complete()


async def test_loop_without_a_script_runs_on_the_default_replies(wire: Wire, caller: Caller) -> None:
    """Unscripted, the fake answers a schema-valid step (done), so a loop ends cleanly."""
    result = await run_tool_loop(caller, Searcher(), corpus_search, "anything", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.NOTHING_RETRIEVED)
    assert result.error is None


# --- throttling and provider errors -----------------------------------------------------------------


async def test_throttle_ends_the_run_after_exactly_one_request(wire: Wire, caller: Caller) -> None:
    """HTTP 429 ends the run THROTTLED after one request, with Retry-After, never failed over."""
    wire.server.add(FakeReply.error(429, retry_after=7))
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    assert isinstance(result.error, Throttled)
    assert result.error.retry_after == 7
    assert wire.models() == ["primary-model"]
    assert result.usage.requests == 1


async def test_throttled_comes_straight_from_the_429(wire: Wire, caller: Caller) -> None:
    """The caller raises Throttled from the 429 itself, after one request, wrapped in no other error."""
    wire.server.add(FakeReply.error(429))
    with pytest.raises(Throttled) as raised:
        await caller.complete(request(), Verdict)
    assert raised.value.__cause__ is None
    assert raised.value.retry_after is None
    assert len(wire.server.requests) == 1


async def test_retry_after_as_an_http_date_becomes_seconds(wire: Wire, caller: Caller) -> None:
    """A Retry-After given as an HTTP date is turned into seconds from now."""
    wire.server.add(FakeReply.error(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"))
    with pytest.raises(Throttled) as raised:
        await caller.complete(request(), Verdict)
    assert raised.value.retry_after == 0.0


async def test_server_errors_are_retried_then_fail_over_to_the_fallback(wire: Wire, caller: Caller) -> None:
    """Two 500s on the primary model, then the fallback model answers and the run goes on."""
    wire.server.add(FakeReply.error(500), FakeReply.error(500), call_step(Query(query="x")), done_step())
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.outcome is Outcome.APPLIED
    assert wire.models() == ["primary-model", "primary-model", "fallback-model", "primary-model"]


async def test_bad_request_is_not_retried(wire: Wire, caller: Caller) -> None:
    """HTTP 400 ends the run LLM_ERROR after one request: no retry, no fallback."""
    wire.server.add(FakeReply.error(400, message="unsupported parameter"))
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, ProviderError)
    assert (result.error.transient, result.error.status) == (False, 400)
    assert "unsupported parameter" in str(result.error)
    assert len(wire.server.requests) == 1


@pytest.mark.parametrize(
    ("status", "transient"),
    [(401, False), (403, False), (404, False), (422, False), (408, True), (500, True), (503, True), (529, True)],
)
async def test_http_status_maps_to_transient_or_not(wire: Wire, caller: Caller, status: int, transient: bool) -> None:
    """5xx (529 overloaded included) and 408 are transient provider errors; other 4xx are not."""
    wire.server.add(FakeReply.error(status))
    with pytest.raises(ProviderError) as raised:
        await caller.complete(request(), Verdict)
    assert (raised.value.transient, raised.value.status) == (transient, status)
    assert raised.value.usage is not None
    assert raised.value.usage.requests == 1
    assert len(wire.server.requests) == 1


async def test_timeout_is_a_transient_provider_error(wire: Wire) -> None:
    """A reply slower than the timeout is a transient ProviderError after one request."""
    wire.server.add(FakeReply.auto(delay=2))
    caller = wire.caller(timeout=0.2)
    try:
        with pytest.raises(ProviderError, match="timed out") as raised:
            await caller.complete(request(), Verdict)
    finally:
        await caller.aclose()
    assert raised.value.transient
    assert len(wire.server.requests) == 1


async def test_refused_connection_is_a_transient_provider_error(wire: Wire) -> None:
    """A server that is not there gives a transient ProviderError naming the base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    caller = wire.build(base_url=f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(ProviderError, match=f"127.0.0.1:{port}") as raised:
            await caller.complete(request(), Verdict)
    finally:
        await caller.aclose()
    assert raised.value.transient


async def test_a_body_that_is_not_json_is_a_transient_provider_error(wire: Wire, caller: Caller) -> None:
    """A 200 whose body is not JSON is a transient ProviderError (retried, then failed over)."""
    wire.server.add(FakeReply.malformed())
    with pytest.raises(ProviderError, match="unreadable") as raised:
        await caller.complete(request(), Verdict)
    assert raised.value.transient


# --- replies that are not a valid step ---------------------------------------------------------------


async def test_truncated_reply_is_an_error_never_a_step(wire: Wire, caller: Caller) -> None:
    """A reply cut off by the token limit is a Truncated even when the cut text parses; it is not re-asked."""
    wire.server.add(FakeReply.truncated('{"score": 1}'))
    with pytest.raises(Truncated, match="cut off by the token limit") as raised:
        await caller.complete(request(max_tokens=5), Verdict)
    assert (raised.value.raw, raised.value.max_tokens, raised.value.schema_name) == ('{"score": 1}', 5, "Verdict")
    assert len(wire.server.requests) == 1


async def test_invalid_reply_is_reasked_with_the_validation_error(wire: Wire, caller: Caller) -> None:
    """A step that fails validation goes back to the model with the error text; the fixed reply is used."""
    wire.server.add({"done": False}, call_step(Query(query="x")), done_step())
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.items == ["doc:x"]
    assert "a step with done=false must carry a call" in wire.last_text(wire.server.requests[1])
    assert result.usage.requests == 3


async def test_reply_still_invalid_after_reasks_names_the_schema_and_the_raw_reply(wire: Wire) -> None:
    """After max_reasks the error is a StructuredOutputError with the schema name and the last raw reply."""
    wire.server.add("not json", '{"score": "many"}', '{"score": "still"}')
    caller = wire.caller(max_reasks=2)
    try:
        with pytest.raises(StructuredOutputError) as raised:
            await caller.complete(request(), Verdict)
    finally:
        await caller.aclose()
    error = raised.value
    assert error.schema_name == "Verdict"
    assert error.raw == '{"score": "still"}'
    assert "'Verdict'" in str(error)
    assert '{"score": "still"}' in str(error)
    assert error.usage is not None
    assert error.usage.requests == 3
    assert len(wire.server.requests) == 3


async def test_zero_reasks_fails_on_the_first_invalid_reply(wire: Wire) -> None:
    """``max_reasks=0`` makes one request per attempt."""
    wire.server.add("{}")
    caller = wire.caller(max_reasks=0)
    try:
        with pytest.raises(StructuredOutputError):
            await caller.complete(request(), Verdict)
    finally:
        await caller.aclose()
    assert len(wire.server.requests) == 1


async def test_structured_failure_fails_over_with_the_error_shown_to_the_fallback(wire: Wire, caller: Caller) -> None:
    """Invalid on every primary attempt: the fallback model gets its turn, told what was wrong."""
    wire.server.add("no", "no", "no", "no", {"score": 5})
    completion = await generate_structured(
        caller, request(fallback_model="backup"), Verdict, RetryPolicy(wait_initial=0, wait_max=0)
    )
    assert completion.value.score == 5
    assert wire.models() == ["m", "m", "m", "m", "backup"]
    assert any("Your previous reply was rejected" in text for text in wire.texts(wire.server.requests[2]))
    assert completion.usage.requests == 5


# --- usage -------------------------------------------------------------------------------------------


async def test_usage_totals_equal_the_sum_of_the_server_usage_blocks(wire: Wire, caller: Caller) -> None:
    """Every request is counted and every usage block summed, failed attempts and re-asks included."""
    wire.server.add(
        FakeReply.error(503), {"done": False}, call_step(Query(query="x")), FakeReply.no_choices(), done_step()
    )
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.outcome is Outcome.APPLIED
    blocks = wire.usage_blocks()
    assert len(blocks) == 4
    assert result.usage.requests == len(wire.server.requests) == 5
    assert result.usage.input_tokens == sum(given for given, _ in blocks)
    assert result.usage.output_tokens == sum(taken for _, taken in blocks)


async def test_usage_of_a_failed_call_rides_on_the_error(wire: Wire, caller: Caller) -> None:
    """A call that re-asked and then hit a 429 reports both requests and the first reply's tokens."""
    wire.server.add(FakeReply.text("{}", prompt_tokens=10, completion_tokens=3), FakeReply.error(429))
    with pytest.raises(Throttled) as raised:
        await caller.complete(request(), Verdict)
    usage = raised.value.usage
    assert usage is not None
    ((given, taken),) = wire.usage_blocks()
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, given, taken)
    assert (given >= 10, taken) == (True, 3)


async def test_cached_input_tokens_are_read_from_the_wire_and_summed(wire: Wire, caller: Caller) -> None:
    """The prompt cache's reads each reply reports are summed into Usage.cached_input_tokens, a part of input."""
    wire.server.add(
        FakeReply.value(call_step(Query(query="a")), prompt_tokens=100, cached_tokens=40),
        FakeReply.value(done_step(), prompt_tokens=100, cached_tokens=60),
    )
    result = await run_tool_loop(caller, Searcher(), corpus_search, "ctx", FAST)
    assert result.outcome is Outcome.APPLIED
    assert wire.cached_counts() == [40, 60]
    assert result.usage.cached_input_tokens == 100
    assert result.usage.input_tokens == sum(given for given, _ in wire.usage_blocks())


# --- text replies ------------------------------------------------------------------------------------


async def test_complete_text_returns_prose_with_its_usage(wire: Wire, caller: Caller) -> None:
    """complete_text returns the reply's text and the usage the server reported."""
    wire.server.add(FakeReply.text("Otters hold hands.", prompt_tokens=12, completion_tokens=4))
    completion = await caller.complete_text(request())
    assert completion.text == "Otters hold hands."
    ((given, taken),) = wire.usage_blocks()
    assert (completion.usage.requests, completion.usage.input_tokens, completion.usage.output_tokens) == (1, given, 4)
    assert (given >= 12, taken) == (True, 4)


async def test_complete_text_maps_errors_like_complete(wire: Wire, caller: Caller) -> None:
    """429 is Throttled and a cut-off text is a Truncated carrying the text, as for complete."""
    wire.server.add(FakeReply.error(429), FakeReply.truncated("Otters ho"))
    with pytest.raises(Throttled):
        await caller.complete_text(request())
    with pytest.raises(Truncated, match="cut off") as cut:
        await caller.complete_text(request())
    assert (cut.value.raw, cut.value.usage is not None and cut.value.usage.requests) == ("Otters ho", 1)
