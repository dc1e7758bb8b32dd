"""run_tool_loop_tiered: every call is gated by its own tool's declared tier before it runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Outcome,
    Prompt,
    ProposedAction,
    StopReason,
    Tier,
    ToolRoundInfo,
    UsageError,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._proposals import call_digest
from agentkit.errors import MissingTierError, StructuredOutputError
from agentkit.events import ProposalCaptured, ToolCallStarted
from agentkit.testing import ScriptedCaller, call_step, calls_step, done_step
from tests.support import NO_WAIT, Doc, Executor, PathArgs, Query, Recording

TIER_NAMES = ("Tier.READ_ONLY", "Tier.REVERSIBLE", "Tier.EXTERNAL_REVERSIBLE", "Tier.IRREVERSIBLE")


class Agent(Executor[Doc]):
    """The executor of these tests: records what it is shown each round."""

    def __init__(self) -> None:
        super().__init__("planner", system="plan the clean-up")


def config(**kwargs: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, **kwargs)


async def test_read_only_call_runs_live() -> None:
    """A read-only call runs under the default ceiling and its batch becomes items."""
    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    result = await run_tool_loop_tiered(caller, Agent(), search, "ctx", config())
    assert search.calls == [Query(query="a")]
    assert result.items == [Doc(id="search:1")]
    assert (result.outcome, result.stop_reason, result.proposed) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, [])


async def test_reversible_call_runs_under_default_ceiling() -> None:
    """The default ceiling is Tier.REVERSIBLE, so a reversible call runs live."""
    archive = Recording("archive", Tier.REVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/a")), done_step()])
    result = await run_tool_loop_tiered(caller, Agent(), archive, "ctx", config())
    assert archive.calls == [PathArgs(path="/a")]
    assert result.proposed == []


@pytest.mark.parametrize("tier", [Tier.EXTERNAL_REVERSIBLE, Tier.IRREVERSIBLE])
async def test_dangerous_call_becomes_proposal_and_stops(tier: Tier) -> None:
    """An external-reversible or irreversible call is not executed; it is proposed and the run stops."""
    delete = Recording("delete", tier, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/tmp/x"), rationale="stale file"), done_step()])
    result = await run_tool_loop_tiered(caller, Agent(), delete, "ctx", config())
    assert delete.calls == []
    assert (result.outcome, result.stop_reason, result.error) == (Outcome.APPLIED, StopReason.PROPOSED, None)
    assert [p.tool_name for p in result.proposed] == ["delete"]
    assert caller.remaining == 1, "the loop must stop at the proposal by default"


@pytest.mark.parametrize("tier", [Tier.EXTERNAL_REVERSIBLE, Tier.IRREVERSIBLE])
async def test_floor_policy_holds_whatever_the_ceiling(tier: Tier) -> None:
    """Even with autonomy=IRREVERSIBLE, external-reversible and irreversible calls are only proposed."""
    delete = Recording("delete", tier, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/x"))])
    result = await run_tool_loop_tiered(caller, Agent(), delete, "ctx", config(autonomy=Tier.IRREVERSIBLE))
    assert delete.calls == []
    assert result.stop_reason is StopReason.PROPOSED


async def test_call_above_a_lowered_ceiling_becomes_proposal() -> None:
    """With autonomy=READ_ONLY a reversible call is proposed, not run."""
    archive = Recording("archive", Tier.REVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/a"))])
    result = await run_tool_loop_tiered(caller, Agent(), archive, "ctx", config(autonomy=Tier.READ_ONLY))
    assert archive.calls == []
    assert [(p.tool_name, p.tier) for p in result.proposed] == [("archive", Tier.REVERSIBLE)]


async def test_proposal_carries_the_exact_call() -> None:
    """A proposal holds the typed args, the tier, rationale, round, run id, a UTC time and the call's digest."""
    search = Recording("search", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller(
        [call_step(Query(query="old"), tool="search"), call_step(PathArgs(path="/old"), tool="delete", rationale="r")]
    )
    result = await run_tool_loop_tiered(caller, Agent(), [search, delete], "ctx", config())
    (proposal,) = result.proposed
    assert isinstance(proposal.args, PathArgs)
    assert proposal.args == PathArgs(path="/old")
    assert (proposal.tool_name, proposal.tier, proposal.rationale, proposal.round) == (
        "delete",
        Tier.IRREVERSIBLE,
        "r",
        2,
    )
    assert proposal.run_id == result.run_id != ""
    assert proposal.created_at.tzinfo is UTC
    assert proposal.digest == call_digest("delete", PathArgs(path="/old"))
    assert proposal.digest_matches()


async def test_proposal_from_loop_round_trips_through_json() -> None:
    """A loop's proposal reloads from its JSON as an equal ProposedAction of the tool's args type."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/x"))])
    (proposal,) = (await run_tool_loop_tiered(caller, Agent(), delete, "ctx", config())).proposed
    reloaded = ProposedAction[PathArgs].model_validate_json(proposal.model_dump_json())
    assert reloaded == proposal
    assert isinstance(reloaded.args, PathArgs)


async def test_after_proposal_continue_tells_the_executor_and_goes_on() -> None:
    """With CONTINUE the executor learns the call awaits approval, keeps gathering and may propose again."""
    search = Recording("search", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    agent = Agent()
    caller = ScriptedCaller(
        [
            call_step(PathArgs(path="/a"), tool="delete"),
            call_step(Query(query="more"), tool="search"),
            call_step(PathArgs(path="/b"), tool="delete"),
            done_step("proposed both"),
        ]
    )
    cfg = config(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, agent, [search, delete], "ctx", cfg)
    caller.assert_complete()
    assert delete.calls == []
    assert search.calls == [Query(query="more")]
    assert [p.args for p in result.proposed] == [PathArgs(path="/a"), PathArgs(path="/b")]
    assert [p.round for p in result.proposed] == [1, 3]
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert result.items == [Doc(id="search:1")]
    assert [len(info.proposals) for info in agent.infos] == [0, 1, 1, 2]
    assert agent.infos[1].proposals == (result.proposed[0],)
    told = agent.infos[1].prior_calls[-1]
    assert (told.tool_name, told.proposed, told.batch) == ("delete", True, ())
    assert told.observation is not None
    assert "approval" in told.observation


async def test_continue_with_only_proposals_is_applied_not_silent() -> None:
    """A run that gathered nothing but proposed something ended APPLIED: it worked out what to do."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/a")), done_step()])
    result = await run_tool_loop_tiered(caller, Agent(), delete, "ctx", config(after_proposal=AfterProposal.CONTINUE))
    assert (result.outcome, result.stop_reason, len(result.proposed)) == (
        Outcome.APPLIED,
        StopReason.EXECUTOR_DONE,
        1,
    )


