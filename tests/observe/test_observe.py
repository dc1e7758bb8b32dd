"""Observers: the hook order of every ending, failure isolation, and the logging observer."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Outcome,
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    ToolLoopResult,
    ToolRoundInfo,
    UsageError,
    events,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._observe import LoggingObserver, ModelCall, ToolInvocation, dispatch, event_fields, observers_of
from agentkit._results import Usage
from agentkit.errors import ProviderError, Throttled, Truncated
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Doc, Finder, Query, Recorder, delete, search


@tool(tier=Tier.READ_ONLY)
async def slow(args: Query) -> list[Doc]:
    """Takes longer than any deadline in these tests."""
    await asyncio.sleep(30)
    return []


class NoTier:
    """A tool that forgot to declare its tier."""

    name = "untiered"
    description = "declares no tier"
    args_type = Query
    tier: Any = None

    async def call(self, args: Query) -> Sequence[Doc]:
        raise AssertionError("a tool without a tier must not run")


class Exploding(Observer):
    """Raises from every hook."""

    def on_event(self, event: events.Event) -> None:
        raise RuntimeError(f"broken observer ({event.kind})")

    def on_run_start(self, event: events.RunStarted) -> None:
        raise RuntimeError("broken run_start")

    def on_round_start(self, event: events.RoundStarted) -> None:
        raise RuntimeError("broken round_start")

    def on_llm_call(self, event: events.LLMCallFinished) -> None:
        raise RuntimeError("broken llm_call")

    def on_tool_call(self, event: events.ToolCallStarted) -> None:
        raise RuntimeError("broken tool_call")

    def on_tool_result(self, event: events.ToolResultReturned) -> None:
        raise RuntimeError("broken tool_result")

    def on_run_end(self, event: events.RunFinished) -> None:
        raise RuntimeError("broken run_end")


def logged(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields ``LoggingObserver`` put on a record."""
    fields: dict[str, Any] = record.__dict__["agentkit"]
    return fields


def tokens(n: int) -> Usage:
    return Usage(requests=1, input_tokens=n, output_tokens=n)


ROUND = ["round_start", "llm_call", "tool_call", "tool_result"]

# (ending, tiered, tools, script, config, expected hook sequence)
ENDINGS: list[tuple[StopReason, bool, Any, list[Any], LoopConfig, list[str]]] = [
    (
        StopReason.EXECUTOR_DONE,
        False,
        search,
        [call_step(Query(query="a")), done_step()],
        LoopConfig(),
        ["run_start", *ROUND, "round_start", "llm_call", "run_end"],
    ),
    (
        StopReason.NOTHING_RETRIEVED,
        False,
        search,
        [done_step()],
        LoopConfig(),
        ["run_start", "round_start", "llm_call", "run_end"],
    ),
    (
        StopReason.ROUND_CEILING,
        False,
        search,
        [call_step(Query(query="a")), call_step(Query(query="b"))],
        LoopConfig(max_rounds=2),
        ["run_start", *ROUND, *ROUND, "run_end"],
    ),
    (
        StopReason.DEGENERATION,
        False,
        search,
        [call_step(Query(query="a")), call_step(Query(query="a"))],
        LoopConfig(),
        ["run_start", *ROUND, "round_start", "llm_call", "degeneration", "run_end"],
    ),
    (
        StopReason.PROPOSED,
        True,
        [search, delete],
        [call_step(Query(query="a"), tool="delete")],
        LoopConfig(),
        ["run_start", "round_start", "llm_call", "proposal", "run_end"],
    ),
    (
        StopReason.LLM_ERROR,
        False,
        search,
        [ProviderError("bad request", status=400)],
        LoopConfig(),
        ["run_start", "round_start", "llm_call", "run_end"],
    ),
    (
        StopReason.THROTTLED,
        False,
        search,
        [Throttled()],
        LoopConfig(),
        ["run_start", "round_start", "llm_call", "run_end"],
    ),
    (
        StopReason.MAX_TOKENS,
        False,
        search,
        [Truncated("cut off by the token limit", raw='{"done": fa', max_tokens=8)],
        LoopConfig(),
        ["run_start", "round_start", "llm_call", "run_end"],
    ),
    (
        StopReason.TOOL_ERROR,
        False,
        search,
        [call_step(Query(query="boom"))],
        LoopConfig(),
        ["run_start", *ROUND, "run_end"],
    ),
    (
        StopReason.TOOL_DECLARES_NO_TIER,
        True,
        [search, NoTier()],
        [],
        LoopConfig(),
        ["run_start", "run_end"],
    ),
    (
        StopReason.BUDGET_EXHAUSTED,
        False,
        search,
        [ScriptedReply(value=call_step(Query(query="a")), usage=tokens(40))],
        LoopConfig(token_budget=100),
        ["run_start", *ROUND, "run_end"],
    ),
    (
        StopReason.DEADLINE,
        False,
        slow,
        [call_step(Query(query="a"))],
        LoopConfig(deadline=0.5),
        ["run_start", *ROUND, "run_end"],
    ),
]


