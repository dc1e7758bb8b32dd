"""Several calls in one step (`LoopConfig.max_calls_per_step`): the schema, and each call checked and run on its own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Outcome,
    RepeatPolicy,
    StopReason,
    Tier,
    ToolRetry,
    UsageError,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._state import RoundOutcome, RunCheckpoint
from agentkit._step import build_step_model
from agentkit.decisions import Grant, Grants, PathPrefix
from agentkit.events import Event, ToolCallStarted, ToolResultReturned
from agentkit.testing import ScriptedCaller, call_step, calls_step, done_step
from tests.support import NO_WAIT, Executor, PathArgs, Query

RAN: list[str] = []


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Look a query up."""
    RAN.append(args.query)
    if args.query == "retry":
        raise ToolRetry("say it otherwise")
    if args.query == "boom":
        raise RuntimeError("the index is gone")
    return [args.query.upper()]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: PathArgs) -> list[str]:
    """Delete a path."""
    RAN.append(f"delete {args.path}")
    return [args.path]


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def several(n: int = 3, **changes: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, max_calls_per_step=n, **changes)


def test_one_call_per_step_keeps_the_step_schema_byte_for_byte() -> None:
    """max_calls_per_step=1 (the default) builds the very step schema a loop built before it existed."""
    assert LoopConfig().max_calls_per_step == 1
    for tools in (Query, (("search", Query), ("delete", PathArgs))):
        plain = build_step_model(tools).model_json_schema()
        assert plain == build_step_model(tools, max_calls=1).model_json_schema()
        assert "calls" not in json.dumps(plain)


@pytest.mark.parametrize("tools", [Query, (("search", Query), ("delete", PathArgs))], ids=["one tool", "union"])
def test_several_calls_are_a_bounded_array_in_the_schema(tools: Any) -> None:
    """With N > 1 the call variant carries 1..N calls: minItems 1 and maxItems N, so a decoder cannot write more."""
    schema = build_step_model(tools, max_calls=3).model_json_schema()
    variants = schema["properties"]["decision"]["anyOf"]
    calling = [v for v in variants if "calls" in v["properties"]]
    assert len(calling) == 1
    array = calling[0]["properties"]["calls"]
    assert (array["type"], array["minItems"], array["maxItems"]) == ("array", 1, 3)
    done = [v for v in variants if v["properties"]["done"] == {"const": True}]
    assert len(done) == 1
    assert done[0]["additionalProperties"] is False


def test_a_step_of_more_calls_than_allowed_is_invalid() -> None:
    """Four calls where three are allowed, or none, is refused by validation; a done step carries no calls."""
    step = build_step_model(Query, max_calls=3)
    call = {"query": "a"}
    assert len(step.model_validate({"done": False, "calls": [call] * 3}).step_calls()) == 3
    for wrong in ([call] * 4, []):
        with pytest.raises(ValidationError):
            step.model_validate({"done": False, "calls": wrong})
    wire = {"rationale": "r", "decision": {"done": False, "calls": [call, {"query": "b"}]}}
    assert [c.query for c in step.model_validate(wire).step_calls()] == ["a", "b"]


def test_max_calls_per_step_and_max_parallel_calls_are_checked() -> None:
    """A count below 1, or not an int, is a UsageError naming the field."""
    for bad in ({"max_calls_per_step": 0}, {"max_calls_per_step": True}, {"max_parallel_calls": 0}):
        with pytest.raises(UsageError, match=next(iter(bad))):
            LoopConfig(**bad)


async def test_the_calls_of_one_step_run_and_their_results_keep_the_step_order() -> None:
    """Three calls in one round all run; the items and the executor's view follow the step's order."""
    agent = Executor[str]()
    script = [calls_step(call_step(Query(query="a")), call_step(Query(query="b")), call_step(Query(query="c")))]
    result = await run_tool_loop(ScriptedCaller([*script, done_step()]), agent, search, "q", several())
    assert (result.stop_reason, result.rounds) == (StopReason.EXECUTOR_DONE, 2)
    assert result.items == ["A", "B", "C"]
    assert sorted(RAN) == ["a", "b", "c"]
    assert [c.args.model_dump()["query"] for c in agent.infos[1].prior_calls] == ["a", "b", "c"]
    assert [r.call.model_dump()["query"] for r in result.trace if r.call is not None] == ["a", "b", "c"]


