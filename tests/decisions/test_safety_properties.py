"""Safety invariants that must hold for every input, one property per gating path.

Over random executor scripts, tool sets, tier assignments (including missing and bogus tiers)
and ceilings: nothing whose tier is above the ceiling, or that is external-reversible or
irreversible, is ever called by the loop or by ``apply_plan``; a tool with no tier is never
called; every proposal's digest matches its args; an approval runs at most once, and only the
exact call approved.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Outcome,
    ProposedAction,
    StopReason,
    Tier,
    UsageError,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit._approval import approve, execute_approved
from agentkit._proposals import call_digest
from agentkit.errors import CallRefused
from agentkit.program import Capability, CapabilitySet, apply_plan, gate_program
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Executor

SETTINGS = settings(max_examples=150, deadline=None)
NOT_A_TIER: list[object] = [None, "read_only", 0, 1, True, 0.0]


def may_run_live(tier: object, ceiling: Tier) -> bool:
    """The oracle, written out independently of the code under test."""
    return tier in (Tier.READ_ONLY, Tier.REVERSIBLE) and isinstance(tier, Tier) and tier <= ceiling


class N(BaseModel):
    n: int


class Recording:
    def __init__(self, name: str, tier: object) -> None:
        self.name = name
        self.description = name
        self.args_type = N
        self.tier: Any = tier
        self.calls: list[N] = []

    async def call(self, args: N) -> Sequence[int]:
        self.calls.append(args)
        await asyncio.sleep(0)  # a suspension point, so that gathered executions really interleave
        return [args.n]


class Agent(Executor[int]):
    """The executor of these properties."""


tiers = st.one_of(st.sampled_from(list(Tier)), st.sampled_from(NOT_A_TIER))
real_tiers = st.sampled_from(list(Tier))
ceilings = st.sampled_from(list(Tier))
after = st.sampled_from(list(AfterProposal))


def steps(tool_count: int) -> st.SearchStrategy[list[tuple[int, int] | None]]:
    """A script: each step calls tool i with n (small n, so repeats happen), or is done (None)."""
    call = st.tuples(st.integers(0, tool_count - 1), st.integers(0, 3))
    return st.lists(st.one_of(call, st.none()), min_size=1, max_size=8)


def check_loop_safety(tools: list[Recording], result: Any, ceiling: Tier) -> None:
    by_name = {t.name: t for t in tools}
    for candidate in tools:
        if not may_run_live(candidate.tier, ceiling):
            assert candidate.calls == [], f"{candidate.name} (tier {candidate.tier!r}) ran under {ceiling!r}"
    if any(not isinstance(t.tier, Tier) for t in tools):
        assert all(t.calls == [] for t in tools)
        assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)
    for proposal in result.proposed:
        assert proposal.digest_matches()
        assert proposal.digest == call_digest(proposal.tool_name, proposal.args)
        assert proposal.tier is by_name[proposal.tool_name].tier
        assert not may_run_live(proposal.tier, ceiling)


async def run_script(tools: list[Recording], script: list[tuple[int, int] | None], cfg: LoopConfig, bare: bool) -> Any:
    replies = [
        done_step() if s is None else call_step(N(n=s[1]), tool=None if bare else tools[s[0]].name) for s in script
    ]
    caller = ScriptedCaller(replies)
    target: Any = tools[0] if bare else tools
    return await run_tool_loop_tiered(caller, Agent(), target, None, cfg)


@SETTINGS
@given(tier=tiers, ceiling=ceilings, after_proposal=after, script=steps(1))
def test_single_tool_loop_never_runs_a_gated_call(
    tier: object, ceiling: Tier, after_proposal: AfterProposal, script: list[tuple[int, int] | None]
) -> None:
    """One tool, any tier, any ceiling, any script: the loop only runs what may run live."""
    tools = [Recording("only", tier)]
    cfg = LoopConfig(max_rounds=len(script), autonomy=ceiling, after_proposal=after_proposal, retry=NO_WAIT)
    result = asyncio.run(run_script(tools, script, cfg, bare=True))
    check_loop_safety(tools, result, ceiling)


@SETTINGS
@given(
    tool_tiers=st.lists(tiers, min_size=1, max_size=4),
    ceiling=ceilings,
    after_proposal=after,
    data=st.data(),
)
def test_multi_tool_loop_never_runs_a_gated_call(
    tool_tiers: list[object], ceiling: Tier, after_proposal: AfterProposal, data: st.DataObject
) -> None:
    """Several tools with random tiers: each call is gated by its own tool's tier, and nothing tierless runs."""
    tools = [Recording(f"t{i}", tier) for i, tier in enumerate(tool_tiers)]
    script = data.draw(steps(len(tools)))
    cfg = LoopConfig(max_rounds=len(script), autonomy=ceiling, after_proposal=after_proposal, retry=NO_WAIT)
    result = asyncio.run(run_script(tools, script, cfg, bare=False))
    check_loop_safety(tools, result, ceiling)
    if all(isinstance(t.tier, Tier) for t in tools):
        ran = sum(len(t.calls) for t in tools)
        assert ran + len(result.proposed) == sum(1 for record in result.trace if record.executed or record.proposed)