async def run(tiered: bool, tools: Any, script: list[Any], config: LoopConfig, observer: Any) -> ToolLoopResult[Doc]:
    caller = ScriptedCaller(script)
    cfg = dataclasses.replace(config, retry=NO_WAIT)
    if tiered:
        result: ToolLoopResult[Doc] = await run_tool_loop_tiered(caller, Finder(), tools, "ctx", cfg, observer=observer)
    else:
        result = await run_tool_loop(caller, Finder(), tools, "ctx", cfg, observer=observer)
    caller.assert_complete()
    return result


@pytest.mark.parametrize(
    ("ending", "tiered", "tools", "script", "config", "expected"), ENDINGS, ids=[e[0].value for e in ENDINGS]
)
async def test_hooks_fire_in_order_for_every_ending(
    ending: StopReason, tiered: bool, tools: Any, script: list[Any], config: LoopConfig, expected: list[str]
) -> None:
    """Each ending calls the hooks in the documented order, once each, ending with run_end."""
    recorder = Recorder()
    result = await run(tiered, tools, script, config, recorder)
    assert result.stop_reason is ending
    assert recorder.kinds == expected
    assert [event.kind for event in recorder.events] == expected
    assert [event for _, event in recorder.hooks] == recorder.events
    assert {event.run_id for event in recorder.events} == {result.run_id}
    final = recorder.events[-1]
    assert isinstance(final, events.RunFinished)
    assert isinstance(final.result, ToolLoopResult)
    assert (final.result.outcome, final.result.stop_reason, final.result.items) == (
        result.outcome,
        result.stop_reason,
        result.items,
    )


async def test_every_stop_reason_of_the_tool_loop_has_an_order_test() -> None:
    """The ending table covers every stop reason a tool loop can produce."""
    pair_only = {StopReason.VERIFIER_APPROVED, StopReason.VERIFIER_ERROR}
    # EXECUTOR_ERROR needs an executor that raises: its order test is in tests/loop/test_hostile_loop.py.
    own_test = {StopReason.EXECUTOR_ERROR}
    assert {ending for ending, *_ in ENDINGS} == set(StopReason) - pair_only - own_test


