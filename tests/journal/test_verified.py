"""Who decided, verified (both backends): each decision records the identity the journal can vouch for beside
the name given; a journal that requires them to agree refuses a decision where they differ, changing nothing."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path

import pytest

from agentkit import ProposedAction, Tier
from agentkit._cli import main
from agentkit.journal import Journal, ProposalState, TransitionRefused, open_journal
from tests.support import PathArgs, Payments, small_payments


def action(run_id: str = "r1") -> ProposedAction[PathArgs]:
    return ProposedAction.create(
        tool_name="delete", tier=Tier.IRREVERSIBLE, args=PathArgs(path="/x"), round=1, run_id=run_id
    )


async def vouched_for(journal_url: str) -> str:
    """Who the journal at ``journal_url`` can vouch for: the PostgreSQL role, or this process's OS user."""
    if not journal_url.startswith("postgresql"):
        return getpass.getuser()
    import psycopg

    with psycopg.connect(journal_url) as conn:
        row = conn.execute("SELECT session_user").fetchone()
    assert row is not None
    return str(row[0])


async def test_each_decision_records_the_name_given_and_the_verified_identity(
    journal: Journal, journal_url: str
) -> None:
    """Approve and reject record who was named and who the journal vouches for; a front end may vouch instead."""
    me = await vouched_for(journal_url)
    approved = await journal.approve((await journal.propose(action("a"))).id, "alice")
    rejected = await journal.reject((await journal.propose(action("b"))).id, "bob", "no", verified_as="bob@inbox")
    [_, approval] = await journal.history(approved.id)
    [_, rejection] = await journal.history(rejected.id)
    assert (approval.actor, approval.verified) == ("alice", me)
    assert (rejection.actor, rejection.verified) == ("bob", "bob@inbox")
    [recorded] = await journal.history((await journal.propose(action("c"))).id)
    assert recorded.verified is None  # a run's or a worker's change is not a person's decision


async def test_a_journal_that_requires_verified_approvers_refuses_another_name(
    journal: Journal, journal_url: str
) -> None:
    """With the requirement kept in the journal, a name other than the verified one is refused; nothing changes."""
    me = await vouched_for(journal_url)
    entry = await journal.propose(action())
    assert not await journal.verified_approvers_required()
    await journal.require_verified_approvers()
    assert await journal.verified_approvers_required()
    with pytest.raises(TransitionRefused, match="requires the name given to be the identity it can verify"):
        await journal.approve(entry.id, "mallory")
    with pytest.raises(TransitionRefused, match="requires the granter"):
        await journal.grant(small_payments(granted_by="mallory"), tool=Payments())
    assert await journal.get(entry.id) == entry
    assert len(await journal.history(entry.id)) == 1
    assert await journal.grants() == []
    assert (await journal.approve(entry.id, me)).state is ProposalState.APPROVED
    await journal.require_verified_approvers(False)
    assert not await journal.verified_approvers_required()
    assert (
        await journal.reject((await journal.propose(action("b"))).id, "anyone", "x")
    ).state is ProposalState.REJECTED


async def test_a_client_may_require_it_on_its_own(journal_url: str) -> None:
    """open_journal(..., require_verified_approver=True) refuses another name from this client only."""
    strict = open_journal(journal_url, require_verified_approver=True)
    try:
        entry = await strict.propose(action())
        with pytest.raises(TransitionRefused):
            await strict.approve(entry.id, "mallory")
        assert not await strict.verified_approvers_required()  # this client's own choice, not the journal's
        assert (await strict.get(entry.id)).state is ProposalState.PENDING
    finally:
        await strict.close()


def test_proposals_show_prints_both_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`proposals show` lists, per change, who was named (BY) and who the journal verified (VERIFIED)."""
    url = str(tmp_path / "journal.db")

    async def decided() -> str:
        journal = open_journal(url)
        try:
            entry = await journal.propose(action())
            return (await journal.approve(entry.id, "alice")).id
        finally:
            await journal.close()

    id = asyncio.run(decided())
    assert main(["proposals", "show", id, "--db", url]) == 0
    shown = capsys.readouterr().out
    header = next(line for line in shown.splitlines() if line.startswith("AT"))
    assert header.split() == ["AT", "FROM", "TO", "BY", "VERIFIED", "NOTE"]
    assert any(line.split()[3:5] == ["alice", getpass.getuser()] for line in shown.splitlines() if "approved" in line)


def test_journal_settings_switches_the_requirement_for_every_client(
    journal_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentkit journal settings --require-verified-approver on|off` keeps the requirement in the journal,
    so another client refuses (then accepts) a name other than the verified one; without it, it only shows."""

    async def propose() -> str:
        journal = open_journal(journal_url)
        try:
            return (await journal.propose(action())).id
        finally:
            await journal.close()

    async def approve_as_mallory(id: str) -> ProposalState:
        journal = open_journal(journal_url)
        try:
            return (await journal.approve(id, "mallory")).state
        finally:
            await journal.close()

    def settings(*flags: str) -> str:
        assert main(["journal", "settings", "--db", journal_url, *flags]) == 0
        return capsys.readouterr().out

    id = asyncio.run(propose())
    assert settings() == "require-verified-approver: off\n"
    assert settings("--require-verified-approver", "on") == "require-verified-approver: on\n"
    assert settings() == "require-verified-approver: on\n"
    with pytest.raises(TransitionRefused, match="requires the name given to be the identity it can verify"):
        asyncio.run(approve_as_mallory(id))
    with pytest.raises(SystemExit) as refused:
        main(["journal", "settings", "--db", journal_url, "--require-verified-approver", "maybe"])
    assert refused.value.code == 2
    assert "invalid choice: 'maybe'" in capsys.readouterr().err
    assert settings("--require-verified-approver", "off") == "require-verified-approver: off\n"
    assert asyncio.run(approve_as_mallory(id)) is ProposalState.APPROVED


def test_journal_settings_never_creates_a_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pointed at a journal that does not exist, `journal settings` fails (exit 1) and creates nothing."""
    url = tmp_path / "missing.db"
    assert main(["journal", "settings", "--db", str(url), "--require-verified-approver", "on"]) == 1
    assert "agentkit: error:" in capsys.readouterr().err
    assert not url.exists()
