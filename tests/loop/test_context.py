"""ContextWindow: the executor is shown a bounded part of the earlier calls; the result keeps everything."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import (
    AfterProposal,
    ContextWindow,
    LoopConfig,
    Observer,
    Outcome,
    PriorCall,
    Prompt,
    RepeatPolicy,
    RoleSpec,
    RunCheckpoint,
    StopReason,
    Tier,
    ToolRoundInfo,
    UsageError,
    _tool_threads,
    approve,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._context import Omitted, call_chars
from agentkit.errors import ResumeRefused
from agentkit.events import Event, RoundStarted
from agentkit.prompting import reflective_prompt
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Executor, PathArgs, Query, Recording


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Look a query up: three results per call."""
    return [f"{args.query}-{n}" for n in range(3)]


def searches(*queries: str) -> list[dict[str, Any]]:
    return [call_step(Query(query=q)) for q in queries]


def config(context: ContextWindow | None, **kwargs: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, max_rounds=20, context=context, **kwargs)


async def run(context: ContextWindow | None, queries: Sequence[str], **kwargs: Any) -> tuple[Any, Executor[str]]:
    agent = Executor[str]()
    caller = ScriptedCaller([*searches(*queries), done_step()])
    result = await run_tool_loop(caller, agent, search, "ctx", config(context, **kwargs))
    return result, agent


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"last": 0}, "last"),
        ({"last": -2}, "last"),
        ({"last": True}, "last"),
        ({"last": 1.5}, "last"),
        ({"max_chars": 0}, "max_chars"),
        ({"max_chars": -100}, "max_chars"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 10, "chars_per_token": 0}, "chars_per_token"),
        ({"max_tokens": 10, "chars_per_token": -4.0}, "chars_per_token"),
        ({"max_tokens": 10, "chars_per_token": math.nan}, "chars_per_token"),
        ({"max_tokens": 10, "chars_per_token": math.inf}, "chars_per_token"),
        ({}, "needs a bound"),
        ({"summarize": len}, "needs a bound"),
        ({"last": 2, "summarize": "not a function"}, "summarize"),
    ],
)
def test_bad_window_is_a_usage_error_at_construction(fields: dict[str, Any], named: str) -> None:
    """A bound that is not a whole number >= 1, a bad token ratio, no bound at all, or a summarizer
    that is not a function is refused when the window is built, naming the field."""
    with pytest.raises(UsageError, match=named):
        ContextWindow(**fields)


def test_loop_config_refuses_a_context_that_is_not_a_window() -> None:
    """LoopConfig.context takes a ContextWindow or None; anything else is refused at construction."""
    with pytest.raises(UsageError, match=r"LoopConfig\.context must be a ContextWindow"):
        LoopConfig(context=3)  # type: ignore[arg-type]  # the wrong type is the test
    assert LoopConfig().context is None


async def test_without_a_window_the_executor_sees_every_call() -> None:
    """No context policy (the default): every earlier call is shown and nothing is counted as left out."""
    result, agent = await run(None, ["a", "b", "c", "d"])
    last = agent.infos[-1]
    assert [c.args for c in last.prior_calls] == [Query(query=q) for q in "abcd"]
    assert len(last.prior_results) == 4
    assert last.omitted == Omitted()
    assert not last.omitted
    assert len(result.items) == 12


async def test_last_n_shows_only_the_latest_calls_and_keeps_every_item() -> None:
    """last=2: the executor sees the two latest calls; result.items keeps all of them."""
    result, agent = await run(ContextWindow(last=2), ["a", "b", "c", "d", "e"])
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert len(result.items) == 15
    assert [len(info.prior_calls) for info in agent.infos] == [0, 1, 2, 2, 2, 2]
    last = agent.infos[-1]
    assert [c.args for c in last.prior_calls] == [Query(query="d"), Query(query="e")]
    assert list(last.prior_results) == [("d-0", "d-1", "d-2"), ("e-0", "e-1", "e-2")]


async def test_omitted_counts_the_left_out_calls_batches_items_and_characters() -> None:
    """ToolRoundInfo.omitted says how many calls, batches, items and characters were left out."""
    _, agent = await run(ContextWindow(last=2), ["a", "b", "c", "d", "e"])
    last = agent.infos[-1]
    dropped = [
        PriorCall(round=r, tool_name="search", args=Query(query=q), batch=[f"{q}-{n}" for n in range(3)])
        for r, q in enumerate("abc", 1)
    ]
    assert last.omitted == Omitted(calls=3, batches=3, items=9, chars=sum(call_chars(c) for c in dropped))
    assert agent.infos[2].omitted == Omitted()
    assert agent.infos[3].omitted.calls == 1