async def test_concurrent_calls_finish_out_of_order_and_are_read_back_in_step_order() -> None:
    """The step's first call finishes last; the state's entries are in finishing order, the views in the step's."""
    release: dict[str, asyncio.Event] = {}

    @tool(tier=Tier.READ_ONLY)
    async def slow(args: Query) -> list[str]:
        """Wait for the call after it."""
        if args.query == "first":
            await release["first"].wait()
        else:
            release["first"].set()
        return [args.query]

    release["first"] = asyncio.Event()
    script = [calls_step(call_step(Query(query="first")), call_step(Query(query="second"))), done_step()]
    result = await run_tool_loop(ScriptedCaller(script), Executor[str](), slow, "q", several(2))
    assert result.items == ["first", "second"]
    rounds = [e for e in result.checkpoint.entries if e.kind == "round" and e.outcome is RoundOutcome.RAN]
    assert [(e.position, json.loads(e.args or "{}")["query"]) for e in rounds] == [(1, "second"), (0, "first")]
    again = RunCheckpoint.model_validate_json(result.checkpoint.model_dump_json())
    assert [c.position for c in again.progress.calls] == [0, 1]
    assert sum(e.requests for e in rounds) == 1


async def test_max_parallel_calls_bounds_how_many_run_at_once() -> None:
    """With max_parallel_calls=2, no more than two of a step's four calls run at the same time."""
    running, most = [0], [0]

    @tool(tier=Tier.READ_ONLY)
    async def counted(args: Query) -> list[str]:
        """Count the calls running."""
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running[0] -= 1
        return [args.query]

    step = calls_step(*(call_step(Query(query=q)) for q in "abcd"))
    config = several(4, max_parallel_calls=2)
    result = await run_tool_loop(ScriptedCaller([step, done_step()]), Executor[str](), counted, "q", config)
    assert result.items == ["a", "b", "c", "d"]
    assert most[0] == 2


async def test_each_call_has_its_own_tool_timeout() -> None:
    """A call that runs past tool_timeout ends the run; the call that finished keeps its batch."""

    @tool(tier=Tier.READ_ONLY)
    async def sleepy(args: Query) -> list[str]:
        """Sleep when asked."""
        if args.query == "slow":
            await asyncio.sleep(30)
        return [args.query]

    step = calls_step(call_step(Query(query="fast")), call_step(Query(query="slow")))
    config = several(2, tool_timeout=0.2)
    result = await run_tool_loop(ScriptedCaller([step, done_step()]), Executor[str](), sleepy, "q", config)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert result.items == ["fast"]


async def test_a_tool_retry_is_that_calls_observation_only() -> None:
    """One call's ToolRetry is its own observation; the other calls of the step run and the run goes on."""
    agent = Executor[str]()
    step = calls_step(call_step(Query(query="a")), call_step(Query(query="retry")), call_step(Query(query="c")))
    result = await run_tool_loop(ScriptedCaller([step, done_step()]), agent, search, "q", several())
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.items == ["A", "C"]
    shown = agent.infos[1].prior_calls
    assert [c.observation for c in shown] == [None, "say it otherwise", None]


async def test_a_fatal_error_cancels_the_calls_still_running_and_keeps_the_finished_ones() -> None:
    """A failing call ends the run; a finished call's batch is kept, a call still running is cancelled."""
    cancelled = asyncio.Event()

    @tool(tier=Tier.READ_ONLY)
    async def mixed(args: Query) -> list[str]:
        """Fail, hang, or answer."""
        if args.query == "boom":
            await asyncio.sleep(0.01)
            raise RuntimeError("the index is gone")
        if args.query == "hang":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return [args.query]

    step = calls_step(*(call_step(Query(query=q)) for q in ("ok", "boom", "hang")))
    result = await run_tool_loop(ScriptedCaller([step, done_step()]), Executor[str](), mixed, "q", several())
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert result.items == ["ok"]
    assert cancelled.is_set()


async def test_a_repeat_inside_the_step_counts() -> None:
    """The same call twice in one step is a repeat: under REFUSE the second is refused, the first runs."""
    agent = Executor[str]()
    step = calls_step(call_step(Query(query="a")), call_step(Query(query="a")))
    config = several(2, on_repeat=RepeatPolicy.REFUSE)
    await run_tool_loop(ScriptedCaller([step, done_step()]), agent, search, "q", config)
    assert RAN == ["a"]
    assert [c.repeats for c in agent.infos[1].prior_calls] == [None, 1]


async def test_a_repeat_inside_the_step_under_stop_ends_the_run_before_anything_runs() -> None:
    """Under STOP, a step repeating its own call ends STALEMATE and none of its calls run."""
    step = calls_step(call_step(Query(query="a")), call_step(Query(query="a")))
    result = await run_tool_loop(ScriptedCaller([step]), Executor[str](), search, "q", several(2))
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert RAN == []


