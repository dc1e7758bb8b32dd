"""run_tool_loop: every ending is a typed result, items are never lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TypedDict, Unpack

import pytest
from pydantic import BaseModel

from agentkit import (
    LoopConfig,
    Observer,
    Outcome,
    RetryPolicy,
    StopReason,
    Tier,
    ToolRetry,
    UsageError,
    run_tool_loop,
    run_tool_loop_sync,
    tool,
)
from agentkit._results import ToolLoopResult, Usage
from agentkit.errors import ProviderError, Throttled, ToolError, ToolTimeout
from agentkit.events import RunFinished, ToolCallStarted
from agentkit.testing import ScriptedCaller, ScriptedReply, ScriptExhausted, call_step, done_step
from tests.support import NO_WAIT, Executor, Query


class Doc(BaseModel):
    id: str
    text: str = ""


CORPUS = {"a": [Doc(id="a1"), Doc(id="a2")], "b": [Doc(id="b1")], "empty": []}


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Look up documents for a query."""
    if args.query.startswith("bad"):
        raise ToolRetry(f"empty result for {args.query!r}; try a different query")
    if args.query == "boom":
        raise RuntimeError("index offline")
    return CORPUS.get(args.query, [])


class Agent(Executor[Doc]):
    """The executor of these tests: records what it is shown each round."""

    def __init__(self, *, fallback: str | None = None) -> None:
        super().__init__("primary", fallback_model=fallback, prompt_type="retrieval", system="find documents")


class Limits(TypedDict, total=False):
    """The ceilings a test sets; mypy checks each against ``LoopConfig``'s own field."""

    max_rounds: int | None
    token_budget: int | None
    deadline: float | None
    tool_timeout: float | None
    degeneration_window: int


def config(**limits: Unpack[Limits]) -> LoopConfig:
    """A config that never waits between retries, with the test's ceilings."""
    return LoopConfig(retry=NO_WAIT, **limits)


async def test_executor_done_with_items_is_applied() -> None:
    """Done after gathering items ends APPLIED / EXECUTOR_DONE with every batch's items."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b")), done_step("enough")])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert [d.id for d in result.items] == ["a1", "a2", "b1"]
    assert result.rounds == 3
    assert result.error is None
    caller.assert_complete()


async def test_done_with_nothing_gathered_is_silent() -> None:
    """Done on round one with nothing gathered ends SILENT / NOTHING_RETRIEVED."""
    result = await run_tool_loop(ScriptedCaller([done_step()]), Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.NOTHING_RETRIEVED)
    assert result.items == []
    assert result.rounds == 1


async def test_done_after_empty_batches_is_silent() -> None:
    """A search that found nothing, then done, is still SILENT."""
    caller = ScriptedCaller([call_step(Query(query="empty")), done_step()])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.NOTHING_RETRIEVED)


async def test_default_ceiling_is_four_rounds() -> None:
    """Without max_rounds the loop stops after 4 rounds, APPLIED because items were gathered."""
    caller = ScriptedCaller([call_step(Query(query=q)) for q in ("a", "b", "empty", "x", "never")])
    agent = Agent()
    result = await run_tool_loop(caller, agent, search, "q")
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.ROUND_CEILING)
    assert result.rounds == 4
    assert caller.remaining == 1
    assert [i.is_final_round for i in agent.infos] == [False, False, False, True]
    assert agent.infos[0].max_rounds == 4


async def test_ceiling_with_nothing_gathered_is_silent() -> None:
    """The ceiling follows the same items rule as done: nothing gathered is SILENT, not forced APPLIED."""
    caller = ScriptedCaller([call_step(Query(query=q)) for q in ("empty", "x")])
    result = await run_tool_loop(caller, Agent(), search, "q", config(max_rounds=2))
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.ROUND_CEILING)


async def test_explicit_none_means_unlimited_rounds() -> None:
    """max_rounds=None runs past the default ceiling until the executor says done."""
    steps: list[object] = [call_step(Query(query=f"q{i}")) for i in range(7)] + [done_step()]
    caller = ScriptedCaller(steps)  # type: ignore[arg-type]  # list[object] holds only dict steps here
    agent = Agent()
    result = await run_tool_loop(caller, agent, search, "q", config(max_rounds=None, degeneration_window=1))
    assert result.rounds == 8
    assert result.stop_reason is StopReason.NOTHING_RETRIEVED
    assert agent.infos[-1].max_rounds is None
    assert not any(i.is_final_round for i in agent.infos)


@pytest.mark.parametrize("bad", [0, -1])
def test_non_positive_ceiling_is_usage_error(bad: int) -> None:
    """max_rounds of 0 or below is a wiring mistake, refused when the config is built."""
    with pytest.raises(UsageError, match="max_rounds"):
        LoopConfig(max_rounds=bad)


async def test_immediate_repeat_is_stalemate() -> None:
    """The same call twice in a row ends STALEMATE / DEGENERATION, keeping the first batch."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="a"))])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert [d.id for d in result.items] == ["a1", "a2"]
    assert result.rounds == 2
    assert result.trace[-1].executed is False


