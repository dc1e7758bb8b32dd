"""ScriptedCaller: validates like a real reply, records requests, fails loudly."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, StructuredRequest, Tier, Usage, UsageError, run_tool_loop
from agentkit._step import build_step_model
from agentkit.errors import ProviderError, StructuredOutputError
from agentkit.testing import ScriptedCaller, ScriptedReply, ScriptExhausted, call_step, done_step
from tests.support import Doc, Executor, Query, Recording

REQUEST = StructuredRequest(system="s", dynamic="d", model="m")


class Out(BaseModel):
    n: int


class Other(BaseModel):
    n: int


async def test_entries_of_each_kind_validate_against_schema() -> None:
    """A model instance, a dict and raw JSON all come back as the requested schema."""
    caller = ScriptedCaller([Out(n=1), {"n": 2}, '{"n": 3}', Other(n=4)])
    values = [(await caller.complete(REQUEST, Out)).value for _ in range(4)]
    assert values == [Out(n=1), Out(n=2), Out(n=3), Out(n=4)]


async def test_invalid_entry_fails_validation_like_a_real_reply() -> None:
    """An entry that does not match the schema raises StructuredOutputError with the raw text."""
    caller = ScriptedCaller(['{"n": "x"}'])
    with pytest.raises(StructuredOutputError) as raised:
        await caller.complete(REQUEST, Out)
    assert raised.value.raw == '{"n": "x"}'
    assert raised.value.usage == Usage(requests=1)


async def test_exception_entry_is_raised_and_request_recorded() -> None:
    """An exception entry is raised; its request is still recorded, with one request of usage."""
    caller = ScriptedCaller([ProviderError("down", transient=True)])
    with pytest.raises(ProviderError) as raised:
        await caller.complete(REQUEST, Out)
    assert caller.requests == [REQUEST]
    assert raised.value.usage == Usage(requests=1)


async def test_scripted_reply_carries_usage_and_model() -> None:
    """A ScriptedReply reports its own usage and model."""
    caller = ScriptedCaller([ScriptedReply(value={"n": 1}, usage=Usage(requests=1, input_tokens=5), model="x")])
    completion = await caller.complete(REQUEST, Out)
    assert (completion.usage.input_tokens, completion.model) == (5, "x")


async def test_default_usage_is_one_request_no_tokens() -> None:
    """Each plain entry reports one request and zero tokens; the model is the request's."""
    completion = await ScriptedCaller([{"n": 1}]).complete(REQUEST, Out)
    assert completion.usage == Usage(requests=1)
    assert completion.model == "m"


async def test_running_dry_raises_clear_error() -> None:
    """A call past the end of the script raises ScriptExhausted naming the request number."""
    caller = ScriptedCaller([])
    with pytest.raises(ScriptExhausted, match="request 1"):
        await caller.complete(REQUEST, Out)


async def test_assert_complete_fails_on_unused_entries() -> None:
    """assert_complete fails while entries remain, and passes once all are used."""
    caller = ScriptedCaller([{"n": 1}])
    with pytest.raises(AssertionError, match="1 scripted reply never used"):
        caller.assert_complete()
    await caller.complete(REQUEST, Out)
    caller.assert_complete()


def test_step_helpers_build_wire_shapes() -> None:
    """call_step builds the bare or tagged call; done_step stops."""
    assert call_step(Out(n=1)) == {"rationale": "", "done": False, "call": {"n": 1}}
    assert call_step({"n": 1}, tool="t")["call"] == {"tool": "t", "args": {"n": 1}}
    assert done_step("why") == {"rationale": "why", "done": True, "call": None}


async def test_a_named_call_in_a_single_tool_loop_is_a_usage_error_naming_the_fix() -> None:
    """call_step(args, tool=...) in a loop given one tool (not a list) raises UsageError, not LLM_ERROR."""
    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(Query(query="a"), tool="search"), done_step()])
    with pytest.raises(UsageError, match=r"tool='search'.*single tool.*call_step\(args\) without tool=.*\[search\]"):
        await run_tool_loop(caller, Executor[Doc](), search, "ctx", LoopConfig())
    assert (len(caller.requests), search.calls) == (1, [])


async def test_a_named_call_still_validates_through_json_first() -> None:
    """The wiring check only names a reply that failed validation; a hand-written reply in that shape stays a
    reply the model got wrong (StructuredOutputError), as it would be on the wire."""
    step = build_step_model(Query)
    with pytest.raises(UsageError, match="single tool"):
        await ScriptedCaller([call_step(Query(query="a"), tool="search")]).complete(REQUEST, step)
    by_hand = {"rationale": "", "done": False, "call": {"tool": "search", "args": {"query": "a"}}}
    with pytest.raises(StructuredOutputError):
        await ScriptedCaller([by_hand]).complete(REQUEST, step)
    named = build_step_model((("search", Query),))
    value = (await ScriptedCaller([call_step(Query(query="a"), tool="search")]).complete(REQUEST, named)).value
    assert value.call is not None