async def test_repeated_proposal_is_a_stalemate() -> None:
    """Proposing the same call again (CONTINUE) trips the degeneration guard; it is proposed once."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/a")), call_step(PathArgs(path="/a"))])
    result = await run_tool_loop_tiered(caller, Agent(), delete, "ctx", config(after_proposal=AfterProposal.CONTINUE))
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert len(result.proposed) == 1


class _NoTierAttribute:
    name = "wipe"
    description = "wipe everything"
    args_type = PathArgs

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, args: PathArgs) -> Sequence[Doc]:
        self.calls += 1
        return []


@pytest.mark.parametrize("tier", [None, "read_only", 0, 1.0, True], ids=repr)
async def test_tool_whose_tier_is_not_a_tier_is_never_called(tier: object) -> None:
    """A tier that is None or not a Tier ends the run ERROR / TOOL_DECLARES_NO_TIER before any model call."""
    wipe = Recording("wipe", tier, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/"))])
    result = await run_tool_loop_tiered(caller, Agent(), wipe, "ctx", config())
    assert wipe.calls == []
    assert caller.requests == []
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)
    assert isinstance(result.error, MissingTierError)
    assert result.error.tool_name == "wipe"
    assert "'wipe'" in str(result.error)
    assert all(name in str(result.error) for name in TIER_NAMES)


async def test_tool_without_a_tier_attribute_is_never_called() -> None:
    """A tool object with no tier attribute at all is refused the same way."""
    wipe = _NoTierAttribute()
    caller = ScriptedCaller([call_step(PathArgs(path="/"))])
    result = await run_tool_loop_tiered(caller, Agent(), wipe, "ctx", config())  # type: ignore[call-overload]  # no tier on purpose
    assert wipe.calls == 0
    assert result.stop_reason is StopReason.TOOL_DECLARES_NO_TIER


async def test_one_tierless_tool_in_a_set_refuses_the_whole_run() -> None:
    """In a multi-tool set, one tool without a tier ends the run before the others run either."""
    search = Recording("search", Tier.READ_ONLY)
    wipe = Recording("wipe", None, PathArgs)
    caller = ScriptedCaller([call_step(Query(query="a"), tool="search")])
    result = await run_tool_loop_tiered(caller, Agent(), [search, wipe], "ctx", config())
    assert (search.calls, wipe.calls, caller.requests) == ([], [], [])
    assert result.stop_reason is StopReason.TOOL_DECLARES_NO_TIER
    assert isinstance(result.error, MissingTierError)
    assert result.error.tool_name == "wipe"


async def test_tier_removed_mid_run_is_refused_at_the_call() -> None:
    """The tier is read at each call: a tool that loses its tier mid-run is refused, earlier items kept."""
    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b"))])

    class Forgetful(Agent):
        def render(self, ctx: object, info: ToolRoundInfo[Doc]) -> Prompt:
            if info.round == 2:
                search.tier = None
            return super().render(ctx, info)

    result = await run_tool_loop_tiered(caller, Forgetful(), search, "ctx", config())
    assert search.calls == [Query(query="a")]
    assert result.items == [Doc(id="search:1")]
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)


@pytest.mark.parametrize("tier", [None, "read_only", 0], ids=repr)
def test_tool_decorator_refuses_anything_but_a_tier(tier: object) -> None:
    """@tool(tier=...) accepts only a Tier, naming the four to choose from."""
    with pytest.raises(UsageError, match=r"Tier\.READ_ONLY.*Tier\.IRREVERSIBLE"):
        tool(tier=tier)  # type: ignore[arg-type]  # the wrong type on purpose


def test_tool_decorator_has_no_default_tier() -> None:
    """@tool without tier= does not make a tool at all."""
    with pytest.raises(TypeError, match="tier"):
        tool()  # type: ignore[call-arg]  # the missing argument on purpose


async def test_multi_tool_read_runs_and_delete_is_proposed() -> None:
    """In one loop, the read tool runs and the delete tool's call becomes a proposal."""
    search = Recording("search", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller(
        [call_step(Query(query="tmp"), tool="search"), call_step(PathArgs(path="/tmp/1"), tool="delete")]
    )
    result = await run_tool_loop_tiered(caller, Agent(), [search, delete], "ctx", config())
    assert (len(search.calls), delete.calls) == (1, [])
    assert result.items == [Doc(id="search:1")]
    assert [(p.tool_name, p.args) for p in result.proposed] == [("delete", PathArgs(path="/tmp/1"))]
    assert [(r.tool_name, r.executed, r.proposed) for r in result.trace] == [
        ("search", True, False),
        ("delete", False, True),
    ]


async def test_multi_tool_gates_each_call_by_its_own_tier() -> None:
    """Under autonomy=READ_ONLY, the read-only tool runs and the reversible one is proposed."""
    search = Recording("search", Tier.READ_ONLY)
    archive = Recording("archive", Tier.REVERSIBLE, PathArgs)
    caller = ScriptedCaller(
        [
            call_step(PathArgs(path="/a"), tool="archive"),
            call_step(Query(query="q"), tool="search"),
            done_step(),
        ]
    )
    cfg = config(autonomy=Tier.READ_ONLY, after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Agent(), [search, archive], "ctx", cfg)
    assert (len(search.calls), archive.calls) == (1, [])
    assert [p.tool_name for p in result.proposed] == ["archive"]


async def test_trace_records_which_tool_produced_each_batch() -> None:
    """Each executed round's record names its tool and batch size."""
    search = Recording("search", Tier.READ_ONLY)
    fetch = Recording("fetch", Tier.READ_ONLY)
    caller = ScriptedCaller(
        [
            call_step(Query(query="a"), tool="search"),
            call_step(Query(query="b"), tool="fetch"),
            call_step(Query(query="c"), tool="search"),
            done_step(),
        ]
    )
    result = await run_tool_loop_tiered(caller, Agent(), [search, fetch], "ctx", config())
    executed = [(r.tool_name, r.batch_size, r.tier) for r in result.trace if r.executed]
    assert executed == [("search", 1, Tier.READ_ONLY), ("fetch", 1, Tier.READ_ONLY), ("search", 1, Tier.READ_ONLY)]
    assert result.items == [Doc(id="search:1"), Doc(id="fetch:1"), Doc(id="search:2")]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["search", "search"], "two tools are named"),
        (["search", ""], "empty name"),
        *[(["search", reserved], "collides") for reserved in ("done", "call", "rationale", "tool", "args")],
    ],
)
async def test_multi_tool_wiring_mistakes_are_usage_errors(names: list[str], message: str) -> None:
    """Duplicate, empty and reserved tool names are refused before any model call."""
    tools = [Recording(name, Tier.READ_ONLY) for name in names]
    caller = ScriptedCaller([done_step()])
    with pytest.raises(UsageError, match=message):
        await run_tool_loop_tiered(caller, Agent(), tools, "ctx", config())
    assert caller.requests == []