async def test_event_fields_follow_the_run() -> None:
    """Events carry the round, model, attempt, usage, tool, tier and batch size of what happened."""
    recorder = Recorder()
    script = [
        ScriptedReply(value=call_step(Query(query="a")), usage=tokens(7)),
        ScriptedReply(value=done_step(), usage=tokens(3)),
    ]
    result = await run(False, search, script, LoopConfig(max_rounds=5), recorder)
    start, round1, llm1, call, returned, round2, llm2, end = recorder.events
    assert isinstance(start, events.RunStarted)
    assert (start.agent, start.model, start.tools, start.max_rounds) == ("Finder", "exec-model", ("search",), 5)
    assert isinstance(round1, events.RoundStarted)
    assert isinstance(round1.info, ToolRoundInfo)
    assert (round1.info.round, round1.info.max_rounds, round1.info.prior_results) == (1, 5, ())
    assert isinstance(llm1, events.LLMCallFinished)
    assert (llm1.role, llm1.round, llm1.model, llm1.attempt, llm1.usage, llm1.error) == (
        "retrieval",
        1,
        "exec-model",
        1,
        tokens(7),
        None,
    )
    assert llm1.seconds >= 0
    assert isinstance(call, events.ToolCallStarted)
    assert (call.round, call.tool_name, call.tier, call.args) == (1, "search", Tier.READ_ONLY, Query(query="a"))
    assert isinstance(returned, events.ToolResultReturned)
    assert (returned.tool_name, returned.batch_size, returned.observation, returned.error) == ("search", 2, None, None)
    assert isinstance(round2, events.RoundStarted)
    assert isinstance(round2.info, ToolRoundInfo)
    assert round2.info.prior_results == ((Doc(id="a1"), Doc(id="a2")),)
    assert isinstance(llm2, events.LLMCallFinished)
    assert (llm2.round, llm2.usage) == (2, tokens(3))
    assert isinstance(end, events.RunFinished)
    assert end.result.usage == result.usage == Usage(requests=2, input_tokens=10, output_tokens=10)


