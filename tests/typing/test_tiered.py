"""assert_type checks for the tiered loop, proposals, approval and program gating (mypy only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Never, assert_type

from pydantic import BaseModel

from agentkit import (
    ProposedAction,
    Tier,
    TieredLoopResult,
    Tool,
    run_tool_loop_tiered,
)
from agentkit._approval import Approval, Rejection, approve, execute_approved, reject
from agentkit.program import (
    ApplyReport,
    Capability,
    CapabilitySet,
    Plan,
    PlannedCall,
    apply_plan,
    capability,
    gate_program,
    propose_only,
)
from agentkit.provenance import ProvenancePolicy, Trust
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, Planner, SearchArgs, delete, fetch, search


async def single_tool() -> None:
    result = await run_tool_loop_tiered(ScriptedCaller(), Planner(), delete, "ctx")
    assert_type(result, TieredLoopResult[DeleteArgs, Doc])
    assert_type(result.items, list[Doc])
    assert_type(result.proposed, list[ProposedAction[DeleteArgs]])
    assert_type(result.proposed[0].args, DeleteArgs)


async def multi_tool() -> None:
    result = await run_tool_loop_tiered(ScriptedCaller(), Planner(), [search, fetch, delete], "ctx")
    assert_type(result, TieredLoopResult[BaseModel, Doc])
    assert_type(result.items, list[Doc])
    assert_type(result.proposed, list[ProposedAction[BaseModel]])
    # A set kept in a variable needs its element type said once; a bare list literal joins to object.
    tools: list[Tool[Any, Doc]] = [search, fetch, delete]
    again = await run_tool_loop_tiered(ScriptedCaller(), Planner(), tools, "ctx")
    assert_type(again.items, list[Doc])


async def approval_path(stored: str) -> None:
    proposal = ProposedAction[DeleteArgs].model_validate_json(stored)
    assert_type(proposal, ProposedAction[DeleteArgs])
    approval = approve(proposal, approved_by="ana")
    assert_type(approval, Approval[DeleteArgs])
    assert_type(await execute_approved(approval, delete), Sequence[Doc])
    assert_type(reject(proposal, rejected_by="bo"), Rejection[DeleteArgs])
    assert_type(ProposedAction.load(stored, delete), ProposedAction[DeleteArgs])
    loaded = ProposedAction.load(stored, [search, delete])
    assert_type(loaded, ProposedAction[BaseModel])
    assert_type(await execute_approved(approve(loaded, approved_by="ana"), delete), Sequence[Doc])


@capability(tier=Tier.READ_ONLY)
def find(args: SearchArgs) -> list[Doc]:
    """Find documents."""
    return []


@capability(tier=Tier.REVERSIBLE)
async def archive(args: DeleteArgs) -> list[Doc]:
    """Archive a path."""
    return []


async def program_path() -> None:
    assert_type(find, Capability[SearchArgs, Doc])
    assert_type(archive, Capability[DeleteArgs, Doc])
    wipe = propose_only("wipe", description="Delete for good.", tier=Tier.IRREVERSIBLE, args_type=DeleteArgs)
    assert_type(wipe, Capability[DeleteArgs, Never])
    caps = CapabilitySet(find, archive, wipe)
    assert_type(caps, CapabilitySet[Doc])
    assert_type(caps.render(), str)
    plan = gate_program([{"tool": "find", "args": {"query": "q"}}], Tier.REVERSIBLE, capabilities=caps)
    assert_type(plan, Plan[Doc])
    assert_type(plan.apply, tuple[PlannedCall, ...])
    assert_type(plan.propose, tuple[ProposedAction[BaseModel], ...])
    report = await apply_plan(plan)
    assert_type(report, ApplyReport[Doc])
    assert_type(report.items, list[Doc])
    approval = approve(plan.propose[0], approved_by="ana")
    assert_type(await execute_approved(approval, delete), Sequence[Doc])


@capability(tier=Tier.READ_ONLY, trust=Trust.UNTRUSTED, egress=True)
def browse(args: SearchArgs) -> list[Doc]:
    """Fetch a page (sends the query out)."""
    return []


async def program_after_untrusted_content() -> None:
    assert_type(browse, Capability[SearchArgs, Doc])
    assert_type(browse.trust, Trust)
    assert_type(browse.egress, bool)
    post = propose_only("post", description="Post.", tier=Tier.IRREVERSIBLE, args_type=DeleteArgs, egress=True)
    assert_type(post, Capability[DeleteArgs, Never])
    wrapped = Capability(
        name="w", description="w", tier=Tier.READ_ONLY, args_type=SearchArgs, handler=browse.call, trust=Trust.UNTRUSTED
    )
    assert_type(wrapped, Capability[SearchArgs, Doc])
    caps = CapabilitySet(browse, post)
    assert_type(caps.render(ceiling=Tier.READ_ONLY, untrusted=True, provenance=ProvenancePolicy()), str)
    plan = gate_program([], Tier.READ_ONLY, capabilities=caps, untrusted=True, provenance=None)
    assert_type(plan, Plan[Doc])
    assert_type(plan.untrusted, bool)
    assert_type(plan.provenance, ProvenancePolicy | None)
    assert_type(await apply_plan(plan), ApplyReport[Doc])