async def test_a_step_may_run_some_calls_and_propose_others() -> None:
    """A read runs live and a delete in the same step becomes a proposal; the run stops at the proposal."""
    step = calls_step(call_step(Query(query="a"), tool=search), call_step(PathArgs(path="/tmp/x"), tool=delete))
    result = await run_tool_loop_tiered(ScriptedCaller([step]), Executor[str](), [search, delete], "q", several(2))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.PROPOSED)
    assert RAN == ["a"]
    assert result.items == ["A"]
    assert [p.tool_name for p in result.proposed] == ["delete"]


async def test_min_calls_counts_every_call_of_a_step() -> None:
    """Two calls that ran in one step satisfy min_calls=2: the next round may be done."""
    step = calls_step(call_step(Query(query="a")), call_step(Query(query="b")))
    config = several(2, min_calls=2)
    result = await run_tool_loop(ScriptedCaller([step, done_step()]), Executor[str](), search, "q", config)
    assert (result.stop_reason, result.rounds) == (StopReason.EXECUTOR_DONE, 2)


calls_strategy = st.lists(
    st.tuples(st.sampled_from(["search", "delete"]), st.integers(min_value=0, max_value=3)), min_size=1, max_size=4
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=calls_strategy, proceed=st.booleans())
async def test_no_gated_call_runs_without_its_approval_whatever_the_mix(
    calls: list[tuple[str, int]], proceed: bool
) -> None:
    """Whatever mix of live and gated calls a step carries, no gated call runs; every live one (not a repeat) does,
    and every gated one is proposed."""
    RAN.clear()
    made: list[dict[str, Any]] = []
    for name, n in calls:
        made.append(
            call_step(Query(query=f"q{n}"), tool=search)
            if name == "search"
            else call_step(PathArgs(path=f"/p{n}"), tool=delete)
        )
    config = several(
        4, on_repeat=RepeatPolicy.REFUSE, after_proposal=AfterProposal.CONTINUE if proceed else AfterProposal.STOP
    )
    caller = ScriptedCaller([calls_step(*made), done_step()])
    result = await run_tool_loop_tiered(caller, Executor[str](), [search, delete], "q", config)
    assert not any(ran.startswith("delete") for ran in RAN)
    if result.stop_reason is not StopReason.DEGENERATION:  # a repeat past repeat_refusals ends the step unrun
        assert sorted(RAN) == sorted({f"q{n}" for name, n in calls if name == "search"})
    wanted = {f"/p{n}" for name, n in calls if name == "delete"}
    assert {p.args.path for p in result.proposed} == wanted  # type: ignore[attr-defined]


async def test_a_run_of_several_calls_per_step_replays_offline() -> None:
    """A recorded run whose steps carry several calls (finished out of order) replays through ReplayCaller and
    its stand-ins, each call played back with its own batch, and ends as the recording did."""
    from agentkit.testing import ReplayCaller

    release = asyncio.Event()

    @tool(tier=Tier.READ_ONLY, name="search")
    async def slow(args: Query) -> list[str]:
        """Answer, the first call last."""
        if args.query == "a":
            await release.wait()
        else:
            release.set()
        return [args.query.upper()]

    step = calls_step(call_step(Query(query="a")), call_step(Query(query="b")), call_step(Query(query="retry")))
    recorded = await run_tool_loop(ScriptedCaller([step, done_step()]), Executor[str](), slow, "q", several())
    replay = ReplayCaller(recorded.checkpoint)
    again = await run_tool_loop(replay, Executor[str](), replay.tools(slow), "q", several())
    assert again.error is None, again.error
    replay.assert_complete()
    assert again.items == recorded.items == ["A", "B", "RETRY"]
    assert (again.stop_reason, again.rounds, again.usage) == (recorded.stop_reason, 2, recorded.usage)


def scratch(uses: int | None = 5) -> Grants:
    return Grants(
        [
            Grant.of(
                delete,
                where={"path": PathPrefix(prefix="/tmp/scratch")},
                max_uses=uses,
                allow_irreversible=True,
                granted_by="ops",
                reason="scratch files may go",
            )
        ]
    )