@dataclasses.dataclass
class World:
    called: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    def handler(self, name: str) -> Any:
        def run(args: N) -> list[int]:
            self.called.append((name, args.n))
            return [args.n]

        return run


ProgramStep = tuple[str, int, int]
"""(kind, capability index, n): kind "ok" is a valid call, "unknown" names no capability, "bad" has bad args."""


@SETTINGS
@given(
    cap_tiers=st.lists(st.tuples(real_tiers, st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=4),
    ceiling=ceilings,
    program=st.lists(
        st.tuples(st.sampled_from(["ok", "ok", "ok", "unknown", "bad"]), st.integers(0, 3), st.integers(0, 3)),
        max_size=6,
    ),
    untrusted=st.booleans(),
)
def test_program_gate_never_applies_a_gated_or_invalid_program(
    cap_tiers: list[tuple[Tier, bool, bool, bool]], ceiling: Tier, program: list[ProgramStep], untrusted: bool
) -> None:
    """Random capability sets and programs: apply_plan runs only live-tier calls of a wholly valid program, and
    of a program written after untrusted content, no egress call and nothing above READ_ONLY."""
    world = World()
    declared: list[Capability[N, int]] = []
    for i, (tier, with_handler, lose_tier, egress) in enumerate(cap_tiers):
        handler = world.handler(f"c{i}") if with_handler and tier <= Tier.REVERSIBLE else None
        cap = Capability(name=f"c{i}", description="x", tier=tier, args_type=N, handler=handler, egress=egress)
        if lose_tier:
            object.__setattr__(cap, "tier", None)  # a tier lost after declaration must still fail closed
        declared.append(cap)
    caps = CapabilitySet(*declared)
    calls: list[dict[str, Any]] = []
    for kind, index, n in program:
        name = f"c{index % len(declared)}" if kind != "unknown" else "nope"
        calls.append({"tool": name, "args": {"n": n} if kind != "bad" else {"n": "many"}})
    plan = gate_program(calls, ceiling, capabilities=caps, untrusted=untrusted)
    report = asyncio.run(apply_plan(plan))

    tier_of = {cap.name: cap.tier for cap in declared}
    egress_of = {cap.name: cap.egress for cap in declared}

    def live(name: str) -> bool:
        held = untrusted and (egress_of[name] or tier_of[name] is not Tier.READ_ONLY)
        return may_run_live(tier_of[name], ceiling) and not held

    invalid = any(c["tool"] not in tier_of or c["args"]["n"] == "many" or tier_of[c["tool"]] is None for c in calls)
    if invalid:
        assert plan.rejected
        assert world.called == []
        assert (plan.apply, plan.propose) == ((), ())
        return
    expected = [(c["tool"], c["args"]["n"]) for c in calls if live(c["tool"])]
    # A plan types each call's args as plain BaseModel (its capabilities may differ), so read N's field by name.
    ran_or_failed = [(r.call.tool_name, r.call.args.model_dump()["n"]) for r in report.results]
    assert ran_or_failed == expected
    assert all(live(name) for name, _ in world.called)
    assert world.called == [(name, n) for (name, n), r in zip(expected, report.results, strict=True) if r.ok]
    proposed = [(c["tool"], c["args"]["n"]) for c in calls if not live(c["tool"])]
    assert [(p.tool_name, p.args.model_dump()["n"]) for p in plan.propose] == proposed
    assert all(p.digest_matches() for p in plan.propose)


Tamper = str
TAMPERS = ["none", "mutate_args", "rename_tool", "retier_tool", "untier_tool", "swap_proposal", "copy"]


@SETTINGS
@given(
    tier=real_tiers,
    tamper=st.sampled_from(TAMPERS),
    attempts=st.lists(st.sampled_from(["once", "gather", "copy"]), min_size=1, max_size=4),
)
def test_approval_runs_only_the_exact_call_at_most_once(tier: Tier, tamper: Tamper, attempts: list[str]) -> None:
    """Whatever is altered and however often execution is tried, the tool runs at most once, as approved."""
    tool = Recording("act", tier)
    proposal = ProposedAction[N].create(tool_name="act", tier=tier, args=N(n=7), round=1, run_id="r")
    approval = approve(proposal, approved_by="ana")
    match tamper:
        case "mutate_args":
            approval.proposal.args.n = 8
        case "rename_tool":
            tool.name = "other"
        case "retier_tool":
            tool.tier = Tier((tier + 1) % len(Tier))
        case "untier_tool":
            tool.tier = None
        case "swap_proposal":
            other = ProposedAction[N].create(tool_name="act", tier=tier, args=N(n=9), round=1, run_id="r")
            approval = dataclasses.replace(approval, proposal=other)

    async def attempt(kind: str) -> None:
        runs: list[Any] = []
        if kind == "gather":
            runs = [execute_approved(approval, tool), execute_approved(approval, tool)]
        elif kind == "copy":
            runs = [execute_approved(dataclasses.replace(approval, note="copy"), tool)]
        else:
            runs = [execute_approved(approval, tool)]
        outcomes = await asyncio.gather(*runs, return_exceptions=True)
        assert all(isinstance(outcome, list | CallRefused | UsageError) for outcome in outcomes), outcomes

    async def main() -> None:
        for kind in attempts:
            await attempt(kind)

    asyncio.run(main())
    assert len(tool.calls) <= 1
    if tamper in ("none", "copy"):
        assert tool.calls == [N(n=7)]
    else:
        assert tool.calls == []


@SETTINGS
@given(tool_tiers=st.lists(tiers, min_size=1, max_size=3), ceiling=ceilings, data=st.data())
def test_plain_loop_refuses_or_runs_only_live_tools(
    tool_tiers: list[object], ceiling: Tier, data: st.DataObject
) -> None:
    """The plain loop either refuses the wiring before any model call, or runs only what may run live."""
    tools = [Recording(f"t{i}", tier) for i, tier in enumerate(tool_tiers)]
    script = data.draw(steps(len(tools)))
    replies = [done_step() if s is None else call_step(N(n=s[1]), tool=tools[s[0]].name) for s in script]
    caller = ScriptedCaller(replies)
    cfg = LoopConfig(max_rounds=len(script), autonomy=ceiling, retry=NO_WAIT)
    try:
        result: Any = asyncio.run(run_tool_loop(caller, Agent(), tools, None, cfg))
    except UsageError:
        assert caller.requests == []
        assert any(isinstance(t.tier, Tier) and not may_run_live(t.tier, ceiling) for t in tools)
        assert all(t.calls == [] for t in tools)
        return
    for candidate in tools:
        if not may_run_live(candidate.tier, ceiling):
            assert candidate.calls == [], f"{candidate.name} (tier {candidate.tier!r}) ran under {ceiling!r}"
    if any(not isinstance(t.tier, Tier) for t in tools):
        assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)
