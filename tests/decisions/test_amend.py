"""Amend and approve, in memory: the amended call, its own digest and lineage, run once; the original never."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit import (
    LoopConfig,
    ProposedAction,
    RetryPolicy,
    StopReason,
    Tier,
    approve,
    execute_approved,
    resume_tool_loop,
    run_tool_loop_tiered,
)
from agentkit._proposals import call_digest
from agentkit.decisions import Amendment
from agentkit.errors import ApprovalError
from agentkit.prompting import reflective_prompt
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, Payments, Recording, Transfer

NO_WAIT = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


def proposal(**changes: Any) -> ProposedAction[Transfer]:
    args = Transfer(account="acme", amount=100, memo="invoice 7").model_copy(update=changes)
    return ProposedAction.create(
        tool_name="transfer", tier=Tier.IRREVERSIBLE, args=args, rationale="pay the invoice", round=2, run_id="r1"
    )


def test_amended_approval_is_the_amended_call_with_its_own_digest_and_lineage() -> None:
    """Fields given as a mapping replace the proposed ones; the approval binds the new call and keeps the original."""
    original = proposal()
    approval = approve(original, approved_by="ops", args={"amount": 40})
    assert approval.proposal.args == Transfer(account="acme", amount=40, memo="invoice 7")
    assert approval.digest == approval.proposal.digest == call_digest("transfer", approval.proposal.args)
    assert approval.digest != original.digest
    assert approval.amendment == Amendment(original=original, amended_by="ops", fields=("amount",))
    assert approval.amendment.original_digest == original.digest
    kept = approval.proposal
    assert (kept.tool_name, kept.tier, kept.round, kept.run_id, kept.rationale, kept.created_at) == (
        "transfer",
        Tier.IRREVERSIBLE,
        2,
        "r1",
        "pay the invoice",
        original.created_at,
    )


def test_a_whole_args_value_amends_every_field_it_changes() -> None:
    """A value of the args type replaces the args; the changed fields are listed, sorted."""
    approval = approve(proposal(), approved_by="ops", args=Transfer(account="beta", amount=100, memo=""))
    assert approval.amendment is not None
    assert approval.amendment.fields == ("account", "memo")


def test_args_equal_to_the_proposed_ones_approve_the_call_as_proposed() -> None:
    """An "amendment" that changes nothing is a plain approval: same digest, no amendment."""
    original = proposal()
    approval = approve(original, approved_by="ops", args={"amount": 100})
    assert (approval.digest, approval.amendment, approval.proposal) == (original.digest, None, original)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"amount": -5}, "do not validate as Transfer"),
        ({"amount": "lots"}, "do not validate as Transfer"),
        ({"amuont": 5}, "'amuont', which Transfer does not declare"),
        (Doc(id="x"), "are a Doc, not the tool's Transfer"),
    ],
)
def test_an_amendment_that_does_not_validate_is_refused(args: Any, complaint: str) -> None:
    """Bad amended args are an ApprovalError naming the problem; nothing is approved."""
    with pytest.raises(ApprovalError, match=complaint):
        approve(proposal(), approved_by="ops", args=args)


async def test_execute_approved_runs_the_amended_call_once() -> None:
    """execute_approved runs the amended args, once; a second try is refused."""
    tool = Payments()
    approval = approve(proposal(), approved_by="ops", args={"amount": 40})
    assert await execute_approved(approval, tool) == [Doc(id="paid 40 to acme")]
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(approval, tool)
    assert tool.calls == [Transfer(account="acme", amount=40, memo="invoice 7")]


async def proposed_transfer() -> tuple[ScriptedCaller, Payments, Recording, Any]:
    tool, search = Payments(), Recording("search", Tier.READ_ONLY)
    step = call_step(Transfer(account="acme", amount=100, memo="invoice 7"), tool="transfer", rationale="pay")
    caller = ScriptedCaller([step, done_step()])
    first = await run_tool_loop_tiered(caller, Executor[Doc](), [search, tool], "ctx", NO_WAIT)
    assert first.stop_reason is StopReason.PROPOSED
    return caller, tool, search, first


async def test_resumed_run_runs_the_amended_call_and_tells_the_executor_what_changed() -> None:
    """resume runs the amended call once (never the original); the next round sees the amended args and fields."""
    caller, tool, search, first = await proposed_transfer()
    agent = Executor[Doc]()
    approval = approve(first.proposed[0], approved_by="ops", args={"amount": 40, "memo": "partial"})
    result = await resume_tool_loop(caller, agent, [search, tool], "ctx", first.checkpoint, [approval])
    assert tool.calls == [Transfer(account="acme", amount=40, memo="partial")]
    assert result.items == [Doc(id="paid 40 to acme")]
    [info] = agent.infos
    shown = info.prior_calls[0]
    assert (shown.args, shown.amended, shown.proposed) == (tool.calls[0], ("amount", "memo"), False)
    prompt = reflective_prompt("pay invoices", "pay", info).dynamic
    assert "a human amended it before approving (changed: amount, memo)" in prompt
    [decision] = [e for e in result.checkpoint.entries if e.kind == "decision"]
    assert (decision.call_digest, decision.amended) == (first.proposed[0].digest, ("amount", "memo"))
    result.checkpoint.verify()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    amount=st.integers(min_value=0, max_value=10**6),
    memo=st.text(max_size=12),
    path=st.sampled_from(["execute", "resume"]),
)
async def test_an_amended_call_runs_exactly_once_and_the_original_never(amount: int, memo: str, path: str) -> None:
    """Whatever the amendment, on either path the amended call runs once and the proposed call never runs."""
    caller, tool, search, first = await proposed_transfer()
    original = first.proposed[0]
    approval = approve(original, approved_by="ops", args={"amount": amount, "memo": memo})
    if path == "execute":
        await execute_approved(approval, tool)
        with pytest.raises(ApprovalError):
            await execute_approved(approval, tool)
    else:
        await resume_tool_loop(caller, Executor[Doc](), [search, tool], "ctx", first.checkpoint, [approval])
    expected = Transfer(account="acme", amount=amount, memo=memo)
    assert tool.calls == [expected]
    if expected != original.args:
        assert original.args not in tool.calls
