"""Usage accounting: summed over rounds, retries and fallbacks, per round in the trace, and the token budget."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit import LoopConfig, Outcome, RetryPolicy, RoleSpec, StopReason, Usage, run_tool_loop
from agentkit.errors import ProviderError, Throttled, UsageError
from agentkit.events import LLMCallFinished
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Doc, Finder, Query, Recorder, search


def used(input_tokens: int, output_tokens: int = 0) -> Usage:
    return Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens)


def reply(value: dict[str, Any] | BaseException, input_tokens: int, output_tokens: int = 0) -> ScriptedReply:
    return ScriptedReply(value=value, usage=used(input_tokens, output_tokens))


class WithFallback(Finder):
    def role(self) -> RoleSpec:
        return RoleSpec(model="exec-model", fallback_model="backup-model")


async def test_usage_is_summed_over_rounds_and_kept_per_round() -> None:
    """The result's usage is the sum of every round's; each round's usage is in the trace."""
    caller = ScriptedCaller(
        [
            reply(call_step(Query(query="a")), 100, 10),
            reply(call_step(Query(query="b")), 150, 20),
            reply(done_step(), 200, 5),
        ]
    )
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert result.usage == Usage(requests=3, input_tokens=450, output_tokens=35)
    assert [record.usage for record in result.trace] == [used(100, 10), used(150, 20), used(200, 5)]
    assert result.usage.total_tokens == 485


async def test_retries_and_fallback_are_counted() -> None:
    """Failed attempts, re-asks and the fallback all count, in the round and in the run."""
    caller = ScriptedCaller(
        [
            reply(ProviderError("503", transient=True, status=503), 30, 0),
            reply({"done": "not a bool", "call": 3}, 40, 7),
            reply(call_step(Query(query="a")), 50, 9),
            reply(done_step(), 60, 1),
        ]
    )
    recorder = Recorder()
    result = await run_tool_loop(caller, WithFallback(), search, "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert [record.usage for record in result.trace] == [
        Usage(requests=3, input_tokens=120, output_tokens=16),
        used(60, 1),
    ]
    assert result.usage == Usage(requests=4, input_tokens=180, output_tokens=17)
    calls = [event for event in recorder.events if isinstance(event, LLMCallFinished)]
    assert [(c.model, c.usage) for c in calls] == [
        ("exec-model", used(30)),
        ("exec-model", used(40, 7)),
        ("backup-model", used(50, 9)),
        ("exec-model", used(60, 1)),
    ]