async def test_call_without_a_batch_is_not_counted_as_a_left_out_batch() -> None:
    """A refused repeat (no batch) that leaves the window counts as a call, not a batch, and adds no items."""
    _, agent = await run(ContextWindow(last=1), ["a", "a", "b", "c"], on_repeat=RepeatPolicy.REFUSE)
    last = agent.infos[-1]
    assert (last.omitted.calls, last.omitted.batches, last.omitted.items) == (3, 2, 6)
    assert last.prior_calls[0].args == Query(query="c")


def test_call_chars_measures_the_call_its_items_and_its_observation() -> None:
    """call_chars: tool name, a space, the JSON args, each item (pydantic as JSON, else str) and the observation."""
    call = PriorCall(round=1, tool_name="search", args=Query(query="x"), batch=[Query(query="y"), "abc"])
    assert call_chars(call) == len('search {"query":"x"}') + len('{"query":"y"}') + 3
    told: PriorCall[str] = PriorCall(round=2, tool_name="search", args=Query(query="x"), observation="no")
    assert call_chars(told) == len('search {"query":"x"}') + 2


async def test_char_budget_shows_the_latest_calls_that_fit() -> None:
    """max_chars: the latest calls whose sizes sum within the budget are shown; older ones are left out."""
    size = call_chars(PriorCall(round=1, tool_name="search", args=Query(query="a"), batch=["a-0", "a-1", "a-2"]))
    _, agent = await run(ContextWindow(max_chars=2 * size + 1), ["a", "b", "c", "d"])
    last = agent.infos[-1]
    assert [c.args.query for c in last.prior_calls] == ["c", "d"]  # type: ignore[attr-defined]  # Query args
    assert (last.omitted.calls, last.omitted.chars) == (2, 2 * size)


async def test_char_budget_always_shows_the_latest_call() -> None:
    """A latest call over the whole budget is still shown, so the executor sees what its last call returned."""
    _, agent = await run(ContextWindow(max_chars=5), ["a", "b", "c"])
    last = agent.infos[-1]
    assert [c.args.query for c in last.prior_calls] == ["c"]  # type: ignore[attr-defined]  # Query args
    assert last.omitted.calls == 2


async def test_token_budget_is_chars_per_token_times_tokens() -> None:
    """max_tokens is an estimate: the same window as max_chars = max_tokens * chars_per_token."""
    queries = ["alpha", "beta", "gamma", "delta", "epsilon"]
    _, by_chars = await run(ContextWindow(max_chars=90), queries)
    _, by_tokens = await run(ContextWindow(max_tokens=30, chars_per_token=3), queries)
    _, default_ratio = await run(ContextWindow(max_tokens=22), queries)  # 88 characters at 4 a token
    assert [i.omitted for i in by_tokens.infos] == [i.omitted for i in by_chars.infos]
    assert by_chars.infos[-1].omitted.calls > 0
    assert ContextWindow(max_tokens=22).char_limit == 88
    assert default_ratio.infos[-1].omitted.calls >= by_chars.infos[-1].omitted.calls


async def test_the_strictest_bound_decides() -> None:
    """With last= and a character budget, whichever leaves out more decides."""
    _, loose_chars = await run(ContextWindow(last=1, max_chars=10_000), ["a", "b", "c"])
    _, tight_chars = await run(ContextWindow(last=3, max_chars=5), ["a", "b", "c"])
    assert len(loose_chars.infos[-1].prior_calls) == 1
    assert len(tight_chars.infos[-1].prior_calls) == 1


@pytest.mark.parametrize("deadline", [None, 600.0])
async def test_summarizer_folds_each_left_out_call_in_once(deadline: float | None) -> None:
    """summarize gets the summary so far and only the calls that just left the window, oldest first (on the
    event loop, or under a deadline in a thread of agentkit's)."""
    seen: list[tuple[str | None, list[str]]] = []

    def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        queries: list[str] = [c.args.model_dump()["query"] for c in calls]
        seen.append((summary, queries))
        return (summary or "searched") + "".join(f" {q}" for q in queries)

    window = ContextWindow(last=2, summarize=summarize)
    result, agent = await run(window, ["a", "b", "c", "d", "e"], deadline=deadline)
    assert seen == [(None, ["a"]), ("searched a", ["b"]), ("searched a b", ["c"])]
    assert agent.infos[-1].omitted.summary == "searched a b c"
    assert agent.infos[2].omitted.summary is None  # nothing left out yet
    assert len(result.items) == 15


