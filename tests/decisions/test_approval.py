"""Approval: the only door through which a proposed call runs, bound to the exact call, once."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import ProposedAction, StopReason, Tier, UsageError, run_tool_loop_tiered
from agentkit._approval import Approval, ApprovalError, Rejection, approve, execute_approved, reject
from agentkit._proposals import call_digest
from agentkit.errors import CallRefused, MissingTierError, TierChanged, ToolError
from agentkit.testing import ScriptedCaller, call_step
from tests.support import Deleter, Executor, PathArgs, proposed


class ForcefulArgs(BaseModel):
    path: str
    force: bool = True


def test_approve_binds_the_approver_to_the_exact_call() -> None:
    """An approval records who approved, when (UTC), and the digest of exactly the proposed call."""
    proposal = proposed()
    approval = approve(proposal, approved_by="ana", note="ok")
    assert (approval.proposal, approval.approved_by, approval.note) == (proposal, "ana", "ok")
    assert approval.digest == proposal.digest == call_digest("delete", PathArgs(path="/tmp/old"))
    assert approval.approved_at.tzinfo is UTC
    assert not approval.executed
    assert approve(proposal, approved_by="ana").id != approval.id


@pytest.mark.parametrize("who", ["", "   "])
def test_approve_needs_someone_to_approve(who: str) -> None:
    """An approval with no approver is a UsageError."""
    with pytest.raises(UsageError, match="approved_by"):
        approve(proposed(), approved_by=who)


def test_approve_refuses_a_proposal_altered_before_approval() -> None:
    """A proposal whose args no longer match its digest cannot be approved."""
    proposal = proposed()
    proposal.args.path = "/"
    with pytest.raises(ApprovalError, match="digest"):
        approve(proposal, approved_by="ana")


def test_approve_refuses_untyped_args() -> None:
    """A proposal reloaded without its args type is refused, with the way to reload it typed."""
    untyped = ProposedAction[Any].model_validate_json(proposed().model_dump_json())
    with pytest.raises(ApprovalError, match=r"ProposedAction\.load"):
        approve(untyped, approved_by="ana")


async def test_execute_approved_runs_the_call_once() -> None:
    """An approved call runs with the approved args and returns the tool's batch."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    batch = await execute_approved(approval, delete)
    assert batch == ["deleted /tmp/old"]
    assert delete.calls == [PathArgs(path="/tmp/old")]
    assert approval.executed


async def test_execute_approved_refuses_another_tool() -> None:
    """A tool whose name differs from the proposal's is refused and not called."""
    other = Deleter(name="shred")
    # Passing another tool is a wiring mistake on every path (approval, journal): UsageError.
    with pytest.raises(UsageError, match=r"'delete', not 'shred'"):
        await execute_approved(approve(proposed(), approved_by="ana"), other)
    assert other.calls == []


async def test_another_tool_is_a_usage_error_not_a_call_refused_and_the_approval_stays_unspent() -> None:
    """As docs/api.md says: the wrong tool is a UsageError and not a CallRefused; the approval then runs
    once with the right tool."""
    other, delete = Deleter(name="shred"), Deleter()
    approval = approve(proposed(), approved_by="ana")
    with pytest.raises(UsageError) as refused:
        await execute_approved(approval, other)
    assert not isinstance(refused.value, CallRefused)
    assert not approval.executed
    assert await execute_approved(approval, delete) == ["deleted /tmp/old"]
    assert (other.calls, delete.calls) == ([], [PathArgs(path="/tmp/old")])


async def test_execute_approved_refuses_args_altered_after_approval() -> None:
    """Args mutated after approval do not run (digest mismatch); the tool is not called."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    approval.proposal.args.path = "/"
    with pytest.raises(ApprovalError, match="changed after approval"):
        await execute_approved(approval, delete)
    assert delete.calls == []


async def test_execute_approved_refuses_a_swapped_proposal() -> None:
    """An approval copied with another (self-consistent) proposal still only runs the approved digest."""
    delete = Deleter()
    approval = approve(proposed("/tmp/old"), approved_by="ana")
    swapped = dataclasses.replace(approval, proposal=proposed("/"))
    # Refused before the digest check: the approval no longer points at the call approve() issued it for.
    with pytest.raises(ApprovalError, match="not made by approve"):
        await execute_approved(swapped, delete)
    assert delete.calls == []


async def test_execute_approved_refuses_a_tool_whose_args_type_changes_the_call() -> None:
    """A same-named tool whose args type would add fields to the approved call is refused, by its args schema."""
    forceful = Deleter(args_type=ForcefulArgs)
    with pytest.raises(ApprovalError, match="the tool's args type now has another"):
        await execute_approved(approve(proposed(), approved_by="ana"), forceful)
    assert forceful.calls == []


async def test_execute_approved_runs_only_once() -> None:
    """The same Approval object cannot run twice; the second attempt is refused and nothing runs."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    await execute_approved(approval, delete)
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(approval, delete)
    assert len(delete.calls) == 1


