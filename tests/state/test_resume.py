"""Checkpoints and resume_tool_loop: a tiered run continues after a human decides, through the same loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    Approval,
    LoopConfig,
    Observer,
    Outcome,
    Rejection,
    RepeatPolicy,
    RunCheckpoint,
    StopReason,
    Tier,
    TieredLoopResult,
    ToolRoundInfo,
    Usage,
    UsageError,
    approve,
    reject,
    resume_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._codec import Codec, item_type_of
from agentkit._runner import pending_proposals
from agentkit._state import STATE_VERSION as CHECKPOINT_VERSION
from agentkit.errors import ResumeRefused
from agentkit.events import Event, RoundStarted, RunFinished, RunStarted
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Doc, Executor, PathArgs, Query, Recording, rechained


def config(**kwargs: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, **kwargs)


def tools() -> tuple[Recording, Recording]:
    return Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)


def search_step(query: str) -> dict[str, Any]:
    return call_step(Query(query=query), tool="search")


def delete_step(path: str) -> dict[str, Any]:
    return call_step(PathArgs(path=path), tool="delete", rationale=f"{path} is stale")


async def proposed_run(
    steps: Sequence[Any], cfg: LoopConfig | None = None
) -> tuple[ScriptedCaller, Recording, Recording, TieredLoopResult[BaseModel, Doc]]:
    """A run over search and delete that stops at its first proposal; the caller keeps the rest of the script."""
    search, delete = tools()
    caller = ScriptedCaller(steps)
    result = await run_tool_loop_tiered(caller, Executor[Doc](), [search, delete], "ctx", cfg or config())
    assert result.stop_reason is StopReason.PROPOSED
    return caller, search, delete, result


async def test_every_tiered_result_carries_a_checkpoint() -> None:
    """A finished tiered run carries a checkpoint that records its end and cannot be resumed."""
    search, delete = tools()
    caller = ScriptedCaller([search_step("a"), done_step()])
    result = await run_tool_loop_tiered(caller, Executor[Doc](), [search, delete], "ctx", config())
    checkpoint = result.checkpoint
    assert (checkpoint.run_id, checkpoint.finished, checkpoint.stop_reason) == (
        result.run_id,
        True,
        StopReason.EXECUTOR_DONE,
    )
    assert (checkpoint.rounds, checkpoint.usage.requests) == (2, 2)
    assert [(c.tool, c.ran, c.batch) for c in checkpoint.progress.calls] == [("search", True, '[{"id":"search:1"}]')]
    assert [(t.name, t.tier) for t in checkpoint.tools] == [("search", Tier.READ_ONLY), ("delete", Tier.IRREVERSIBLE)]


async def test_checkpoint_holds_the_run_state_and_round_trips_through_json() -> None:
    """A run stopped at a proposal: calls, batches, proposals with digests, window and config survive JSON."""
    _, _, _, result = await proposed_run([search_step("a"), delete_step("/x")], config(max_rounds=5))
    checkpoint = result.checkpoint
    assert RunCheckpoint.model_validate_json(checkpoint.model_dump_json()) == checkpoint
    assert (checkpoint.version, checkpoint.finished, checkpoint.rounds, checkpoint.usage.requests) == (
        CHECKPOINT_VERSION,
        False,
        2,
        2,
    )
    assert [(c.tool, c.ran, c.proposed, c.batch, c.counted) for c in checkpoint.progress.calls] == [
        ("search", True, False, '[{"id":"search:1"}]', True),
        ("delete", False, True, None, True),
    ]
    assert [(p.tool, p.args, p.call_digest) for p in checkpoint.proposals] == [
        ("delete", '{"path":"/x"}', result.proposed[0].digest)
    ]
    assert checkpoint.config.rebuild() == config(max_rounds=5)
    checkpoint.verify()
    assert checkpoint.digest == checkpoint.entries[-1].digest


async def test_approved_call_runs_once_and_the_executor_sees_its_result() -> None:
    """The approved call runs once before the next round; its batch is that call's result and joins the items."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    agent = Executor[Doc]()
    approval = approve(first.proposed[0], approved_by="ops")
    result = await resume_tool_loop(caller, agent, [search, delete], "ctx", first.checkpoint, [approval])
    assert delete.calls == [PathArgs(path="/x")]
    assert approval.executed
    assert result.items == [Doc(id="search:1"), Doc(id="delete:1")]
    assert (result.outcome, result.stop_reason, result.run_id, result.rounds) == (
        Outcome.APPLIED,
        StopReason.EXECUTOR_DONE,
        first.run_id,
        3,
    )
    [info] = agent.infos
    assert info.round == 3
    assert info.prior_results == ((Doc(id="search:1"),), (Doc(id="delete:1"),))
    shown = info.prior_calls[1]
    assert (shown.tool_name, shown.batch, shown.observation, shown.proposed) == (
        "delete",
        (Doc(id="delete:1"),),
        None,
        False,
    )
    assert info.proposals == ()
    assert result.usage.requests == 3
    assert result.checkpoint.finished


