"""Grants widen the provenance policy only explicitly, field by field."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit import AfterProposal, LoopConfig, UsageError
from agentkit import run_tool_loop_tiered as tiered
from agentkit.decisions import Equals, Grant, Grants, Range
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.provenance_support import ATTACKER_IBAN, TASK, Folder, Payment, world
from tests.support import NO_WAIT, Doc, Executor

IBAN = ATTACKER_IBAN.replace(" ", "")


def config() -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, after_proposal=AfterProposal.CONTINUE, max_rounds=6)


def grant(**changes: Any) -> Grant:
    tools = world()
    fields: dict[str, Any] = {
        "where": {"amount": Range(max=10_000)},
        "max_uses": None,
        "granted_by": "alice",
        "reason": "bills",
        "allow_irreversible": True,
    }
    return Grant.of(tools["pay"], **(fields | changes))


async def paid(held: Grant) -> list[Any]:
    """Run read_inbox (the bill: untrusted, holding an IBAN) then pay that IBAN, with `held` standing."""
    tools = world()
    caller = ScriptedCaller(
        [
            call_step(Folder(folder="bills"), tool="read_inbox"),
            call_step(Payment(iban=IBAN, amount=5000), tool="pay"),
            done_step(),
        ]
    )
    await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(), grants=Grants([held]))
    return tools["pay"].calls


async def test_a_grant_does_not_approve_a_call_whose_value_came_from_untrusted_content() -> None:
    """A grant that constrains only the amount does not let an IBAN read in untrusted content through."""
    assert await paid(grant()) == []


async def test_a_grant_that_allows_a_field_from_a_named_untrusted_tool_approves_it() -> None:
    """`from_untrusted={"iban": ("read_inbox",)}` is the explicit widening: the bill's IBAN may be paid."""
    assert await paid(grant(from_untrusted={"iban": ["read_inbox"]})) == [Payment(iban=IBAN, amount=5000)]


async def test_a_grant_that_allows_a_field_from_another_tool_does_not_approve_it() -> None:
    """The widening is per source: allowed from the notes is not allowed from the inbox."""
    assert await paid(grant(from_untrusted={"iban": ["read_notes"]})) == []


async def test_a_grant_that_pins_the_value_approves_it_wherever_it_was_read() -> None:
    """An `Equals` constraint is the value itself, chosen by a person: where the run read it does not matter."""
    pinned = grant(where={"iban": Equals(value=IBAN), "amount": Range(max=10_000)})
    assert await paid(pinned) == [Payment(iban=IBAN, amount=5000)]


def test_a_grant_refuses_an_untrusted_allowance_for_a_field_the_tool_lacks() -> None:
    """`from_untrusted` names args fields, checked against the tool like `where`."""
    with pytest.raises(UsageError, match="'account'"):
        grant(from_untrusted={"account": ["read_inbox"]})
    with pytest.raises(UsageError, match="names the tools"):
        grant(from_untrusted={"iban": []})