async def test_a_failed_call_still_counts() -> None:
    """A call that fails after every attempt ends LLM_ERROR with all its attempts' usage."""
    caller = ScriptedCaller([reply(ProviderError("503", transient=True), 11, 1)] * 3)
    result = await run_tool_loop(caller, WithFallback(), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert result.stop_reason is StopReason.LLM_ERROR
    assert result.usage == Usage(requests=3, input_tokens=33, output_tokens=3)
    assert result.trace[-1].usage == result.usage


async def test_a_throttled_call_still_counts() -> None:
    """A throttle after a successful round keeps both rounds' usage."""
    caller = ScriptedCaller([reply(call_step(Query(query="a")), 10), reply(Throttled(), 4)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert result.stop_reason is StopReason.THROTTLED
    assert result.usage == Usage(requests=2, input_tokens=14)
    assert result.items == [Doc(id="a1"), Doc(id="a2")]


async def test_budget_stops_before_the_call_that_would_exceed_it() -> None:
    """With 100 tokens a round and a budget of 250, the third call is never made; items are kept."""
    caller = ScriptedCaller([reply(call_step(Query(query="a")), 100), reply(call_step(Query(query="b")), 100)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(token_budget=250, retry=NO_WAIT))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.BUDGET_EXHAUSTED)
    assert len(caller.requests) == 2
    assert result.rounds == 2
    assert result.items == [Doc(id="a1"), Doc(id="a2"), Doc(id="b1"), Doc(id="b2")]
    assert result.usage.total_tokens == 200
    assert result.error is None


async def test_budget_that_fits_exactly_lets_the_call_run() -> None:
    """A call whose estimate lands exactly on the budget still runs."""
    caller = ScriptedCaller([reply(call_step(Query(query="a")), 100), reply(call_step(Query(query="b")), 100)])
    caller.add(reply(done_step(), 100))
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(token_budget=300, retry=NO_WAIT))
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.usage.total_tokens == 300
    caller.assert_complete()


async def test_budget_estimates_the_next_call_by_the_largest_round() -> None:
    """A costly round followed by a cheap one: the next call is estimated at the costly round's size."""
    caller = ScriptedCaller([reply(call_step(Query(query="a")), 100), reply(call_step(Query(query="b")), 10)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(token_budget=200, retry=NO_WAIT))
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert len(caller.requests) == 2


async def test_budget_stop_with_nothing_gathered_is_silent() -> None:
    """A budget stop before any item was gathered is SILENT, not an error."""
    caller = ScriptedCaller([reply(call_step(Query(query="retry")), 80)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(token_budget=100, retry=NO_WAIT))
    assert (result.outcome, result.stop_reason, result.items) == (Outcome.SILENT, StopReason.BUDGET_EXHAUSTED, [])


async def test_budget_counts_a_round_with_its_retries() -> None:
    """A round that needed a re-ask is estimated with its retry, so the budget stops sooner."""
    caller = ScriptedCaller([reply({"done": "bad"}, 60), reply(call_step(Query(query="a")), 60)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", LoopConfig(token_budget=200, retry=NO_WAIT))
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert result.usage == Usage(requests=2, input_tokens=120)
    assert len(caller.requests) == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 500), st.integers(0, 500), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
async def test_run_usage_equals_the_sum_of_rounds_and_of_attempts(script: list[tuple[int, int, bool]]) -> None:
    """For any script, result usage == sum of the trace's round usage == sum of reported attempts."""
    entries: list[ScriptedReply] = []
    for index, (input_tokens, output_tokens, invalid_first) in enumerate(script):
        if invalid_first:
            entries.append(reply({"done": "bad"}, output_tokens, input_tokens))
        entries.append(reply(call_step(Query(query=f"q{index}")), input_tokens, output_tokens))
    entries.append(reply(done_step(), 1, 1))
    recorder = Recorder()
    result = await run_tool_loop(
        ScriptedCaller(entries),
        Finder(),
        search,
        "ctx",
        LoopConfig(max_rounds=None, retry=NO_WAIT),
        observer=recorder,
    )
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    by_rounds = sum((record.usage for record in result.trace), Usage())
    by_attempts = sum((e.usage for e in recorder.events if isinstance(e, LLMCallFinished)), Usage())
    assert result.usage == by_rounds == by_attempts
    assert result.usage.requests == len(entries)


async def test_usage_of_attempts_before_a_deadline_is_kept() -> None:
    """A deadline hit while waiting to retry still counts the failed attempt's tokens."""
    slow_retry = RetryPolicy(wait_initial=5, wait_max=5)
    caller = ScriptedCaller([reply(ProviderError("503", transient=True), 50, 5)])
    recorder = Recorder()
    result = await run_tool_loop(
        caller, Finder(), search, "ctx", LoopConfig(deadline=0.2, retry=slow_retry), observer=recorder
    )
    assert result.stop_reason is StopReason.DEADLINE
    reported = sum((e.usage for e in recorder.events if isinstance(e, LLMCallFinished)), Usage())
    assert reported == used(50, 5)
    assert result.usage == reported


async def test_a_callers_negative_or_fractional_counts_are_refused_naming_the_caller() -> None:
    """A caller that reports a negative count (which would lift a budget) or a float one, on a reply or on a
    failed attempt's error, is a wiring mistake: `UsageError` naming the caller and the count, never a run that
    goes on with them (even where a later attempt's counts would make the round's sum look whole)."""
    failed = ProviderError("down", transient=True)
    failed.usage = Usage(requests=1, input_tokens=-5_000)
    bad: list[list[ScriptedReply | BaseException]] = [
        [ScriptedReply(value=done_step(), usage=Usage(requests=1, input_tokens=-10))],
        [ScriptedReply(value=done_step(), usage=Usage(requests=1, output_tokens=1.5))],  # type: ignore[arg-type]  # a caller's mistake, on purpose
        [failed, reply(done_step(), 10_000)],
    ]
    for script in bad:
        with pytest.raises(UsageError, match=r"model caller ScriptedCaller reported a usage with \w+_tokens=-?[\d.]+"):
            await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", LoopConfig(retry=NO_WAIT))