async def test_rejection_is_the_calls_observation_with_the_reason() -> None:
    """A rejected proposal never runs; the executor sees the reviewer and the reason as that call's observation."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    agent = Executor[Doc]()
    rejection = reject(first.proposed[0], rejected_by="bob", reason="still in use")
    result = await resume_tool_loop(caller, agent, [search, delete], "ctx", first.checkpoint, [rejection])
    assert delete.calls == []
    shown = agent.infos[0].prior_calls[1]
    assert (shown.observation, shown.batch, shown.proposed) == ("rejected by bob: still in use", (), False)
    assert agent.infos[0].prior_results == ((Doc(id="search:1"),),)
    assert result.items == [Doc(id="search:1")]


async def test_a_resumed_run_can_stop_at_a_new_proposal_and_resume_again() -> None:
    """A resumed run that proposes again carries a resumable checkpoint under the same run id."""
    steps = [delete_step("/x"), delete_step("/y"), done_step()]
    caller, search, delete, first = await proposed_run(steps)
    group = [search, delete]
    agent = Executor[Doc]()
    second = await resume_tool_loop(
        caller, agent, group, "ctx", first.checkpoint, [approve(first.proposed[0], approved_by="a")]
    )
    assert (second.stop_reason, second.run_id, second.checkpoint.finished) == (StopReason.PROPOSED, first.run_id, False)
    assert [p.args for p in second.proposed] == [PathArgs(path="/y")]
    loaded = RunCheckpoint.model_validate_json(second.checkpoint.model_dump_json())
    third = await resume_tool_loop(caller, agent, group, "ctx", loaded, [approve(second.proposed[0], approved_by="a")])
    assert delete.calls == [PathArgs(path="/x"), PathArgs(path="/y")]
    assert third.items == [Doc(id="delete:1"), Doc(id="delete:2")]
    assert (third.rounds, third.stop_reason) == (3, StopReason.EXECUTOR_DONE)


async def test_round_ceiling_continues_from_the_checkpoint() -> None:
    """A resumed run gets only the rounds the ceiling leaves, as an uninterrupted run would."""
    steps = [search_step("a"), delete_step("/x"), search_step("b"), search_step("c"), done_step()]
    caller, search, delete, first = await proposed_run(steps, config(max_rounds=3))
    approval = approve(first.proposed[0], approved_by="ops")
    result = await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [approval])
    assert (result.rounds, result.stop_reason) == (3, StopReason.ROUND_CEILING)
    assert caller.remaining == 2, "only round 3 may ask the model"
    assert [r.round for r in result.trace] == [3]


async def test_token_budget_continues_from_the_checkpoint() -> None:
    """The tokens spent before the proposal count against the budget of the resumed run."""
    used = Usage(requests=1, input_tokens=50, output_tokens=10)
    steps = [ScriptedReply(value=delete_step("/x"), usage=used), ScriptedReply(value=done_step(), usage=used)]
    caller, search, delete, first = await proposed_run(steps, config(token_budget=100))
    approval = approve(first.proposed[0], approved_by="ops")
    result = await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [approval])
    assert (result.stop_reason, result.usage.total_tokens) == (StopReason.BUDGET_EXHAUSTED, 60)
    assert caller.remaining == 1, "60 spent plus a 60-token round would pass the budget of 100"
    assert delete.calls == [PathArgs(path="/x")]


async def test_degeneration_window_continues_from_the_checkpoint() -> None:
    """A call repeated across the pause is still a repeat."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), search_step("a")])
    rejection = reject(first.proposed[0], rejected_by="bob")
    result = await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [rejection])
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert search.calls == [Query(query="a")]