async def test_copies_of_an_approval_share_its_single_use() -> None:
    """dataclasses.replace of a spent approval is spent too."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    await execute_approved(approval, delete)
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(dataclasses.replace(approval, note="again"), delete)
    assert len(delete.calls) == 1


async def test_concurrent_executions_run_exactly_once() -> None:
    """Two executions of one approval gathered concurrently: exactly one runs, the other is refused."""
    delete = Deleter()
    approval = approve(proposed(), approved_by="ana")
    outcomes = await asyncio.gather(
        execute_approved(approval, delete), execute_approved(approval, delete), return_exceptions=True
    )
    assert delete.calls == [PathArgs(path="/tmp/old")]
    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["ApprovalError", "list"]


async def test_a_failed_execution_spends_the_approval() -> None:
    """A tool failure surfaces as ToolError (cause kept) and the approval cannot be retried."""
    delete = Deleter()
    delete.fail = True
    approval = approve(proposed(), approved_by="ana")
    with pytest.raises(ToolError, match="disk gone") as raised:
        await execute_approved(approval, delete)
    assert isinstance(raised.value.__cause__, OSError)
    assert approval.executed
    delete.fail = False
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(approval, delete)
    assert len(delete.calls) == 1


@pytest.mark.parametrize("tier", [None, "irreversible", 3], ids=repr)
async def test_execute_approved_refuses_a_tool_without_a_tier(tier: object) -> None:
    """A tool that declares no tier is never called, even with an approval."""
    delete = Deleter(tier=tier)
    # The one missing-tier error of every path (loop, program, approval, journal).
    with pytest.raises(MissingTierError, match=r"declares no tier.*Tier\.READ_ONLY"):
        await execute_approved(approve(proposed(), approved_by="ana"), delete)
    assert delete.calls == []


async def test_execute_approved_refuses_a_tool_whose_tier_changed() -> None:
    """An approval at one tier does not run a tool now declared at another."""
    delete = Deleter(tier=Tier.EXTERNAL_REVERSIBLE)
    # The one tier-changed error of every path (approval, journal).
    with pytest.raises(TierChanged, match=r"now declares Tier\.EXTERNAL_REVERSIBLE .* approved at Tier\.IRREVERSIBLE"):
        await execute_approved(approve(proposed(), approved_by="ana"), delete)
    assert delete.calls == []


def test_reject_records_the_refusal() -> None:
    """reject returns a Rejection naming who refused, why, and the call's digest."""
    proposal = proposed()
    rejection = reject(proposal, rejected_by="bo", reason="keep it")
    assert isinstance(rejection, Rejection)
    assert (rejection.proposal, rejection.rejected_by, rejection.reason) == (proposal, "bo", "keep it")
    assert rejection.digest == proposal.digest
    assert rejection.rejected_at.tzinfo is UTC
    with pytest.raises(UsageError, match="rejected_by"):
        reject(proposal, rejected_by="")


def test_approval_is_frozen() -> None:
    """An approval's fields cannot be reassigned."""
    approval = approve(proposed(), approved_by="ana")
    with pytest.raises(dataclasses.FrozenInstanceError):
        approval.digest = "0" * 64  # type: ignore[misc]  # the assignment under test


class Planner(Executor[str]):
    def __init__(self) -> None:
        super().__init__("planner", system="clean up")


async def test_loop_proposal_runs_only_through_approval() -> None:
    """A tiered loop proposes the delete without running it; approving it runs it, once, as proposed."""
    delete = Deleter()
    caller = ScriptedCaller([call_step(PathArgs(path="/tmp/stale"), rationale="unused for a year")])
    result = await run_tool_loop_tiered(caller, Planner(), delete, "clean /tmp")
    assert (result.stop_reason, delete.calls) == (StopReason.PROPOSED, [])
    stored = result.proposed[0].model_dump_json()
    approval: Approval[BaseModel] = approve(ProposedAction.load(stored, [delete]), approved_by="ana")
    assert await execute_approved(approval, delete) == ["deleted /tmp/stale"]
    assert delete.calls == [PathArgs(path="/tmp/stale")]
