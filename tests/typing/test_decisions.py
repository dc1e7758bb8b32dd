"""assert_type checks for amend and approve: in memory, on the journal, over Temporal (mypy only)."""

from __future__ import annotations

from typing import assert_type

from agentkit import Approval, ProposedAction, approve
from agentkit.decisions import Amendment
from agentkit.journal import Journal, ProposalRecord
from agentkit.temporal import PendingProposal, RunHandle, RunState
from tests.typing.models import DeleteArgs, Doc


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