@pytest.mark.parametrize("repeated", ["a later search", "the granted call itself"])
async def test_a_step_that_ends_in_a_stalemate_runs_no_granted_call(repeated: str) -> None:
    """Under RepeatPolicy.STOP a repeat later in the step ends the run before any of its calls runs: a call a standing
    grant approved earlier in the step included."""
    wipe = call_step(PathArgs(path="/tmp/scratch/a"), tool=delete)
    if repeated == "a later search":
        step = calls_step(wipe, call_step(Query(query="q"), tool=search), call_step(Query(query="q"), tool=search))
    else:
        step = calls_step(wipe, call_step(PathArgs(path="/tmp/scratch/a"), tool=delete))
    config = several(on_repeat=RepeatPolicy.STOP)
    result = await run_tool_loop_tiered(
        ScriptedCaller([step, done_step()]), Executor[str](), [search, delete], "q", config, grants=scratch()
    )
    assert result.stop_reason is StopReason.DEGENERATION
    assert RAN == []


async def test_a_granted_call_keeps_its_place_in_the_trace_and_the_items() -> None:
    """A granted call runs once the step is checked, before its live calls, and is listed in the step's order."""
    step = calls_step(
        call_step(PathArgs(path="/tmp/scratch/a"), tool=delete),
        call_step(Query(query="q"), tool=search),
        call_step(PathArgs(path="/etc/passwd"), tool=delete),
    )
    result = await run_tool_loop_tiered(
        ScriptedCaller([step, done_step()]), Executor[str](), [search, delete], "q", several(), grants=scratch()
    )
    assert RAN == ["delete /tmp/scratch/a", "q"]
    assert [p.args.path for p in result.proposed] == ["/etc/passwd"]  # type: ignore[attr-defined]
    assert [r.call for r in result.trace[:3]] == [
        PathArgs(path="/tmp/scratch/a"),
        Query(query="q"),
        PathArgs(path="/etc/passwd"),
    ]
    assert result.items == ["/tmp/scratch/a", "Q"]


@pytest.mark.parametrize("n", [1, 3])
async def test_observers_see_a_granted_call_run(n: int) -> None:
    """A call a standing grant approved comes to the observers as a tool_call and its tool_result, as a live call
    does, in a one-call step and in a step of several."""
    seen: list[Event] = []

    class Seen(Observer):
        def on_event(self, event: Event) -> None:
            seen.append(event)

    step = call_step(PathArgs(path="/tmp/scratch/a"), tool=delete)
    caller = ScriptedCaller([calls_step(step) if n > 1 else step, done_step()])
    await run_tool_loop_tiered(
        caller, Executor[str](), [search, delete], "q", several(n), grants=scratch(), observer=Seen()
    )
    assert RAN == ["delete /tmp/scratch/a"]
    calls = [(e.kind, e.tool_name) for e in seen if isinstance(e, ToolCallStarted | ToolResultReturned)]
    assert calls == [("tool_call", "delete"), ("tool_result", "delete")]
    [returned] = [e for e in seen if isinstance(e, ToolResultReturned)]
    assert (returned.batch_size, returned.error) == (1, None)


EXEMPT = frozenset({"delete"})
"""`delete` exempt from the repeat guard: the same gated call twice in a step passes the guard."""


def entries_of(result: Any, outcome: RoundOutcome) -> list[Any]:
    return [e for e in result.checkpoint.entries if e.kind == "round" and e.outcome is outcome]


async def test_the_same_gated_call_twice_in_a_step_is_proposed_once() -> None:
    """Two identical gated calls of a repeat-exempt tool in one step give one proposal (one key, one decision);
    the second is recorded as its duplicate, not run, and the executor is told; approved, the call runs once."""
    from agentkit import approve, resume_tool_loop

    wipe = call_step(PathArgs(path="/srv/a"), tool=delete)
    config = several(2, repeat_exempt=EXEMPT)
    paused = await run_tool_loop_tiered(
        ScriptedCaller([calls_step(wipe, wipe)]), Executor[str](), [search, delete], "q", config
    )
    assert paused.stop_reason is StopReason.PROPOSED
    [proposal] = paused.proposed
    assert [e.call_digest for e in paused.checkpoint.proposals] == [proposal.digest]
    [duplicate] = entries_of(paused, RoundOutcome.REFUSED)
    assert (duplicate.position, duplicate.repeats) == (1, 1)
    agent = Executor[str]()
    decision = approve(proposal, approved_by="ops")
    resumed = await resume_tool_loop(
        ScriptedCaller([done_step()]), agent, [search, delete], "q", paused.checkpoint, [decision]
    )
    assert RAN == ["delete /srv/a"]
    assert resumed.items == ["/srv/a"]
    shown = agent.infos[0].prior_calls
    assert [(c.proposed, list(c.batch)) for c in shown] == [(False, ["/srv/a"]), (False, [])]
    assert shown[1].observation is not None
    assert "repeats call 1 of this step" in shown[1].observation