async def test_failing_approved_call_ends_the_resumed_run_with_its_error() -> None:
    """An approved call whose tool fails ends the run TOOL_ERROR before any model call; items are kept."""

    class Broken(Recording):
        async def call(self, args: BaseModel) -> Sequence[Doc]:
            raise OSError("disk gone")

    search, broken = Recording("search", Tier.READ_ONLY), Broken("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([search_step("a"), delete_step("/x"), done_step()])
    first = await run_tool_loop_tiered(caller, Executor[Doc](), [search, broken], "ctx", config())
    approval = approve(first.proposed[0], approved_by="ops")
    result = await resume_tool_loop(caller, Executor[Doc](), [search, broken], "ctx", first.checkpoint, [approval])
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "disk gone" in str(result.error)
    assert (result.items, caller.remaining) == ([Doc(id="search:1")], 1)


async def test_observers_see_the_resumed_leg_under_the_same_run_id() -> None:
    """A resumed run starts, rounds and finishes under the checkpoint's run id, with its round numbers."""

    class Seen(Observer):
        def __init__(self) -> None:
            self.events: list[Event] = []

        def on_event(self, event: Event) -> None:
            self.events.append(event)

    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    seen = Seen()
    approval = approve(first.proposed[0], approved_by="ops")
    group = [search, delete]
    await resume_tool_loop(caller, Executor[Doc](), group, "ctx", first.checkpoint, [approval], observer=seen)
    assert {event.run_id for event in seen.events} == {first.run_id}
    assert [type(e).__name__ for e in seen.events if isinstance(e, RunStarted | RoundStarted | RunFinished)] == [
        "RunStarted",
        "RoundStarted",
        "RunFinished",
    ]
    [started] = [e.info for e in seen.events if isinstance(e, RoundStarted)]
    assert isinstance(started, ToolRoundInfo)
    assert (started.round, len(started.prior_calls)) == (3, 2)


async def test_observers_see_the_approved_call_of_a_resumed_leg_run() -> None:
    """The approved call a resumed leg runs comes to its observers as a tool_call and its tool_result, after the
    leg's start and before its first round, as the journal-derived feed shows it."""
    caller, search, delete, first = await proposed_run([delete_step("/x"), done_step()])
    seen: list[Event] = []

    class Seen(Observer):
        def on_event(self, event: Event) -> None:
            seen.append(event)

    approval = approve(first.proposed[0], approved_by="ops")
    await resume_tool_loop(
        caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [approval], observer=Seen()
    )
    kinds = [event.kind for event in seen]
    assert kinds[:4] == ["run_start", "tool_call", "tool_result", "round_start"]
    assert [getattr(event, "tool_name", None) for event in seen[1:3]] == ["delete", "delete"]


async def test_deadline_counts_the_run_time_spent_before_the_pause() -> None:
    """Run time recorded in the checkpoint counts against the deadline; the approved call still runs first."""
    caller, search, delete, first = await proposed_run([delete_step("/x"), done_step()], config(deadline=60))
    spent = rechained(first.checkpoint, entry=len(first.checkpoint.entries) - 1, elapsed=61.0)
    approval = approve(first.proposed[0], approved_by="ops")
    result = await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", spent, [approval])
    assert (result.stop_reason, caller.remaining, delete.calls) == (StopReason.DEADLINE, 1, [PathArgs(path="/x")])


# Bad input: each refused with an error naming the problem, nothing run.


def nothing_ran(caller: ScriptedCaller, search: Recording, delete: Recording, left: int) -> None:
    assert (caller.remaining, len(search.calls), delete.calls) == (left, 1, [])


async def test_checkpoint_edited_by_hand_is_refused() -> None:
    """A checkpoint whose content no longer matches its digest is refused."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    data = json.loads(first.checkpoint.model_dump_json())
    data["entries"][0]["requests"] = 0
    edited = RunCheckpoint.model_validate_json(json.dumps(data))
    with pytest.raises(ResumeRefused, match="does not match its digests from entry 0 on"):
        await resume_tool_loop(
            caller, Executor[Doc](), [search, delete], "ctx", edited, [approve(first.proposed[0], approved_by="a")]
        )
    nothing_ran(caller, search, delete, 1)


async def test_checkpoint_of_another_version_is_refused() -> None:
    """A checkpoint written under another schema version is refused, even with a matching digest."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    other = rechained(first.checkpoint, version=CHECKPOINT_VERSION + 1)
    with pytest.raises(ResumeRefused, match=f"schema version {CHECKPOINT_VERSION + 1}"):
        await resume_tool_loop(
            caller, Executor[Doc](), [search, delete], "ctx", other, [approve(first.proposed[0], approved_by="a")]
        )
    nothing_ran(caller, search, delete, 1)


async def test_decision_for_a_proposal_the_checkpoint_does_not_hold_is_refused() -> None:
    """A decision from another run is refused, naming the call."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    _, _, _, other = await proposed_run([delete_step("/elsewhere")])
    decisions = [approve(first.proposed[0], approved_by="a"), approve(other.proposed[0], approved_by="a")]
    with pytest.raises(ResumeRefused, match="does not hold"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, decisions)
    nothing_ran(caller, search, delete, 1)


async def test_pending_proposal_without_a_decision_is_refused() -> None:
    """Resuming without a decision for a pending proposal names the proposal."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    with pytest.raises(ResumeRefused, match=r"no decision for the proposed call to 'delete' in round 2"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [])
    nothing_ran(caller, search, delete, 1)


async def test_two_decisions_or_a_spent_approval_are_refused() -> None:
    """Approving and rejecting the same proposal, or reusing a spent approval, is refused."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    approval = approve(first.proposed[0], approved_by="a")
    both: list[Approval[Any] | Rejection[Any]] = [approval, reject(first.proposed[0], rejected_by="b")]
    with pytest.raises(ResumeRefused, match="two decisions"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, both)
    await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [approval])
    with pytest.raises(ResumeRefused, match="already executed"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, [approval])
    assert delete.calls == [PathArgs(path="/x")]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("missing", "tool 'delete' is missing"),
        ("tier", "tool 'delete' now declares Tier.REVERSIBLE, the run had Tier.IRREVERSIBLE"),
        ("extra", "tool 'fetch' was not in the run"),
    ],
)
async def test_different_tool_set_is_refused_before_any_model_call(change: str, problem: str) -> None:
    """A missing tool, a changed tier or an added tool is refused before any model call or tool run."""
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x"), done_step()])
    group: list[Recording] = [search, delete]
    if change == "missing":
        group = [search]
    elif change == "tier":
        delete.tier = Tier.REVERSIBLE
    else:
        group.append(Recording("fetch", Tier.READ_ONLY))
    with pytest.raises(ResumeRefused, match=problem):
        await resume_tool_loop(
            caller, Executor[Doc](), group, "ctx", first.checkpoint, [approve(first.proposed[0], approved_by="a")]
        )
    nothing_ran(caller, search, delete, 1)


async def test_resuming_a_finished_run_is_refused() -> None:
    """A run that ended for any reason but a proposal is finished; so is a result built by hand."""
    search, delete = tools()
    caller = ScriptedCaller([search_step("a"), done_step(), done_step()])
    done = await run_tool_loop_tiered(caller, Executor[Doc](), [search, delete], "ctx", config())
    with pytest.raises(ResumeRefused, match=r"is finished \(executor_done\)"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", done.checkpoint, [])
    by_hand: TieredLoopResult[BaseModel, Doc] = TieredLoopResult(
        items=[], outcome=Outcome.SILENT, stop_reason=StopReason.NOTHING_RETRIEVED
    )
    with pytest.raises(ResumeRefused, match="no run recorded"):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", by_hand.checkpoint, [])
    assert caller.remaining == 1


# Item types: read from the tool, checked before the first model call when a checkpoint is needed.


class Handle:
    """An item JSON cannot carry."""


@tool(tier=Tier.IRREVERSIBLE)
def drop(args: PathArgs) -> list[Doc]:
    """Drop a path."""
    return [Doc(id=args.path)]


@tool(tier=Tier.READ_ONLY)
def open_handle(args: Query) -> list[Handle]:
    """Open a handle."""
    return [Handle()]


def test_item_type_is_read_from_the_tool() -> None:
    """A FunctionTool's return annotation, a Tool's call annotation, or its result_type attribute."""
    recording = Recording("search", Tier.READ_ONLY)
    assert (item_type_of(drop), item_type_of(open_handle), item_type_of(recording)) == (Doc, Handle, Doc)
    recording.result_type = Query  # type: ignore[attr-defined]  # the optional declaration a Tool may carry
    assert item_type_of(recording) is Query


async def test_tool_whose_items_cannot_round_trip_is_refused_before_the_first_model_call() -> None:
    """A tiered run that may stop at a proposal refuses a tool whose item type JSON cannot carry."""
    caller = ScriptedCaller([done_step()])
    with pytest.raises(UsageError, match=r"tool 'open_handle' returns Handle items, which cannot round-trip"):
        await run_tool_loop_tiered(caller, Executor[Any](), [open_handle, drop], "ctx", config())
    assert caller.remaining == 1


async def test_tool_declaring_no_item_type_is_refused_when_a_checkpoint_is_needed() -> None:
    """An untyped tool is refused only where the run could stop at a proposal (STOP and a gated tool)."""

    class Untyped(Recording):
        async def call(self, args: BaseModel):  # type: ignore[no-untyped-def]  # the point: no return annotation
            return [Doc(id="x")]

    caller = ScriptedCaller([done_step(), done_step()])
    with pytest.raises(UsageError, match=r"tool 'raw' declares no item type"):
        await run_tool_loop_tiered(caller, Executor[Doc](), [Untyped("raw", Tier.READ_ONLY), drop], "ctx", config())
    # Nothing gated, or CONTINUE: no resumable checkpoint is needed, so the run goes ahead.
    await run_tool_loop_tiered(caller, Executor[Doc](), Untyped("raw", Tier.READ_ONLY), "ctx", config())
    after = config(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Executor[Doc](), [Untyped("raw", Tier.READ_ONLY), drop], "ctx", after)
    assert (result.checkpoint.finished, caller.remaining) == (True, 0)


async def test_item_not_of_the_declared_type_is_the_tools_error() -> None:
    """A batch the checkpoint could not give back (an item of another type) ends the run TOOL_ERROR."""

    class Liar(Recording):
        async def call(self, args: BaseModel) -> Sequence[Doc]:
            return [Query(query="not a doc")]  # type: ignore[list-item]  # the tool breaks its own declaration

    caller = ScriptedCaller([search_step("a"), done_step()])
    result = await run_tool_loop_tiered(
        caller, Executor[Doc](), [Liar("search", Tier.READ_ONLY), drop], "ctx", config()
    )
    assert (result.stop_reason, result.items) == (StopReason.TOOL_ERROR, [])
    assert "not of its declared item type" in str(result.error)


# End to end over HTTP: a resumed run asks the model no more than an uninterrupted one.


async def test_resume_over_http_asks_the_model_only_for_the_rounds_left() -> None:
    """Against the fake OpenAI server: 2 requests to the proposal, 1 after resume, each counted server-side."""
    search, delete = tools()
    replies = [FakeReply.value(search_step("a")), FakeReply.value(delete_step("/x")), FakeReply.value(done_step())]
    async with FakeOpenAIServer(replies) as server, openai.AsyncOpenAI(base_url=server.base_url, api_key="x") as client:
        caller = OpenAICaller(client, max_reasks=0)
        first = await run_tool_loop_tiered(caller, Executor[Doc](), [search, delete], "ctx", config())
        assert (first.stop_reason, len(server.requests)) == (StopReason.PROPOSED, 2)
        stored = first.checkpoint.model_dump_json()
        approval = approve(first.proposed[0], approved_by="ops")
        checkpoint = RunCheckpoint.model_validate_json(stored)
        result = await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", checkpoint, [approval])
        server.assert_no_errors()
        assert len(server.requests) == 3
    assert (result.stop_reason, result.rounds, result.usage.requests) == (StopReason.EXECUTOR_DONE, 3, 3)
    assert result.usage.input_tokens > first.usage.input_tokens
    assert (search.calls, delete.calls) == ([Query(query="a")], [PathArgs(path="/x")])


# Property: the calls run on resume are exactly the approved proposals, each once.


step_strategy = st.one_of(
    st.sampled_from("abcd").map(lambda q: ("search", q)),
    st.sampled_from("wxyz").map(lambda p: ("delete", p)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(step_strategy, max_size=8), verdicts=st.lists(st.booleans(), min_size=8, max_size=8))
def test_resume_runs_exactly_the_approved_proposals_once(script: list[tuple[str, str]], verdicts: list[bool]) -> None:
    """For random scripts and decisions: the gated calls that ran are exactly the approved ones, in order, once each."""

    async def scenario() -> None:
        search, delete = tools()
        steps = [search_step(v) if name == "search" else delete_step(v) for name, v in script] + [done_step()]
        caller = ScriptedCaller(steps)
        group = [search, delete]
        result = await run_tool_loop_tiered(caller, Executor[Doc](), group, "ctx", config(max_rounds=None))
        approved: list[BaseModel] = []
        decisions = iter(verdicts)
        while result.stop_reason is StopReason.PROPOSED:
            [proposal] = result.proposed
            assert delete.calls == approved, "no gated call runs before its approval"
            if next(decisions):
                decision: Any = approve(proposal, approved_by="ops")
                approved.append(proposal.args)
            else:
                decision = reject(proposal, rejected_by="ops", reason="no")
            checkpoint = RunCheckpoint.model_validate_json(result.checkpoint.model_dump_json())
            result = await resume_tool_loop(caller, Executor[Doc](), group, "ctx", checkpoint, [decision])
        assert delete.calls == approved

    asyncio.run(scenario())


async def test_a_resumed_run_keeps_its_repeat_policy_and_the_rounds_a_refusal_names() -> None:
    """Under RepeatPolicy.REFUSE, a repeat after resuming is refused naming the round before the proposal."""
    cfg = config(on_repeat=RepeatPolicy.REFUSE, repeat_refusals=1, max_rounds=6)
    caller, search, delete, first = await proposed_run([search_step("a"), delete_step("/x")], cfg)
    assert first.checkpoint.config.rebuild() == cfg
    assert [c.round for c in first.checkpoint.progress.calls if c.counted] == [1, 2]
    again = RunCheckpoint.model_validate_json(first.checkpoint.model_dump_json())
    caller.add(search_step("a"), search_step("a"))
    agent = Executor[Doc]()
    decision = reject(first.proposed[0], rejected_by="ops", reason="keep it")
    result = await resume_tool_loop(caller, agent, [search, delete], "ctx", again, [decision])
    assert len(search.calls) == 1
    assert agent.infos[-1].prior_calls[-1].repeats == 1
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)


def never_same(a: BaseModel, b: BaseModel) -> bool:
    """A repeat comparator under which no call repeats another."""
    return False


def always_same(a: BaseModel, b: BaseModel) -> bool:
    return True


async def test_a_resume_without_the_runs_repeat_comparator_or_with_another_is_refused() -> None:
    """``same=`` is recorded (by name) and checked on resume: resuming without it, with another one, or with one
    the run lacked is refused naming both and the fix, before anything runs; with it, the run goes on under it."""
    search, delete = tools()
    caller = ScriptedCaller([search_step("a"), delete_step("/x"), search_step("a"), done_step()])
    first = await run_tool_loop_tiered(caller, Executor[Doc](), [search, delete], "ctx", config(), same=never_same)
    assert first.checkpoint.same == f"{__name__}.never_same"
    decision = [reject(first.proposed[0], rejected_by="ops")]
    with pytest.raises(ResumeRefused, match=rf"compared repeats with {__name__}\.never_same; pass it again as same="):
        await resume_tool_loop(caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, decision)
    with pytest.raises(ResumeRefused, match=rf"never_same, not {__name__}\.always_same; pass the same function"):
        await resume_tool_loop(
            caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, decision, same=always_same
        )
    assert (len(search.calls), caller.remaining) == (1, 2)  # nothing ran, no model call made
    result = await resume_tool_loop(
        caller, Executor[Doc](), [search, delete], "ctx", first.checkpoint, decision, same=never_same
    )
    assert result.stop_reason is StopReason.EXECUTOR_DONE  # "a" again is no repeat under never_same
    assert result.checkpoint.same == first.checkpoint.same

    _, search2, delete2, plain = await proposed_run([search_step("a"), delete_step("/x")])
    assert plain.checkpoint.same is None
    with pytest.raises(ResumeRefused, match=r"by value \(no same=\), not with .*never_same; resume without same="):
        await resume_tool_loop(
            caller, Executor[Doc](), [search2, delete2], "ctx", plain.checkpoint, decision, same=never_same
        )


async def test_a_state_recorded_before_the_comparator_was_kept_still_verifies_and_resumes() -> None:
    """A state an agentkit before ``same`` was recorded wrote (no ``same`` in its header) reads back, its digests
    verify, and it resumes with the default comparator; a header with one is digested with it."""
    old = RunCheckpoint.model_validate_json(
        (Path(__file__).parent / "states" / "proposed-before-same.json").read_text()
    )
    assert (old.same, old.stop_reason) == (None, StopReason.PROPOSED)
    old.verify()
    search, delete = tools()
    [(_, proposal)] = pending_proposals(old, Codec({"search": search, "delete": delete}))
    decision = [reject(proposal, rejected_by="ops")]
    result = await resume_tool_loop(
        ScriptedCaller([search_step("a")]), Executor[Doc](), [search, delete], "ctx", old, decision
    )
    assert result.stop_reason is StopReason.DEGENERATION  # the default comparator: "a" again repeats round 1
    with pytest.raises(ResumeRefused, match="resume without same="):
        await resume_tool_loop(
            ScriptedCaller([]), Executor[Doc](), [search, delete], "ctx", old, decision, same=never_same
        )
    named = RunCheckpoint.start("r", config(), old.tools, same="m.f")
    assert named.head_digest() != RunCheckpoint.start("r", config(), old.tools).head_digest()
    data = json.loads(named.model_dump_json())
    data["same"] = "m.g"
    with pytest.raises(ResumeRefused, match="does not match its digest"):
        RunCheckpoint.model_validate_json(json.dumps(data)).verify()