async def test_call_to_a_tool_outside_the_set_is_never_dispatched() -> None:
    """A step naming an unknown tool fails validation (re-asked, then LLM_ERROR); nothing runs."""
    search = Recording("search", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    bad = call_step(PathArgs(path="/"), tool="rm")
    caller = ScriptedCaller([bad, bad])
    result = await run_tool_loop_tiered(caller, Agent(), [search, delete], "ctx", config())
    assert (search.calls, delete.calls, result.proposed) == ([], [], [])
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, StructuredOutputError)


async def test_sequence_of_one_tool_uses_the_tool_wire_shape() -> None:
    """A sequence of tools, even of one, takes {"tool": name, "args": {...}}; a bare args object is invalid."""
    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(Query(query="a"), tool="search"), done_step()])
    result = await run_tool_loop_tiered(caller, Agent(), [search], "ctx", config())
    assert result.items == [Doc(id="search:1")]
    bare = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="a"))])
    refused = await run_tool_loop_tiered(bare, Agent(), [search], "ctx", config())
    assert refused.stop_reason is StopReason.LLM_ERROR
    assert len(search.calls) == 1


async def test_degeneration_guard_compares_tool_and_args() -> None:
    """The same args to two different tools is not a repeat; the same tool with the same args is."""
    search = Recording("search", Tier.READ_ONLY)
    fetch = Recording("fetch", Tier.READ_ONLY)
    caller = ScriptedCaller(
        [
            call_step(Query(query="x"), tool="search"),
            call_step(Query(query="x"), tool="fetch"),
            call_step(Query(query="x"), tool="search"),
        ]
    )
    result = await run_tool_loop_tiered(caller, Agent(), [search, fetch], "ctx", config())
    assert (len(search.calls), len(fetch.calls)) == (1, 1)
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)