async def test_short_cycle_is_stalemate() -> None:
    """An A, B, A cycle is caught within the window before the tool runs again."""
    caller = ScriptedCaller([call_step(Query(query=q)) for q in ("a", "b", "a")])
    calls: list[str] = []

    @tool(tier=Tier.READ_ONLY)
    def counting(args: Query) -> list[Doc]:
        """Count calls."""
        calls.append(args.query)
        return [Doc(id=args.query)]

    result = await run_tool_loop(caller, Agent(), counting, "q", config())
    assert result.stop_reason is StopReason.DEGENERATION
    assert calls == ["a", "b"]


async def test_repeat_outside_window_is_allowed() -> None:
    """With a window of one, only an immediate repeat counts; A, B, A runs three times."""
    caller = ScriptedCaller([call_step(Query(query=q)) for q in ("a", "b", "a")] + [done_step()])
    result = await run_tool_loop(caller, Agent(), search, "q", config(degeneration_window=1))
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert len(result.items) == 5


async def test_custom_comparator_replaces_default() -> None:
    """A case- and whitespace-insensitive comparator treats 'A ' and 'a' as the same call."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query=" A "))])

    def loose(x: Query, y: Query) -> bool:
        return x.query.strip().lower() == y.query.strip().lower()

    result = await run_tool_loop(caller, Agent(), search, "q", config(), same=loose)
    assert result.stop_reason is StopReason.DEGENERATION


async def test_llm_failure_is_error_and_keeps_items() -> None:
    """A model failure after retries ends ERROR / LLM_ERROR with the items gathered before it."""
    failure = ProviderError("bad request", status=400)
    caller = ScriptedCaller([call_step(Query(query="a")), failure])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert result.error is failure
    assert [d.id for d in result.items] == ["a1", "a2"]


async def test_throttle_is_error_with_throttled_attached() -> None:
    """HTTP 429 ends ERROR / THROTTLED after one request, with the Throttled error attached."""
    caller = ScriptedCaller([call_step(Query(query="b")), Throttled(retry_after=3.0)])
    result = await run_tool_loop(caller, Agent(fallback="backup"), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    assert isinstance(result.error, Throttled)
    assert result.error.retry_after == 3.0
    assert len(caller.requests) == 2
    assert [d.id for d in result.items] == ["b1"]


async def test_tool_exception_is_error_naming_tool() -> None:
    """A tool that raises ends ERROR / TOOL_ERROR; the error names the tool and keeps the cause."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="boom"))])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert isinstance(result.error, ToolError)
    assert result.error.tool_name == "search"
    assert "search" in str(result.error)
    assert isinstance(result.error.__cause__, RuntimeError)
    assert [d.id for d in result.items] == ["a1", "a2"]


async def test_tool_retry_becomes_observation_and_loop_goes_on() -> None:
    """ToolRetry's message reaches the next round as that call's observation; the round counts."""
    caller = ScriptedCaller([call_step(Query(query="bad")), call_step(Query(query="a")), done_step()])
    agent = Agent()
    result = await run_tool_loop(caller, agent, search, "q", config())
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.rounds == 3
    second = agent.infos[1]
    assert second.prior_calls[0].observation == "empty result for 'bad'; try a different query"
    assert second.prior_results == ()
    assert result.trace[0].observation is not None


