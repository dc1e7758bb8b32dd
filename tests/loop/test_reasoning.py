"""Reasoning settings and usage details: `RoleSpec.reasoning` and `extra_body` reach the caller, the detail counts of
`Usage` add up over the run, and the reasoning a server returns is kept on the round's record and in the state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from agentkit import (
    ContextWindow,
    LoopConfig,
    PriorCall,
    Prompt,
    RoleSpec,
    RoundInfo,
    RunCheckpoint,
    StopReason,
    StructuredRequest,
    Tier,
    ToolRoundInfo,
    Usage,
    run_once_text,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit.errors import ResumeRefused, UsageError
from agentkit.journal import Journal, JournalObserver
from agentkit.providers import Reasoning
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Doc, Query, delete, search

counts = st.integers(0, 10**9)
usages = st.builds(
    Usage,
    requests=counts,
    input_tokens=counts,
    output_tokens=counts,
    cached_input_tokens=counts,
    cache_write_tokens=counts,
    reasoning_tokens=counts,
)


@given(a=usages, b=usages)
def test_usage_adds_every_count(a: Usage, b: Usage) -> None:
    """`+` sums each count, the detail counts included, field by field."""
    total = a + b
    for name in ("requests", "input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens"):
        assert getattr(total, name) == getattr(a, name) + getattr(b, name)
    assert total.reasoning_tokens == a.reasoning_tokens + b.reasoning_tokens


def detailed(cached: int, reasoning: int) -> Usage:
    return Usage(requests=1, input_tokens=100, output_tokens=50, cached_input_tokens=cached, reasoning_tokens=reasoning)


class Thinker:
    """An executor whose role asks for reasoning and passes a provider parameter."""

    def role(self) -> RoleSpec:
        return RoleSpec(
            model="thinker",
            reasoning=Reasoning(effort="low"),
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="find", dynamic=f"{ctx} {info.round}")


async def test_the_roles_reasoning_and_extra_body_reach_every_request() -> None:
    """The role's `reasoning` and `extra_body` are on each request the caller gets."""
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    await run_tool_loop(caller, Thinker(), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert [r.reasoning for r in caller.requests] == [Reasoning(effort="low")] * 2
    assert [r.extra_body for r in caller.requests] == [{"chat_template_kwargs": {"enable_thinking": False}}] * 2


async def test_usage_details_and_reasoning_are_kept_per_round_and_summed() -> None:
    """Cached and reasoning tokens add up over the run; the reasoning a reply carried is on its round's record and
    in the state's entry."""
    caller = ScriptedCaller(
        [
            ScriptedReply(value=call_step(Query(query="a")), usage=detailed(80, 30), reasoning="look for a"),
            ScriptedReply(value=done_step(), usage=detailed(90, 0)),
        ]
    )
    result = await run_tool_loop(caller, Thinker(), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.usage == Usage(
        requests=2, input_tokens=200, output_tokens=100, cached_input_tokens=170, reasoning_tokens=30
    )
    assert [r.reasoning for r in result.trace] == ["look for a", None]
    assert [r.usage for r in result.trace] == [detailed(80, 30), detailed(90, 0)]
    assert result.checkpoint.usage == result.usage
    assert [getattr(e, "reasoning", None) for e in result.checkpoint.entries][:2] == ["look for a", None]
    result.checkpoint.verify()


async def test_a_states_usage_details_and_reasoning_are_digested() -> None:
    """A state whose detail counts or reasoning were edited by hand no longer verifies."""
    caller = ScriptedCaller([ScriptedReply(value=done_step(), usage=detailed(80, 30), reasoning="done")])
    result = await run_tool_loop(caller, Thinker(), search, "ctx", LoopConfig(retry=NO_WAIT))
    for name, value in (("cached_input_tokens", 0), ("reasoning_tokens", 1), ("reasoning", "other")):
        data = json.loads(result.checkpoint.model_dump_json())
        data["entries"][0][name] = value
        with pytest.raises(ResumeRefused, match="does not match its digests"):
            RunCheckpoint.model_validate_json(json.dumps(data)).verify()


def test_a_state_recorded_before_the_usage_details_reads_with_them_zero_and_verifies() -> None:
    """A state written before the detail counts existed reads them as 0 and no reasoning, and still verifies."""
    old = RunCheckpoint.model_validate_json(
        (Path(__file__).parents[1] / "state" / "states" / "proposed-before-same.json").read_text()
    )
    old.verify()
    assert old.usage.cached_input_tokens == old.usage.cache_write_tokens == old.usage.reasoning_tokens == 0
    assert old.usage.requests > 0


async def test_usage_details_survive_the_journal_and_a_resume(journal: Journal) -> None:
    """A run stopped at a proposal and resumed from the journal keeps its first leg's detail counts and reasoning."""
    first = ScriptedCaller(
        [ScriptedReply(value=call_step(Query(query="x"), tool="delete"), usage=detailed(60, 20), reasoning="wipe")]
    )
    with JournalObserver(journal) as observer:
        config = LoopConfig(retry=NO_WAIT, autonomy=Tier.READ_ONLY)
        stopped = await run_tool_loop_tiered(first, Thinker(), [search, delete], "ctx", config, observer=observer)
    assert stopped.stop_reason is StopReason.PROPOSED
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", reason="no")
    second = ScriptedCaller([ScriptedReply(value=done_step(), usage=detailed(10, 5))])
    resumed = await journal.resume(stopped.run_id, second, Thinker(), [search, delete], "ctx")
    assert resumed.usage == Usage(
        requests=2, input_tokens=200, output_tokens=100, cached_input_tokens=70, reasoning_tokens=25
    )
    assert resumed.checkpoint.entries[0].reasoning == "wipe"  # type: ignore[union-attr]  # the first entry is a round


def test_a_request_with_reasoning_and_extra_body_round_trips_as_json() -> None:
    """`TypeAdapter(StructuredRequest)` (a request as a Temporal payload) dumps and reads back the new fields."""
    adapter = TypeAdapter(StructuredRequest)
    request = StructuredRequest(
        model="m",
        system="s",
        dynamic="d",
        reasoning=Reasoning(effort="high", budget_tokens=2048),
        extra_body={"a": [1]},
    )
    assert adapter.validate_json(adapter.dump_json(request)) == request
    assert TypeAdapter(RoleSpec).validate_python({"model": "m", "reasoning": {"effort": "off"}}).reasoning == Reasoning(
        effort="off"
    )


def test_reasoning_and_extra_body_are_checked() -> None:
    """A bad effort, budget or extra body is refused when the value is made, naming the field."""
    with pytest.raises(UsageError, match=r"Reasoning.effort must be one of"):
        Reasoning(effort="max")  # type: ignore[arg-type]  # what a typo would be
    with pytest.raises(UsageError, match=r"budget_tokens must be an int >= 1"):
        Reasoning(budget_tokens=0)
    with pytest.raises(UsageError, match=r"takes no budget_tokens"):
        Reasoning(effort="off", budget_tokens=1024)
    with pytest.raises(UsageError, match=r"RoleSpec.reasoning must be a Reasoning"):
        RoleSpec(model="m", reasoning="high")  # type: ignore[arg-type]  # a plain string instead of the value
    with pytest.raises(UsageError, match=r"RoleSpec.extra_body must hold JSON values only"):
        RoleSpec(model="m", extra_body={"when": object()})  # type: ignore[dict-item]  # not JSON
    with pytest.raises(UsageError, match=r"RoleSpec.extra_body must hold JSON values only"):
        RoleSpec(model="m", extra_body={"top_k": float("nan")})
    with pytest.raises(UsageError, match=r"RoleSpec.extra_body may not set 'stream': whether a call streams"):
        RoleSpec(model="m", extra_body={"stream": True})  # the reply would be read as a body
    with pytest.raises(UsageError, match=r"may not set 'stream_options'"):
        RoleSpec(model="m", extra_body={"stream_options": {"include_usage": True}})
    assert Reasoning(effort="off").off
    assert not Reasoning(effort="low").off


def test_extra_body_is_a_copy_its_giver_cannot_change() -> None:
    """Changing the dict given as `extra_body`, at any depth, afterwards changes nothing a role or request holds."""
    body: dict[str, Any] = {"metadata": {"user_id": "u"}, "stop": [{"at": "x"}]}
    role = RoleSpec(model="m", extra_body=body)
    request = StructuredRequest(model="m", system="s", extra_body=body)
    body["stream"] = True
    body["metadata"]["user_id"] = "someone else"
    body["stop"][0]["at"] = "y"
    assert role.extra_body == request.extra_body == {"metadata": {"user_id": "u"}, "stop": [{"at": "x"}]}


def test_extra_body_keys_must_be_str_at_every_level() -> None:
    """A key that is not a `str`, however deep (JSON would turn it into a string silently), is refused, named."""
    with pytest.raises(UsageError, match=r"RoleSpec.extra_body\['a'\] .*key 1 \(int\) is not a str"):
        RoleSpec(model="m", extra_body={"a": {1: 2}})  # type: ignore[dict-item]  # an int key, as a typo would be
    with pytest.raises(UsageError, match=r"RoleSpec.extra_body\['a'\]\[0\] .*key None"):
        RoleSpec(model="m", extra_body={"a": [{None: 2}]})  # type: ignore[dict-item]  # a None key


def test_a_request_made_directly_is_checked_as_its_role_would_be() -> None:
    """`StructuredRequest(...)` refuses what `RoleSpec(...)` does: its own `__post_init__` skips no check."""
    with pytest.raises(UsageError, match=r"may not set 'stream'"):
        StructuredRequest(model="m", system="s", extra_body={"stream": True})
    with pytest.raises(UsageError, match=r"RoleSpec.reasoning must be a Reasoning"):
        StructuredRequest(model="m", system="s", reasoning="high")  # type: ignore[arg-type]  # a plain string
    assert StructuredRequest(model="m", system="s", parts=("a", "b")).dynamic == "ab"


class Summariser:
    def role(self) -> RoleSpec:
        return RoleSpec(model="summariser")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Summarise.", dynamic=ctx)


async def test_the_summarizers_model_calls_are_counted_in_the_run() -> None:
    """A `ContextWindow` summarizer that asks a model through agentkit (`run_once_text`) spends the run's tokens:
    its usage is in `result.usage`, in the round whose window it made and in the state (so a resume keeps it)."""
    said = Usage(requests=1, input_tokens=300, output_tokens=20, cached_input_tokens=100)

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        told = ScriptedCaller([ScriptedReply(value="searched a and b", usage=said)])
        return (await run_once_text(told, Summariser(), str(len(calls)))).unwrap()

    step = Usage(requests=1, input_tokens=10, output_tokens=1)
    script = [ScriptedReply(value=call_step(Query(query=q)), usage=step) for q in "abc"]
    caller = ScriptedCaller([*script, ScriptedReply(value=done_step(), usage=step)])
    config = LoopConfig(retry=NO_WAIT, context=ContextWindow(last=1, summarize=summarize))
    result = await run_tool_loop(caller, Thinker(), search, "ctx", config)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    summaries = sum(1 for record in result.trace if record.usage.requests == 2)
    assert summaries == 2  # rounds 3 and 4 each left one more call out of the window
    assert result.usage == Usage(requests=4, input_tokens=40, output_tokens=4) + said + said
    assert sum((record.usage for record in result.trace), Usage()) == result.usage
    assert result.checkpoint.usage == result.usage


async def test_the_token_budget_counts_the_summarizers_calls() -> None:
    """The budget sees the summarizer's tokens: a run whose summarizer spends them stops BUDGET_EXHAUSTED sooner."""

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        told = ScriptedCaller([ScriptedReply(value="s", usage=Usage(requests=1, input_tokens=1000))])
        return (await run_once_text(told, Summariser(), "x")).unwrap()

    step = Usage(requests=1, input_tokens=10)
    caller = ScriptedCaller([ScriptedReply(value=call_step(Query(query=q)), usage=step) for q in "abcdef"])
    window = ContextWindow(last=1, summarize=summarize)
    result = await run_tool_loop(
        caller, Thinker(), search, "ctx", LoopConfig(retry=NO_WAIT, context=window, token_budget=1500, max_rounds=6)
    )
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert result.rounds == 3