async def test_every_model_attempt_is_reported_with_its_error() -> None:
    """Retries and the fallback each report one llm_call, numbered across models, with the error."""
    recorder = Recorder()
    caller = ScriptedCaller([ProviderError("upstream 503", transient=True, status=503), {"not": "a step"}, done_step()])

    class WithFallback(Finder):
        def role(self) -> RoleSpec:
            return RoleSpec(model="exec-model", fallback_model="backup-model")

    await run_tool_loop(caller, WithFallback(), search, "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    calls = [event for event in recorder.events if isinstance(event, events.LLMCallFinished)]
    assert [(c.model, c.attempt, c.role) for c in calls] == [
        ("exec-model", 1, "executor"),
        ("exec-model", 2, "executor"),
        ("backup-model", 3, "executor"),
    ]
    assert [type(c.error).__name__ for c in calls] == ["ProviderError", "StructuredOutputError", "NoneType"]


async def test_tool_retry_reports_its_observation_and_the_run_goes_on() -> None:
    """A ToolRetry is a tool_result with the observation and no batch; the next round follows."""
    recorder = Recorder()
    await run(False, search, [call_step(Query(query="retry")), done_step()], LoopConfig(), recorder)
    assert recorder.kinds == ["run_start", *ROUND, "round_start", "llm_call", "run_end"]
    returned = next(event for event in recorder.events if isinstance(event, events.ToolResultReturned))
    assert (returned.batch_size, returned.observation, returned.error) == (
        0,
        "no such index; try another query",
        None,
    )


async def test_continuing_after_a_proposal_reports_each_proposal() -> None:
    """With AfterProposal.CONTINUE, a proposal is reported and the next round starts."""
    recorder = Recorder()
    script = [call_step(Query(query="x"), tool="delete"), call_step(Query(query="a"), tool="search"), done_step()]
    result = await run(True, [search, delete], script, LoopConfig(after_proposal=AfterProposal.CONTINUE), recorder)
    assert recorder.kinds == [
        "run_start",
        "round_start",
        "llm_call",
        "proposal",
        *ROUND,
        "round_start",
        "llm_call",
        "run_end",
    ]
    proposal = next(event for event in recorder.events if isinstance(event, events.ProposalCaptured))
    assert proposal.proposal.tool_name == "delete"
    assert proposal.proposal.run_id == result.run_id


async def test_several_observers_each_see_every_event() -> None:
    """A sequence of observers: each sees the same events in the same order."""
    first, second = Recorder(), Recorder()
    await run(False, search, [call_step(Query(query="a")), done_step()], LoopConfig(), [first, second])
    assert first.events == second.events
    assert len(first.events) == 8


@pytest.mark.parametrize(
    ("ending", "tiered", "tools", "script", "config", "expected"), ENDINGS, ids=[e[0].value for e in ENDINGS]
)
async def test_a_failing_observer_changes_nothing(
    ending: StopReason,
    tiered: bool,
    tools: Any,
    script: list[Any],
    config: LoopConfig,
    expected: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An observer raising from every hook leaves the outcome, items and trace as without it."""
    quiet = await run(tiered, tools, script, config, None)
    before, after = Recorder(), Recorder()
    with caplog.at_level(logging.ERROR, logger="agentkit.observe"):
        noisy = await run(tiered, tools, script, config, [before, Exploding(), after])
    assert (noisy.outcome, noisy.stop_reason, noisy.items, noisy.rounds, noisy.usage) == (
        quiet.outcome,
        quiet.stop_reason,
        quiet.items,
        quiet.rounds,
        quiet.usage,
    )
    assert [record.tool_name for record in noisy.trace] == [record.tool_name for record in quiet.trace]
    assert before.kinds == after.kinds == expected
    assert noisy.stop_reason is ending


async def test_an_observer_failure_is_logged_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """One failing hook call gives exactly one ERROR record naming the observer, the event and the run."""

    class FailsOnRoundTwo(Observer):
        def on_round_start(self, event: events.RoundStarted) -> None:
            if event.info.round == 2:
                raise RuntimeError("dashboard unreachable")

    with caplog.at_level(logging.DEBUG, logger="agentkit.observe"):
        result = await run(False, search, [call_step(Query(query="a")), done_step()], LoopConfig(), FailsOnRoundTwo())
    records = [record for record in caplog.records if record.name == "agentkit.observe"]
    assert len(records) == 1
    (record,) = records
    assert record.levelno == logging.ERROR
    assert "FailsOnRoundTwo" in record.getMessage()
    assert "round_start" in record.getMessage()
    assert result.run_id in record.getMessage()
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "dashboard unreachable"
    assert result.outcome is Outcome.APPLIED


def test_dispatch_calls_on_event_before_the_named_hook() -> None:
    """``on_event`` sees an event before its own hook does, and a failure in one still runs the other."""
    seen: list[str] = []

    class Both(Observer):
        def on_event(self, event: events.Event) -> None:
            seen.append(f"event:{event.kind}")
            raise ValueError("on_event fails")

        def on_degeneration(self, event: events.DegenerationDetected) -> None:
            seen.append("hook:degeneration")

    event = events.DegenerationDetected(run_id="r", round=2, tool_name="search", args=Query(query="a"))
    dispatch((Both(),), event)
    assert seen == ["event:degeneration", "hook:degeneration"]


def test_observers_of_accepts_one_several_or_none() -> None:
    """``observer=`` takes one observer, a sequence, or None."""
    one, two = Observer(), Observer()
    assert observers_of(None) == ()
    assert observers_of(one) == (one,)
    assert observers_of([one, two]) == (one, two)


def test_the_base_observer_ignores_every_event() -> None:
    """The base class's hooks are no-ops, so a subclass overrides only what it needs."""
    observer = Observer()
    # Called directly, not through dispatch (which would swallow a failure): no hook raises.
    observer.on_event(events.RunAborted(run_id="r", error=asyncio.CancelledError()))
    observer.on_run_abort(events.RunAborted(run_id="r", error=asyncio.CancelledError()))
    observer.on_run_start(events.RunStarted(run_id="r", agent="A", model="m", tools=("t",), max_rounds=1))
    hooks = ("on_round_start", "on_llm_call", "on_tool_call", "on_tool_result", "on_proposal", "on_degeneration")
    for name in (*hooks, "on_run_end"):
        getattr(observer, name)(object())


async def test_logging_observer_writes_one_line_per_event(caplog: pytest.LogCaptureFixture) -> None:
    """Every event becomes exactly one logfmt line, with its fields also on the record."""
    recorder = Recorder()
    with caplog.at_level(logging.INFO, logger="agentkit.events"):
        result = await run(
            False, search, [call_step(Query(query="a")), done_step()], LoopConfig(), [recorder, LoggingObserver()]
        )
    records = [record for record in caplog.records if record.name == "agentkit.events"]
    assert len(records) == len(recorder.events)
    assert [logged(record)["event"] for record in records] == [event.kind for event in recorder.events]
    assert all(record.getMessage().count("\n") == 0 for record in records)
    assert records[0].getMessage() == (
        f"agentkit.run_start run_id={result.run_id} agent=Finder model=exec-model tools=search max_rounds=4"
    )
    assert records[3].getMessage().startswith(f"agentkit.tool_call run_id={result.run_id} round=1 tool=search")
    assert 'args="{\\"query\\":\\"a\\"}"' in records[3].getMessage()
    end = records[-1]
    assert "outcome=applied stop_reason=executor_done rounds=2 items=2" in end.getMessage()
    assert logged(end)["items"] == 2
    assert all(record.levelno == logging.INFO for record in records)


async def test_logging_observer_raises_the_level_of_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A failed attempt and an ERROR ending are logged at the error level, with the error."""
    with caplog.at_level(logging.INFO, logger="agentkit.events"):
        await run(False, search, [Throttled("slow down")], LoopConfig(), LoggingObserver(include_args=False))
    levels = {logged(record)["event"]: record.levelno for record in caplog.records if record.name == "agentkit.events"}
    assert levels == {
        "run_start": logging.INFO,
        "round_start": logging.INFO,
        "llm_call": logging.WARNING,
        "run_end": logging.WARNING,
    }
    ended = caplog.records[-1]
    assert logged(ended)["error"] == "Throttled: slow down"
    assert 'error="Throttled: slow down"' in ended.getMessage()


def test_logging_observer_can_leave_arguments_out() -> None:
    """With ``include_args=False`` no tool argument reaches the fields."""
    event = events.ToolCallStarted(
        run_id="r", round=1, tool_name="search", tier=Tier.READ_ONLY, args=Query(query="secret")
    )
    assert "args" in event_fields(event)
    assert "args" not in event_fields(event, include_args=False)
    assert "secret" not in str(event_fields(event, include_args=False))


def test_logging_observer_stays_silent_below_its_logger_level(caplog: pytest.LogCaptureFixture) -> None:
    """A logger set above the observer's level receives nothing."""
    observer = LoggingObserver(logging.getLogger("agentkit.test.quiet"))
    with caplog.at_level(logging.ERROR, logger="agentkit.test.quiet"):
        dispatch((observer,), events.RunStarted(run_id="r", agent="A", model="m", tools=("t",), max_rounds=None))
    assert not [record for record in caplog.records if record.name == "agentkit.test.quiet"]


async def test_a_run_that_raises_ends_with_run_abort() -> None:
    """A wiring mistake found mid-run (the script ran dry) ends the hooks with run_abort, then raises."""
    recorder = Recorder()
    with pytest.raises(UsageError):
        await run_tool_loop(ScriptedCaller([]), Finder(), search, "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    assert recorder.kinds == ["run_start", "round_start", "llm_call", "run_abort"]


async def test_a_cancelled_run_ends_with_run_abort() -> None:
    """A run cancelled inside a tool call ends the hooks with run_abort carrying the CancelledError."""
    recorder, called = Recorder(), asyncio.Event()

    class Called(Observer):
        def on_tool_call(self, event: events.ToolCallStarted) -> None:
            called.set()

    caller = ScriptedCaller([call_step(Query(query="a"))])
    task = asyncio.create_task(run_tool_loop(caller, Finder(), slow, "ctx", observer=[recorder, Called()]))
    await called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.kinds == ["run_start", *ROUND[:3], "run_abort"]
    final = recorder.events[-1]
    assert isinstance(final, events.RunAborted)
    assert isinstance(final.error, asyncio.CancelledError)


# --- around: the work runs inside each observer's context ------------------------------------------

INSIDE: contextvars.ContextVar[str] = contextvars.ContextVar("inside", default="")


class Wrapping(Observer):
    """Sets a context variable around each call (as a tracer makes its span current) and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str, str]] = []

    @contextlib.contextmanager
    def around(self, call: ModelCall | ToolInvocation) -> Iterator[None]:
        name = call.request.model if isinstance(call, ModelCall) else call.tool.name
        token = INSIDE.set(name)
        outcome = "raised"
        try:
            yield
            outcome = type(call.result).__name__
        finally:
            INSIDE.reset(token)
            self.seen.append((type(call).__name__, call.round, name, outcome))


@tool(tier=Tier.READ_ONLY)
def where(args: Query) -> list[Doc]:
    """Reports the context it runs in."""
    if args.query == "boom":
        raise RuntimeError("index offline")
    return [Doc(id=INSIDE.get())]


async def test_around_wraps_each_model_call_and_tool_invocation() -> None:
    """Each logical model call (retries included) and each tool invocation runs inside ``around``, once."""
    wrapping = Wrapping()
    caller = ScriptedCaller([ProviderError("503", transient=True), call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Finder(), where, "ctx", LoopConfig(retry=NO_WAIT), observer=wrapping)
    assert result.items == [Doc(id="where")]
    assert wrapping.seen == [
        ("ModelCall", 1, "exec-model", "Completion"),
        ("ToolInvocation", 1, "where", "list"),
        ("ModelCall", 2, "exec-model", "Completion"),
    ]
    assert INSIDE.get() == ""


async def test_around_sees_the_exception_of_a_failing_tool() -> None:
    """A tool's exception passes through ``around`` (no result is set), and the run ends as it would without it."""
    wrapping = Wrapping()
    caller = ScriptedCaller([call_step(Query(query="boom"))])
    result = await run_tool_loop(caller, Finder(), where, "ctx", LoopConfig(retry=NO_WAIT), observer=wrapping)
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert wrapping.seen[-1] == ("ToolInvocation", 1, "where", "raised")


async def test_single_shot_and_pair_model_calls_run_inside_around() -> None:
    """run_once and pair send their model calls through the same seam, labelled by role."""
    from agentkit import PairConfig, RulesVerifier, pair, run_once
    from agentkit._once import RoundInfo

    class Judge:
        def role(self) -> RoleSpec:
            return RoleSpec(model="judge-model")

        def render(self, ctx: str, info: RoundInfo) -> Prompt:
            return Prompt(system="judge", dynamic=ctx)

    roles: list[str] = []

    class Roles(Observer):
        @contextlib.contextmanager
        def around(self, call: ModelCall | ToolInvocation) -> Iterator[None]:
            assert isinstance(call, ModelCall)
            roles.append(f"{call.role}:{call.round}")
            yield

    await run_once(ScriptedCaller([{"id": "a"}]), Judge(), "ctx", schema=Doc, observer=Roles())
    verifier = RulesVerifier[Doc](lambda d: (d.id == "b", "not b"))
    drafts = ScriptedCaller([{"id": "a"}, {"id": "b"}])
    await pair(drafts, Judge(), verifier, "ctx", PairConfig(retry=NO_WAIT), schema=Doc, observer=Roles())
    assert roles == ["executor:1", "executor:1", "executor:2"]


class BrokenAround(Observer):
    """An ``around`` that fails on entry, on exit, or tries to swallow the work's exception."""

    def __init__(self, how: str) -> None:
        self.how = how

    @contextlib.contextmanager
    def around(self, call: ModelCall | ToolInvocation) -> Iterator[None]:
        if self.how == "enter":
            raise RuntimeError("broken on entry")
        try:
            yield
        except Exception:
            if self.how == "swallow":
                return
            raise
        if self.how == "exit":
            raise RuntimeError("broken on exit")


@pytest.mark.parametrize("how", ["enter", "exit", "swallow"])
async def test_a_failing_around_never_changes_the_run(how: str, caplog: pytest.LogCaptureFixture) -> None:
    """An ``around`` that raises is logged and skipped; one that swallows cannot hide a tool's failure."""
    wrapping = Wrapping()

    async def run(*observers: Observer) -> ToolLoopResult[Doc]:
        caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="boom"))])
        return await run_tool_loop(caller, Finder(), where, "ctx", LoopConfig(retry=NO_WAIT), observer=list(observers))

    expected = await run(Wrapping())
    with caplog.at_level(logging.ERROR, logger="agentkit.observe"):
        result = await run(BrokenAround(how), wrapping)
    assert (result.outcome, result.stop_reason, result.items) == (
        expected.outcome,
        expected.stop_reason,
        expected.items,
    )
    assert result.items == [Doc(id="where")]
    assert [kind for kind, *_ in wrapping.seen] == ["ModelCall", "ToolInvocation", "ModelCall", "ToolInvocation"]
    failures = [r for r in caplog.records if "BrokenAround" in r.getMessage()]
    assert len(failures) == (0 if how == "swallow" else 3 if how == "exit" else 4)