async def test_tool_retry_rounds_count_toward_ceiling() -> None:
    """A loop of retried calls still stops at the ceiling."""
    caller = ScriptedCaller([call_step(Query(query="bad1")), call_step(Query(query="bad2"))])
    result = await run_tool_loop(caller, Agent(), search, "q", config(max_rounds=2))
    assert (result.outcome, result.stop_reason) == (Outcome.SILENT, StopReason.ROUND_CEILING)
    assert result.rounds == 2
    assert [r.observation is not None for r in result.trace] == [True, True]


async def test_prior_results_are_one_batch_per_executed_call() -> None:
    """The executor sees each executed call's batch, in order."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b")), done_step()])
    agent = Agent()
    await run_tool_loop(caller, agent, search, "q", config())
    assert [[d.id for d in batch] for batch in agent.infos[2].prior_results] == [["a1", "a2"], ["b1"]]


async def test_tool_timeout_is_tool_error() -> None:
    """A tool running past tool_timeout ends ERROR / TOOL_ERROR with a ToolTimeout."""

    @tool(tier=Tier.READ_ONLY)
    async def slow(args: Query) -> list[Doc]:
        """Never answers in time."""
        await asyncio.sleep(10)
        return []

    caller = ScriptedCaller([call_step(Query(query="a"))])
    result = await run_tool_loop(caller, Agent(), slow, "q", config(tool_timeout=0.01))
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolTimeout)


async def test_deadline_stops_with_items() -> None:
    """A run past its deadline ends DEADLINE, keeping what it gathered before."""

    @tool(tier=Tier.READ_ONLY)
    async def first_fast(args: Query) -> list[Doc]:
        """Answers the first query at once, then hangs."""
        if args.query != "a":
            await asyncio.sleep(3600)
        return [Doc(id=args.query)]

    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b"))])
    result = await run_tool_loop(caller, Agent(), first_fast, "q", config(deadline=0.3))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.DEADLINE)
    assert [d.id for d in result.items] == ["a"]
    assert result.rounds == 2


async def test_token_budget_stops_before_exceeding_call() -> None:
    """The loop stops before a call that would push usage past the token budget, with items kept."""
    used = Usage(requests=1, input_tokens=40, output_tokens=10)
    caller = ScriptedCaller(
        [ScriptedReply(value=call_step(Query(query="a")), usage=used), ScriptedReply(value=done_step(), usage=used)]
    )
    result = await run_tool_loop(caller, Agent(), search, "q", config(token_budget=80))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.BUDGET_EXHAUSTED)
    assert result.rounds == 1
    assert result.usage.total_tokens == 50
    assert caller.remaining == 1


async def test_cancellation_propagates() -> None:
    """Cancelling the task running the loop raises CancelledError; it is never swallowed."""
    started = asyncio.Event()

    @tool(tier=Tier.READ_ONLY)
    async def hanging(args: Query) -> list[Doc]:
        """Waits forever."""
        started.set()
        await asyncio.sleep(3600)
        return []

    caller = ScriptedCaller([call_step(Query(query="a"))])
    task = asyncio.create_task(run_tool_loop(caller, Agent(), hanging, "q", config(tool_timeout=60)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_invalid_step_is_reasked_then_errors() -> None:
    """done=false with no call fails validation, is retried with the error text, then ends LLM_ERROR."""
    invalid = '{"rationale": "", "done": false}'
    caller = ScriptedCaller([invalid, invalid])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert result.stop_reason is StopReason.LLM_ERROR
    assert caller.requests[0].reask is None
    assert caller.requests[1].reask is not None
    assert "must carry a call" in caller.requests[1].reask


async def test_usage_is_summed_over_rounds_and_failures() -> None:
    """Usage sums every round, failed attempts included."""
    spend = Usage(requests=1, input_tokens=10, output_tokens=2)
    transient = ProviderError("upstream 502", transient=True, status=502)
    transient.usage = Usage(requests=1, input_tokens=10)
    caller = ScriptedCaller(
        [
            ScriptedReply(value=call_step(Query(query="a")), usage=spend),
            transient,
            ScriptedReply(value=done_step(), usage=spend),
        ]
    )
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    assert result.usage == Usage(requests=3, input_tokens=30, output_tokens=4)
    assert [r.usage for r in result.trace] == [spend, Usage(requests=2, input_tokens=20, output_tokens=2)]


async def test_trace_records_each_round() -> None:
    """The trace has one record per round with the call, batch size and tool name."""
    caller = ScriptedCaller([call_step(Query(query="a"), rationale="first look"), done_step("done")])
    result = await run_tool_loop(caller, Agent(), search, "q", config())
    first, last = result.trace
    assert (first.round, first.tool_name, first.batch_size, first.executed) == (1, "search", 2, True)
    assert first.call == Query(query="a")
    assert first.rationale == "first look"
    assert first.tier is Tier.READ_ONLY
    assert (last.round, last.done) == (2, True)


async def test_script_running_dry_raises_usage_error() -> None:
    """A script that runs out is a wiring mistake in the test and raises, not a silent ending."""
    caller = ScriptedCaller([call_step(Query(query="a"))])
    with pytest.raises(ScriptExhausted, match="ran dry"):
        await run_tool_loop(caller, Agent(), search, "q", config())


async def test_mutating_tool_is_refused_by_plain_loop_before_any_model_call() -> None:
    """The plain loop refuses a tool that could not run live, before asking the model anything."""

    @tool(tier=Tier.IRREVERSIBLE)
    def wipe(args: Query) -> Sequence[Doc]:
        """Delete everything."""
        raise AssertionError("never called")

    caller = ScriptedCaller([call_step(Query(query="a"))])
    with pytest.raises(UsageError, match="run_tool_loop_tiered"):
        await run_tool_loop(caller, Agent(), wipe, "q")
    assert caller.requests == []


async def test_reversible_tool_above_lowered_autonomy_is_refused() -> None:
    """With autonomy lowered to read-only, even a reversible tool is refused by the plain loop."""

    @tool(tier=Tier.REVERSIBLE)
    def tag(args: Query) -> list[Doc]:
        """Tag a document."""
        raise AssertionError("never called")

    with pytest.raises(UsageError, match=r"Tier\.REVERSIBLE"):
        await run_tool_loop(ScriptedCaller([]), Agent(), tag, "q", LoopConfig(autonomy=Tier.READ_ONLY))


async def test_tool_without_tier_is_never_called() -> None:
    """A tool that declares no tier ends ERROR / TOOL_DECLARES_NO_TIER naming the four tiers; no model call."""

    class Untiered:
        name = "untiered"
        description = "no tier"
        args_type = Query
        called = False

        async def call(self, args: Query) -> list[Doc]:
            self.called = True
            return []

    untiered = Untiered()
    caller = ScriptedCaller([call_step(Query(query="a"))])
    result = await run_tool_loop(caller, Agent(), untiered, "q")  # type: ignore[arg-type]  # the point: no tier
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)
    assert "untiered" in str(result.error)
    assert "Tier.READ_ONLY, Tier.REVERSIBLE, Tier.EXTERNAL_REVERSIBLE, Tier.IRREVERSIBLE" in str(result.error)
    assert untiered.called is False
    assert caller.requests == []


async def test_request_carries_role_and_prompt() -> None:
    """Each request carries the role's model settings and the rendered prompt."""
    caller = ScriptedCaller([done_step()])
    await run_tool_loop(caller, Agent(fallback="backup"), search, "ctx", config())
    request = caller.requests[0]
    assert (request.model, request.fallback_model, request.prompt_type) == ("primary", "backup", "retrieval")
    assert (request.system, request.dynamic) == ("find documents", "ctx round 1")