async def test_async_summarizer_is_awaited() -> None:
    """An async summarizer (say, one that calls run_once_text) is awaited."""

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        return f"{len(calls)} more calls; before: {summary}"

    _, agent = await run(ContextWindow(last=1, summarize=summarize), ["a", "b", "c"])
    assert agent.infos[-1].omitted.summary == "1 more calls; before: 1 more calls; before: None"


async def test_summarizer_that_raises_ends_the_run_executor_error_with_items_kept() -> None:
    """A summarizer that raises ends the run ERROR, EXECUTOR_ERROR; items gathered so far are kept."""

    def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        raise RuntimeError("summary model is down")

    result, agent = await run(ContextWindow(last=1, summarize=summarize), ["a", "b", "c"])
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert "summary model is down" in str(result.error)
    assert "ContextWindow.summarize" in str(result.error)
    assert (result.items, result.rounds, len(agent.infos)) == (["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"], 2, 2)


GATHERED = ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]
"""The items of the two rounds before the first summary (last=1, three searches)."""


async def test_the_deadline_cancels_an_async_summarizer_that_never_returns() -> None:
    """An async summarizer still running at the deadline is cancelled; the run ends DEADLINE with its items."""
    cancelled: list[bool] = []

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    # wait_for only keeps the code before the fix from hanging the suite: the run never returned
    result, agent = await asyncio.wait_for(run(ContextWindow(last=1, summarize=summarize), "abc", deadline=1.0), 60)
    assert (result.outcome, result.stop_reason, result.error) == (Outcome.APPLIED, StopReason.DEADLINE, None)
    assert (result.items, len(agent.infos), cancelled) == (GATHERED, 2, [True])
    assert result.checkpoint.progress.summary is None