class Settling(Observer):
    """Notes each run it was asked to settle, after yielding to the loop once (as a real wait would)."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.settled: list[tuple[str, bool]] = []

    def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.RunFinished | events.RunAborted):
            self.ended.append(event.run_id)

    async def settle(self, run_id: str) -> None:
        await asyncio.sleep(0)
        self.settled.append((run_id, run_id in self.ended))


async def test_a_run_awaits_its_observers_settle_after_its_end() -> None:
    """Before a run returns, each observer's settle is awaited once, after the end was delivered."""
    settling = Settling()
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Finder(), search, "ctx", observer=settling)
    assert settling.settled == [(result.run_id, True)]


async def test_a_raising_run_awaits_settle_too_and_a_failing_settle_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An aborted run settles its observers before raising; a settle that raises is logged and skipped."""

    class Broken(Observer):
        async def settle(self, run_id: str) -> None:
            raise RuntimeError("settle failed")

    settling = Settling()
    observers = [Broken(), settling]
    with caplog.at_level(logging.ERROR, logger="agentkit.observe"), pytest.raises(UsageError):
        await run_tool_loop(ScriptedCaller([]), Finder(), search, "ctx", LoopConfig(retry=NO_WAIT), observer=observers)
    assert [after_end for _, after_end in settling.settled] == [True]
    assert any("failed to settle" in r.getMessage() for r in caplog.records)


class RoundsOnly(Recorder):
    """Reads no more of a round than its number (as the journal does)."""

    sees_calls = False


def rounds_started(recorder: Recorder) -> list[events.RoundStarted]:
    return [e for e in recorder.events if isinstance(e, events.RoundStarted)]


async def test_observers_that_do_not_see_calls_get_rounds_without_them() -> None:
    """With ``sees_calls = False`` on every observer, a round shows its number and ceiling, no calls."""
    script = [call_step(Query(query="a")), done_step()]
    watcher = RoundsOnly()
    result = await run(False, search, script, LoopConfig(max_rounds=5), watcher)
    first, second = rounds_started(watcher)
    for started, number in ((first, 1), (second, 2)):
        assert isinstance(started.info, ToolRoundInfo)
        assert (started.info.round, started.info.max_rounds) == (number, 5)
        assert (started.info.prior_calls, started.info.prior_results, started.info.proposals) == ((), (), ())
    assert result.items == [Doc(id="a1"), Doc(id="a2")]  # the run itself is the same


async def test_one_observer_that_sees_calls_gives_every_observer_the_calls() -> None:
    script = [call_step(Query(query="a")), done_step()]
    watcher, reader = RoundsOnly(), Recorder()
    await run(False, search, script, LoopConfig(max_rounds=5), [watcher, reader])
    for recorder in (watcher, reader):
        second = rounds_started(recorder)[1]
        assert isinstance(second.info, ToolRoundInfo)
        assert second.info.prior_results == ((Doc(id="a1"), Doc(id="a2")),)
    assert rounds_started(watcher)[1] is rounds_started(reader)[1]


def test_the_journal_observer_does_not_see_calls() -> None:
    from agentkit.journal import JournalObserver

    assert Observer.sees_calls is True
    assert JournalObserver.sees_calls is False