def test_sync_wrapper_runs_the_loop() -> None:
    """run_tool_loop_sync runs the loop to completion from synchronous code."""
    result = run_tool_loop_sync(ScriptedCaller([call_step(Query(query="b")), done_step()]), Agent(), search, "q")
    assert [d.id for d in result.items] == ["b1"]


async def test_raise_for_error_raises_the_attached_error() -> None:
    """raise_for_error re-raises the attached error, and returns the result when there is none."""
    failure = ProviderError("nope", status=401)
    errored = await run_tool_loop(ScriptedCaller([failure]), Agent(), search, "q", config())
    with pytest.raises(ProviderError, match="nope"):
        errored.raise_for_error()
    ok = await run_tool_loop(ScriptedCaller([done_step()]), Agent(), search, "q", config())
    assert ok.raise_for_error() is ok


async def test_tool_returning_non_sequence_is_tool_error() -> None:
    """A tool that returns something other than a batch ends TOOL_ERROR instead of corrupting items."""

    @tool(tier=Tier.READ_ONLY)
    def broken(args: Query) -> list[Doc]:
        """Returns a string by mistake."""
        return "oops"  # type: ignore[return-value]  # the point of the test

    result = await run_tool_loop(ScriptedCaller([call_step(Query(query="a"))]), Agent(), broken, "q", config())
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert result.items == []


