"""Forged, replayed and lossy approvals: within the documented API an approval is unforgeable,
single use, and covers exactly what the tool receives."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from pydantic import BaseModel, Field

from agentkit import AfterProposal, LoopConfig, ProposedAction, Tier, UsageError, run_tool_loop_tiered
from agentkit._approval import Approval, ApprovalError, approve, execute_approved
from agentkit.testing import ScriptedCaller, call_step
from tests.support import Deleter, Executor, PathArgs, proposed


async def test_an_approval_built_by_hand_does_not_execute() -> None:
    """An Approval constructed without approve() (and without an approver) is refused; the tool is not called."""
    delete = Deleter()
    proposal = proposed()
    forged = Approval(proposal=proposal, approved_by="", digest=proposal.digest)
    with pytest.raises(ApprovalError, match="not made by approve"):
        await execute_approved(forged, delete)
    assert delete.calls == []


async def test_a_spent_approval_with_a_fresh_single_use_state_does_not_run_again() -> None:
    """dataclasses.replace of a spent approval with a new single-use state is refused."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    await execute_approved(approval, delete)
    fresh_state = type(approval._once)()
    replayed = dataclasses.replace(approval, _once=fresh_state)
    with pytest.raises(ApprovalError, match="not made by approve"):
        await execute_approved(replayed, delete)
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(dataclasses.replace(approval, note="again"), delete)
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(copy.deepcopy(approval), delete)
    assert len(delete.calls) == 1


async def test_an_approval_pointed_at_another_call_does_not_run_it() -> None:
    """Swapping the proposal (and its digest) into a real approval is refused."""
    delete = Deleter()
    approval = approve(proposed("/tmp/old"), approved_by="ana")
    other = proposed("/etc")
    for swapped in (
        dataclasses.replace(approval, proposal=other),
        dataclasses.replace(approval, proposal=other, digest=other.digest),
    ):
        with pytest.raises(ApprovalError):
            await execute_approved(swapped, delete)
    assert delete.calls == []


class Sneaky(BaseModel):
    path: str
    recursive: bool = Field(default=False, exclude=True)


async def test_an_args_type_with_an_excluded_field_is_refused_on_every_path() -> None:
    """A field left out of the dump could differ from what was approved: the loop and approval refuse the type."""
    wipe = Deleter(name="wipe", args_type=Sneaky)
    caller = ScriptedCaller([call_step(Sneaky(path="/a", recursive=True))])
    with pytest.raises(UsageError, match=r"leaves \['recursive'\] out of its dump"):
        await run_tool_loop_tiered(caller, Executor[str](), wipe, "ctx", LoopConfig())
    with pytest.raises(UsageError, match="JSON round trip"):
        ProposedAction[Sneaky].create(
            tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Sneaky(path="/a", recursive=True), round=1
        )
    # A proposal made while the field was still a plain one cannot smuggle it through either.
    proposal = ProposedAction[PathArgs].create(
        tool_name="wipe", tier=Tier.IRREVERSIBLE, args=PathArgs(path="/a"), round=1
    )
    with pytest.raises(UsageError, match="out of its dump"):
        await execute_approved(approve(proposal, approved_by="ana"), wipe)
    assert wipe.calls == []


class Nested(BaseModel):
    target: Sneaky


def test_excluded_fields_of_nested_models_are_found() -> None:
    """The check walks nested models, so a lossy field one level down is refused too."""
    from agentkit._tools import lossy_fields

    assert lossy_fields(Nested) == ["target.recursive"]
    assert lossy_fields(PathArgs) == []


async def test_the_approved_call_runs_from_the_json_the_digest_covers() -> None:
    """execute_approved hands the tool args rebuilt from their canonical JSON, equal to what was proposed."""
    delete = Deleter()
    caller = ScriptedCaller([call_step(PathArgs(path="/tmp/x"))])
    cfg = LoopConfig(after_proposal=AfterProposal.STOP)
    result = await run_tool_loop_tiered(caller, Executor[str](), delete, "ctx", cfg)
    (proposal,) = result.proposed
    await execute_approved(approve(proposal, approved_by="ana"), delete)
    assert delete.calls == [PathArgs(path="/tmp/x")]
    assert delete.calls[0] is not proposal.args