async def test_observer_sees_the_proposal_and_no_tool_call_for_it() -> None:
    """Observers get on_proposal for a gated call and on_tool_call only for calls that run."""

    class Seen(Observer):
        def __init__(self) -> None:
            self.proposals: list[ProposalCaptured] = []
            self.tool_calls: list[str] = []

        def on_proposal(self, event: ProposalCaptured) -> None:
            self.proposals.append(event)

        def on_tool_call(self, event: ToolCallStarted) -> None:
            self.tool_calls.append(event.tool_name)

    seen = Seen()
    search = Recording("search", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(Query(query="q"), tool="search"), call_step(PathArgs(path="/"), tool="delete")])
    result = await run_tool_loop_tiered(caller, Agent(), [search, delete], "ctx", config(), observer=seen)
    assert seen.tool_calls == ["search"]
    assert [event.proposal for event in seen.proposals] == result.proposed


async def test_plain_loop_refuses_a_tool_that_cannot_run_live() -> None:
    """run_tool_loop raises UsageError before any model call for a tool the ceiling would gate."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    caller = ScriptedCaller([call_step(PathArgs(path="/"))])
    with pytest.raises(UsageError, match="run_tool_loop_tiered"):
        await run_tool_loop(caller, Agent(), delete, "ctx", config())
    assert (caller.requests, delete.calls) == ([], [])


async def test_proposal_is_not_altered_by_code_that_edits_what_the_executor_saw() -> None:
    """An executor that edits the prior call it is shown cannot change the call it proposed."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    search = Recording("search", Tier.READ_ONLY)

    class Normalising(Agent):
        def render(self, ctx: object, info: ToolRoundInfo[Doc]) -> Prompt:
            for prior in info.prior_calls:
                if isinstance(prior.args, PathArgs):
                    prior.args.path = prior.args.path.rstrip("/") + "/*"
            return super().render(ctx, info)

    caller = ScriptedCaller([call_step(PathArgs(path="/tmp/a"), tool="delete"), done_step()])
    cfg = config(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Normalising(), [search, delete], "ctx", cfg)
    (proposal,) = result.proposed
    assert proposal.args == PathArgs(path="/tmp/a")
    assert proposal.digest_matches()


class Payment(BaseModel):
    amount: float


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("calls_per_step", [1, 2])
async def test_a_gated_call_with_a_non_finite_number_is_neither_proposed_nor_run(
    amount: float, calls_per_step: int
) -> None:
    """A gated call whose args hold NaN or Infinity (a model's JSON may) cannot be carried by a proposal (stored,
    shown and approved as JSON, which has no such number): the run ends in a tool error naming it, nothing is
    proposed or run, and what the run gathered is kept, in a step of one call or of several."""
    search = Recording("search", Tier.READ_ONLY)
    pay = Recording("pay", Tier.IRREVERSIBLE, Payment)
    paying = call_step(Payment(amount=amount), tool="pay")
    if calls_per_step == 1:
        steps = [call_step(Query(query="a"), tool="search"), paying]
    else:
        steps = [calls_step(call_step(Query(query="a"), tool="search"), paying)]
    result = await run_tool_loop_tiered(
        ScriptedCaller(steps), Agent(), [search, pay], "ctx", config(max_calls_per_step=calls_per_step)
    )
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "its args hold NaN or Infinity" in str(result.error)
    assert (pay.calls, result.proposed) == ([], [])
    if calls_per_step == 1:
        assert result.items == [Doc(id="search:1")]