@pytest.mark.parametrize("uses", [1, 5])
async def test_a_duplicate_of_a_granted_call_neither_runs_nor_spends_a_use(uses: int) -> None:
    """A standing grant approves the first of two identical gated calls in a step: it runs once and counts one use;
    the second is its duplicate (not run, not granted, not left as a proposal nobody can decide)."""
    wipe = call_step(PathArgs(path="/tmp/scratch/a"), tool=delete)
    grants = scratch(uses)
    result = await run_tool_loop_tiered(
        ScriptedCaller([calls_step(wipe, wipe), done_step()]),
        Executor[str](),
        [search, delete],
        "q",
        several(2, repeat_exempt=EXEMPT),
        grants=grants,
    )
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert RAN == ["delete /tmp/scratch/a"]
    [held] = grants
    assert grants.uses(held.id) == 1
    assert (result.proposed, result.checkpoint.proposals) == ([], ())
    assert [e.position for e in entries_of(result, RoundOutcome.REFUSED)] == [1]


@pytest.mark.parametrize("repeated", ["a later search", "the granted call itself"])
async def test_a_step_that_ends_in_a_stalemate_spends_no_grant_use(repeated: str) -> None:
    """A repeat later in the step ends the run before the call a grant matched runs: the grant keeps its use, and
    the call is left a proposal, as the step's other gated calls are."""
    wipe = call_step(PathArgs(path="/tmp/scratch/a"), tool=delete)
    if repeated == "a later search":
        step = calls_step(wipe, call_step(Query(query="q"), tool=search), call_step(Query(query="q"), tool=search))
    else:
        step = calls_step(wipe, wipe)
    grants = scratch(1)
    result = await run_tool_loop_tiered(
        ScriptedCaller([step]), Executor[str](), [search, delete], "q", several(), grants=grants
    )
    assert result.stop_reason is StopReason.DEGENERATION
    assert RAN == []
    [held] = grants
    assert grants.uses(held.id) == 0
    assert [p.args.path for p in result.proposed] == ["/tmp/scratch/a"]  # type: ignore[attr-defined]


async def test_a_granted_call_left_unrun_by_a_failure_spends_no_use() -> None:
    """Two calls a grant matches in one step: the first fails and ends the run, so the second never runs; only the
    call that ran counts a use, and the other is left a proposal."""

    @tool(tier=Tier.IRREVERSIBLE, name="delete")
    def failing(args: PathArgs) -> list[str]:
        """Delete a path; the first one fails."""
        RAN.append(f"delete {args.path}")
        if args.path.endswith("/a"):
            raise RuntimeError("the disk is gone")
        return [args.path]

    step = calls_step(*(call_step(PathArgs(path=f"/tmp/scratch/{p}"), tool=failing) for p in "ab"))
    grants = scratch(5)
    result = await run_tool_loop_tiered(
        ScriptedCaller([step]), Executor[str](), [search, failing], "q", several(2), grants=grants
    )
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert RAN == ["delete /tmp/scratch/a"]
    [held] = grants
    assert grants.uses(held.id) == 1
    assert [p.args.path for p in result.proposed] == ["/tmp/scratch/b"]  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=4))
async def test_every_proposal_of_a_step_has_its_own_key_and_runs_once_approved(paths: list[int]) -> None:
    """Whatever gated calls of a repeat-exempt tool a step repeats, its proposals have distinct keys, the run waits
    on each of them, and approving them all runs each distinct call exactly once."""
    from agentkit import approve, resume_tool_loop

    RAN.clear()
    config = several(4, repeat_exempt=EXEMPT)
    step = calls_step(*(call_step(PathArgs(path=f"/p{n}"), tool=delete) for n in paths))
    paused = await run_tool_loop_tiered(ScriptedCaller([step]), Executor[str](), [search, delete], "q", config)
    digests = [p.digest for p in paused.proposed]
    assert len(set(digests)) == len(digests) == len(set(paths))
    assert sorted(e.call_digest or "" for e in paused.checkpoint.proposals) == sorted(digests)
    decisions = [approve(p, approved_by="ops") for p in paused.proposed]
    await resume_tool_loop(
        ScriptedCaller([done_step()]), Executor[str](), [search, delete], "q", paused.checkpoint, decisions
    )
    assert sorted(RAN) == sorted(f"delete /p{n}" for n in set(paths))