async def test_the_deadline_leaves_a_sync_summarizer_behind_in_its_thread() -> None:
    """A sync summarizer under a deadline runs in a thread of agentkit's: the run ends DEADLINE without
    waiting for it; the thread runs on until the function returns, and its late summary is dropped."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        started.set()
        release.wait(30)
        finished.set()
        return "late"

    try:
        result, agent = await run(ContextWindow(last=1, summarize=summarize), "abc", deadline=1.0)
        assert started.is_set()
        assert not finished.is_set()  # the run did not wait for it
    finally:
        release.set()
    assert (result.outcome, result.stop_reason, result.error) == (Outcome.APPLIED, StopReason.DEADLINE, None)
    assert (result.items, len(agent.infos)) == (GATHERED, 2)
    assert await asyncio.to_thread(finished.wait, 30)
    assert result.checkpoint.progress.summary is None


async def test_sync_summarizers_that_never_return_fill_their_threads_then_fail_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every summarizer thread held by one the deadline left behind, the next fails at once (EXECUTOR_ERROR)
    instead of waiting; the tools' threads are not theirs to take."""
    monkeypatch.setattr(
        _tool_threads, "_summary_threads", _tool_threads.ToolThreads(1, exhausted=_tool_threads._summaries_exhausted)
    )
    release, calls = threading.Event(), []

    def summarize(summary: str | None, calls_left: tuple[PriorCall[Any], ...]) -> str:
        calls.append(len(calls_left))
        release.wait(30)
        return "late"

    try:
        window = ContextWindow(last=1, summarize=summarize)
        left_behind, _ = await run(window, "abc", deadline=1.0)
        refused, _ = await run(window, "abc", deadline=600.0)
    finally:
        release.set()
    assert left_behind.stop_reason is StopReason.DEADLINE
    assert (refused.outcome, refused.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert "all 1 threads for sync summarizers" in str(refused.error)
    assert (refused.items, calls) == (GATHERED, [1])


async def test_a_summarizer_timing_out_on_its_own_is_an_executor_error() -> None:
    """A TimeoutError the summarizer raises itself (its model call timed out) is its failure, not the deadline."""

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        raise TimeoutError("the summary model timed out")

    result, _ = await run(ContextWindow(last=1, summarize=summarize), "abc", deadline=600.0)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert "the summary model timed out" in str(result.error)


async def test_summarizer_returning_a_non_string_is_an_executor_error() -> None:
    """A summarizer must return a str; anything else ends the run EXECUTOR_ERROR, saying so."""

    def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        return None  # type: ignore[return-value]  # the wrong return is the test

    result, _ = await run(ContextWindow(last=1, summarize=summarize), ["a", "b"])
    assert result.stop_reason is StopReason.EXECUTOR_ERROR
    assert "must return a str" in str(result.error)


async def test_observers_are_shown_the_bounded_view() -> None:
    """RoundStarted carries what the executor renders from: the same bound and the same counts."""
    events: list[Event] = []

    class Watch(Observer):
        def on_event(self, event: Event) -> None:
            events.append(event)

    agent = Executor[str]()
    caller = ScriptedCaller([*searches("a", "b", "c"), done_step()])
    await run_tool_loop(caller, agent, search, "ctx", config(ContextWindow(last=1)), observer=Watch())
    started = [e.info for e in events if isinstance(e, RoundStarted)]
    assert [i.omitted for i in started] == [i.omitted for i in agent.infos]  # type: ignore[union-attr]  # ToolRoundInfo
    assert [len(i.prior_calls) for i in started] == [0, 1, 1, 1]  # type: ignore[union-attr]  # ToolRoundInfo


class Prompted:
    """An executor rendering with reflective_prompt, keeping each prompt."""

    def __init__(self) -> None:
        self.prompts: list[Prompt] = []

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        prompt = reflective_prompt("Find things.", ctx, info)
        self.prompts.append(prompt)
        return prompt


async def test_reflective_prompt_says_what_was_left_out_and_shows_the_summary() -> None:
    """The render helper shows only the window, says how much was left out, numbers on, and shows the summary."""

    def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        return "a and b found nothing useful"

    agent = Prompted()
    caller = ScriptedCaller([*searches("a", "b", "c"), done_step()])
    await run_tool_loop(caller, agent, search, "ctx", config(ContextWindow(last=1, summarize=summarize)))
    last = agent.prompts[-1].dynamic
    assert "The 2 earliest calls, with 6 results, are left out" in last
    assert "Summary of the left-out calls:\na and b found nothing useful" in last
    assert "a-0" not in last
    assert "b-0" not in last
    assert "3. Round 3: search" in last
    assert "c-0" in last
    assert "left out" not in agent.prompts[1].dynamic  # nothing left out yet
    assert agent.prompts[0].system == agent.prompts[-1].system  # the stable part stays stable


async def test_reflective_prompt_without_a_window_is_unchanged() -> None:
    """Without a window the prompt numbers from 1 and says nothing about leaving calls out."""
    agent = Prompted()
    caller = ScriptedCaller([*searches("a", "b"), done_step()])
    await run_tool_loop(caller, agent, search, "ctx", config(None))
    last = agent.prompts[-1].dynamic
    assert "1. Round 1: search" in last
    assert "a-0" in last
    assert "left out" not in last


def test_reflective_prompt_on_a_hand_built_info_says_calls_were_left_out() -> None:
    """An info with only batches, or with nothing shown at all, still says that calls were left out."""
    omitted = Omitted(calls=4, batches=4, items=1, chars=40)
    batches: ToolRoundInfo[str] = ToolRoundInfo(
        round=6, max_rounds=9, is_final_round=False, prior_results=(["x"],), omitted=omitted
    )
    nothing: ToolRoundInfo[str] = ToolRoundInfo(round=6, max_rounds=9, is_final_round=False, omitted=omitted)
    shown = reflective_prompt("d", "r", batches).dynamic
    assert "The 4 earliest calls, with 1 result, are left out" in shown
    assert "5. Results" in shown
    assert "The 4 earliest calls" in reflective_prompt("d", "r", nothing).dynamic


async def test_a_proposal_that_left_the_window_is_still_listed_as_awaiting_approval() -> None:
    """A proposed call older than the window is still shown to the executor as awaiting approval."""

    finder, deleter = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    prompts: list[str] = []

    class Planner:
        def role(self) -> RoleSpec:
            return RoleSpec(model="m")

        def render(self, ctx: str, info: ToolRoundInfo[Any]) -> Prompt:
            prompt = reflective_prompt("Plan.", ctx, info)
            prompts.append(prompt.dynamic)
            return prompt

    steps = [
        call_step(PathArgs(path="/tmp/x"), tool="delete"),
        call_step(Query(query="a"), tool="search"),
        call_step(Query(query="b"), tool="search"),
        done_step(),
    ]
    cfg = config(ContextWindow(last=1), after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(ScriptedCaller(steps), Planner(), [finder, deleter], "ctx", cfg)
    assert [p.tool_name for p in result.proposed] == ["delete"]
    assert "Awaiting human approval" not in prompts[1]  # the proposed call is still in the window
    assert "Awaiting human approval (did not run; do not propose again):\n- Round 1: delete" in prompts[-1]


async def proposed_run(context: ContextWindow) -> tuple[Any, Any, Any, Any]:
    """A tiered run of three searches and a delete under ``context``, stopped at the delete's proposal."""

    finder, deleter = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    steps = [
        *(call_step(Query(query=q), tool="search") for q in "abc"),
        call_step(PathArgs(path="/tmp/x"), tool="delete"),
        call_step(Query(query="d"), tool="search"),
        done_step(),
    ]
    caller = ScriptedCaller(steps)
    result = await run_tool_loop_tiered(caller, Executor[Any](), [finder, deleter], "ctx", config(context))
    assert result.stop_reason is StopReason.PROPOSED
    return caller, finder, deleter, result


async def test_checkpoint_carries_the_window_and_resume_keeps_bounding() -> None:
    """The checkpoint holds the window's bounds as data; the resumed run applies them to all its calls."""

    caller, finder, deleter, result = await proposed_run(ContextWindow(last=2, max_tokens=500, chars_per_token=3.5))
    stored = RunCheckpoint.model_validate_json(result.checkpoint.model_dump_json())
    assert stored.config.context is not None
    assert (stored.config.context.last, stored.config.context.max_tokens) == (2, 500)
    assert stored.config.rebuild().context == ContextWindow(last=2, max_tokens=500, chars_per_token=3.5)
    agent = Executor[Any]()
    approval = approve(result.proposed[0], approved_by="ana")
    resumed = await resume_tool_loop(caller, agent, [finder, deleter], "ctx", stored, [approval])
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE
    assert len(resumed.items) == 5  # every batch, the approved delete's included
    assert [len(i.prior_calls) for i in agent.infos] == [2, 2]
    assert [i.omitted.calls for i in agent.infos] == [2, 3]


def folding(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
    return (summary or "") + f"[{len(calls)}]"


def other_folding(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
    return "other"


async def test_resume_needs_the_runs_summarizer_again() -> None:
    """A summarizer cannot be stored: resume refuses without it, with another one, or with one the run lacked."""

    caller, finder, deleter, result = await proposed_run(ContextWindow(last=1, summarize=folding))
    assert result.checkpoint.config.context.summarize == f"{__name__}.folding"
    approval = [approve(result.proposed[0], approved_by="ana")]
    tools = [finder, deleter]
    with pytest.raises(ResumeRefused, match="pass it again as summarize="):
        await resume_tool_loop(caller, Executor[Any](), tools, "ctx", result.checkpoint, approval)
    with pytest.raises(ResumeRefused, match="other_folding"):
        await resume_tool_loop(
            caller, Executor[Any](), tools, "ctx", result.checkpoint, approval, summarize=other_folding
        )
    _, finder2, deleter2, plain = await proposed_run(ContextWindow(last=1))
    with pytest.raises(ResumeRefused, match="had no ContextWindow summarizer"):
        await resume_tool_loop(
            caller, Executor[Any](), [finder2, deleter2], "ctx", plain.checkpoint, approval, summarize=folding
        )
    assert not deleter.calls  # nothing ran


async def test_resumed_run_continues_the_running_summary() -> None:
    """The running summary and how many calls it covers are in the checkpoint; resume folds only new calls."""

    caller, finder, deleter, result = await proposed_run(ContextWindow(last=1, summarize=folding))
    assert (result.checkpoint.progress.summary, result.checkpoint.progress.summarized) == ("[1][1]", 2)
    agent = Executor[Any]()
    approval = [approve(result.proposed[0], approved_by="ana")]
    resumed = await resume_tool_loop(
        caller, agent, [finder, deleter], "ctx", result.checkpoint, approval, summarize=folding
    )
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE
    assert [i.omitted.summary for i in agent.infos] == ["[1][1][1]", "[1][1][1][1]"]


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=500), max_size=30),
    last=st.none() | st.integers(min_value=1, max_value=10),
    max_chars=st.none() | st.integers(min_value=1, max_value=2000),
)
def test_window_shows_the_most_it_may_never_moves_back_and_keeps_the_latest(
    sizes: list[int], last: int | None, max_chars: int | None
) -> None:
    """For any sizes: the latest call is shown; the shown calls fit every bound (the latest alone may be
    over the budget); one more would not fit; and as calls are added the window's start never moves back."""
    if last is None and max_chars is None:
        last = 3
    window = ContextWindow(last=last, max_chars=max_chars)
    starts = [window.start(sizes[:count]) for count in range(len(sizes) + 1)]
    assert starts == sorted(starts)
    count, start = len(sizes), starts[-1]
    if not count:
        return
    assert start <= count - 1
    shown = sizes[start:]
    assert last is None or len(shown) <= last
    assert max_chars is None or sum(shown) <= max_chars or len(shown) == 1
    if start > 0:
        over_last = last is not None and len(shown) + 1 > last
        over_chars = max_chars is not None and sum(shown) + sizes[start - 1] > max_chars
        assert over_last or over_chars