async def test_unordered_tool_collection_is_usage_error() -> None:
    """A set of tools has no order for the schema; it is refused with the fix, not mistaken for one tool."""
    with pytest.raises(UsageError, match="list or tuple"):
        await run_tool_loop(ScriptedCaller([]), Agent(), {search}, "q")  # type: ignore[arg-type]  # an unordered set must be refused


async def test_sync_tool_past_its_timeout_is_tool_error() -> None:
    """A sync tool cannot be interrupted, but a result that comes back past the timeout is discarded."""

    @tool(tier=Tier.READ_ONLY)
    def blocking(args: Query) -> list[Doc]:
        """Blocks the event loop."""
        time.sleep(0.2)
        return [Doc(id="late")]

    result = await run_tool_loop(
        ScriptedCaller([call_step(Query(query="a"))]), Agent(), blocking, "q", config(tool_timeout=0.01)
    )
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolTimeout)
    assert result.items == []


async def test_timeout_error_raised_by_the_tool_is_that_tools_failure() -> None:
    """A TimeoutError the tool raises itself (a socket timeout) is a tool error, not the loop's timeout."""

    @tool(tier=Tier.READ_ONLY)
    async def flaky(args: Query) -> list[Doc]:
        """Its backend timed out."""
        raise TimeoutError("backend read timed out")

    result = await run_tool_loop(
        ScriptedCaller([call_step(Query(query="a"))]), Agent(), flaky, "q", config(tool_timeout=5)
    )
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolError)
    assert not isinstance(result.error, ToolTimeout)
    assert isinstance(result.error.__cause__, TimeoutError)


async def test_tool_written_as_a_pydantic_model_is_one_tool() -> None:
    """A Tool implemented as a pydantic model (iterable, but not a sequence of tools) is accepted."""

    class SearchTool(BaseModel):
        name: str = "search"
        description: str = "Search."
        args_type: type[Query] = Query
        tier: Tier = Tier.READ_ONLY

        async def call(self, args: Query) -> list[Doc]:
            return [Doc(id=args.query)]

    caller = ScriptedCaller([call_step(Query(query="x")), done_step()])
    result = await run_tool_loop(caller, Agent(), SearchTool(), "q", config())
    assert [d.id for d in result.items] == ["x"]


async def test_observer_cannot_change_the_call_or_the_result() -> None:
    """An observer that edits what it is shown changes neither the call that runs nor what the caller gets."""
    seen: list[str] = []

    @tool(tier=Tier.READ_ONLY)
    def recording(args: Query) -> list[Doc]:
        """Records the query it ran with."""
        seen.append(args.query)
        return [Doc(id=args.query)]

    class Meddler(Observer):
        def on_tool_call(self, event: ToolCallStarted) -> None:
            event.args.query = "MUTATED"  # type: ignore[attr-defined]  # the point of the test

        def on_run_end(self, event: RunFinished) -> None:
            assert isinstance(event.result, ToolLoopResult)
            event.result.items.clear()

    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Agent(), recording, "q", config(), observer=Meddler())
    assert seen == ["a"]
    assert [d.id for d in result.items] == ["a"]


def test_config_and_policy_refuse_nonsense() -> None:
    """A fractional ceiling or a policy with no attempts is a wiring mistake, refused at construction."""
    with pytest.raises(UsageError, match="max_rounds"):
        LoopConfig(max_rounds=2.5)  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(UsageError, match="primary_attempts"):
        RetryPolicy(primary_attempts=0)
    with pytest.raises(UsageError, match="fallback_attempts"):
        RetryPolicy(fallback_attempts=-1)
