"""assert_type checks for amend and approve: in memory, on the journal, over Temporal (mypy only)."""

from __future__ import annotations

from typing import assert_type

from agentkit import Approval, ProposedAction, TieredLoopResult, approve, run_tool_loop_tiered
from agentkit.decisions import Amendment, CallSeen, Equals, Evidence, Grant, Grants, OneOf, PathPrefix, Prefix, Range
from agentkit.journal import GrantRecord, GrantState, Journal, ProposalRecord, open_journal
from agentkit.temporal import PendingProposal, RunHandle, RunState
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, Planner, delete


def in_memory(proposal: ProposedAction[DeleteArgs]) -> None:
    amended = approve(proposal, approved_by="ops", args={"path": "/tmp/x"})
    assert_type(amended, Approval[DeleteArgs])
    assert_type(approve(proposal, approved_by="ops", args=DeleteArgs(path="/y")), Approval[DeleteArgs])
    assert_type(amended.amendment, Amendment[DeleteArgs] | None)
    if amended.amendment is not None:
        assert_type(amended.amendment.original, ProposedAction[DeleteArgs])
        assert_type(amended.amendment.original_digest, str)
        assert_type(amended.amendment.fields, tuple[str, ...])
        assert_type(amended.amendment.amended_by, str)


async def on_the_journal(journal: Journal, record: ProposalRecord) -> None:
    assert_type(await journal.approve(record.id, "ops", args={"path": "/tmp/x"}), ProposalRecord)
    assert_type(await journal.approve(record.id, "ops", args=DeleteArgs(path="/y")), ProposalRecord)
    assert_type(await journal.approve(record.id, "ops", args={"path": "/z"}, args_type=DeleteArgs), ProposalRecord)
    assert_type(record.original_digest, str | None)
    assert_type(record.original_args_json, str | None)
    assert_type(record.amended_by, str | None)
    assert_type(record.amended_fields, tuple[str, ...])
    assert_type(record.args_type, str | None)


async def over_temporal(handle: RunHandle[Doc], proposal: PendingProposal) -> None:
    assert_type(await handle.approve(proposal, by="ops", args={"path": "/tmp/x"}), RunState)


async def grants_in_process(proposal: ProposedAction[DeleteArgs]) -> None:
    made = Grant.of(delete, where={"path": Prefix(prefix="/tmp/")}, max_uses=3, granted_by="ops", reason="tmp")
    assert_type(made, Grant)
    grants = Grants([made, Grant(tool_name="delete", max_uses=None, granted_by="ops", reason="r")])
    assert_type(grants.use(proposal), Grant | None)
    assert_type(grants.uses(made.id), int)
    assert_type(made.matches(proposal), bool)
    assert_type(made.where, dict[str, Equals | OneOf | Prefix | PathPrefix | Range])
    assert_type(PathPrefix(prefix="/tmp/", resolve_symlinks=True).allows("/tmp/x"), bool)
    result = await run_tool_loop_tiered(ScriptedCaller(), Planner(), delete, "ctx", grants=grants)
    assert_type(result, TieredLoopResult[DeleteArgs, Doc])
    assert_type(Range(min=0, max=5).allows(3), bool)


async def grants_on_the_journal(journal: Journal, made: Grant) -> None:
    kept = await journal.grant(made, tool=delete)
    assert_type(kept, GrantRecord)
    assert_type(kept.state, GrantState)
    assert_type(kept.uses, int)
    assert_type(await journal.grants(), list[GrantRecord])
    assert_type(await journal.revoke_grant(kept.id, "ops", "done"), GrantRecord)


async def evidence_and_identity(journal: Journal, proposal: ProposedAction[DeleteArgs], record: ProposalRecord) -> None:
    assert_type(proposal.evidence, Evidence | None)
    if proposal.evidence is not None:
        assert_type(proposal.evidence.calls, tuple[CallSeen, ...])
        assert_type(proposal.evidence.rounds, tuple[int, ...])
        assert_type(proposal.evidence.calls[0].item_ids, tuple[str, ...])
        assert_type(proposal.evidence.task, str | None)
    assert_type(record.evidence, Evidence | None)
    assert_type(await journal.reject(record.id, "bob", "no", verified_as="bob@inbox"), ProposalRecord)
    assert_type(await journal.approve(record.id, "ana", verified_as="ana@inbox"), ProposalRecord)
    assert_type((await journal.history(record.id))[0].verified, str | None)
    assert_type(await journal.require_verified_approvers(), None)
    assert_type(await journal.verified_approvers_required(), bool)
    assert_type(open_journal("j.db", require_verified_approver=True), Journal)
