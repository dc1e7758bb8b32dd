"""The journal contract, run against real SQLite and a real PostgreSQL server.

PostgreSQL runs when ``AGENTKIT_TEST_POSTGRES_DSN`` is set (``.ci/postgres.sh`` starts a server
and prints it); each test gets its own schema there, as it gets its own file with SQLite (the
``journal`` fixtures are in ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, model_validator

from agentkit import ProposedAction, Tier, ToolRetry, UsageError, tool
from agentkit._proposals import call_digest, canonical_json
from agentkit.errors import TierChanged, ToolError
from agentkit.journal import (
    DigestMismatch,
    Journal,
    JournalError,
    JournalUnavailable,
    ProposalRecord,
    ProposalState,
    SQLiteJournal,
    Transition,
    TransitionRefused,
    UnknownId,
    open_journal,
)
from agentkit.journal._schema import SCHEMA_VERSION
from agentkit.journal._store import DEFAULT_LEASE
from tests.support import expire_lease, raw_sql


class Wipe(BaseModel):
    target: str
    keep_days: int = 0


class Widened(Wipe):
    """`Wipe` with a field added, with a default: the same call would mean another now."""

    cc: str = "attacker@evil.example"


ran: list[Wipe] = []
"""Every call ``wipe`` received, in order."""


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Wipe) -> list[str]:
    """Delete a target's data."""
    ran.append(args)
    if args.target == "explode":
        raise RuntimeError("disk on fire")
    if args.target == "wrong":
        raise ToolRetry("no such target")
    return [f"wiped {args.target}"]


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    ran.clear()


def proposal(target: str = "staging", *, run_id: str = "run-1", round: int = 1) -> ProposedAction[Wipe]:
    return ProposedAction[Wipe].create(
        tool_name="wipe",
        tier=Tier.IRREVERSIBLE,
        args=Wipe(target=target),
        rationale="clean up",
        round=round,
        run_id=run_id,
    )


async def approved(journal: Journal, target: str = "staging") -> str:
    record = await journal.propose(proposal(target))
    await journal.approve(record.id, "alice")
    return record.id


async def snapshot(journal: Journal, id: str) -> tuple[ProposalRecord, tuple[Transition, ...]]:
    """The proposal and its history, to compare before and after a refused change."""
    return (await journal.get(id), tuple(await journal.history(id)))


# -- opening --------------------------------------------------------------------------------------


async def test_first_open_creates_the_schema_at_the_current_version(journal: Journal, journal_url: str) -> None:
    """A fresh database gets the schema and its version row; reopening neither fails nor migrates again."""
    assert journal.schema_version() == SCHEMA_VERSION
    again = open_journal(journal_url, create=False)
    assert again.schema_version() == SCHEMA_VERSION
    await again.close()


async def test_open_without_create_refuses_a_database_with_no_journal(journal_url: str, tmp_path: Path) -> None:
    """``create=False`` on a database with no journal raises JournalUnavailable and creates nothing."""
    if journal_url.startswith("postgresql"):
        with pytest.raises(JournalUnavailable, match="holds no agentkit journal"):
            open_journal(journal_url, create=False)
        opened = open_journal(journal_url)  # the refused open left no half-made schema behind
        await opened.close()
    else:
        missing = tmp_path / "missing.db"
        with pytest.raises(JournalUnavailable, match="no journal at"):
            open_journal(missing, create=False)
        assert not missing.exists()


def test_open_refuses_a_file_that_is_not_a_journal(tmp_path: Path) -> None:
    """A SQLite file without the journal's tables is refused, not silently filled."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(JournalUnavailable, match="holds no agentkit journal"):
        SQLiteJournal(path, create=False)


async def test_open_refuses_a_journal_from_a_newer_agentkit(journal: Journal, journal_url: str) -> None:
    """A schema version above this code's is refused with a message to upgrade."""
    raw_sql(journal, f"UPDATE agentkit_schema SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(JournalUnavailable, match="upgrade agentkit"):
        open_journal(journal_url)


def test_sqlite_journal_runs_in_wal_mode(tmp_path: Path) -> None:
    """The SQLite journal switches its file to WAL, so readers never block the writer."""
    SQLiteJournal(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_closed_journal_refuses_work(journal: Journal) -> None:
    """After close, calls raise JournalError instead of touching a dead connection."""
    await journal.close()
    with pytest.raises(JournalError, match="closed"):
        await journal.pending()


# -- proposing and deciding -----------------------------------------------------------------------


async def test_a_proposal_enters_the_inbox_pending_with_its_call_and_digest(journal: Journal) -> None:
    """propose stores the tool, tier, canonical args and digest, and records who proposed it."""
    action = proposal()
    record = await journal.propose(action)
    assert record.state is ProposalState.PENDING
    assert (record.tool_name, record.tier, record.digest) == ("wipe", Tier.IRREVERSIBLE, action.digest)
    assert record.args == {"target": "staging", "keep_days": 0}
    assert record.args_as(Wipe) == action.args
    assert (record.run_id, record.round, record.rationale) == ("run-1", 1, "clean up")
    [created] = await journal.history(record.id)
    assert (created.from_state, created.to_state, created.actor) == (None, ProposalState.PENDING, "run:run-1")
    assert [p.id for p in await journal.pending()] == [record.id]


@pytest.mark.parametrize("state", [ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING])
async def test_the_same_proposal_recorded_twice_while_open_is_one_inbox_entry(
    journal: Journal, state: ProposalState
) -> None:
    """Recording a proposal again while it is pending, approved or executing gives the same entry, unchanged."""
    first = await journal.propose(proposal())
    if state is not ProposalState.PENDING:
        await journal.approve(first.id, "alice")
    if state is ProposalState.EXECUTING:
        journal._claim(first.id, wipe, "busy-worker")
    before = await snapshot(journal, first.id)
    second = await journal.propose(proposal())
    assert second.id == first.id
    assert second.state is state
    assert await snapshot(journal, first.id) == before
    assert len(await journal.proposals()) == 1


async def end_as(journal: Journal, id: str, ending: str) -> None:
    """Bring an entry to a final state the way an operator meets it."""
    if ending == "rejected":
        await journal.reject(id, "bob", "not today")
        return
    await journal.approve(id, "alice")
    if ending == "tampered":
        raw_sql(
            journal, f"""UPDATE agentkit_proposals SET args = '{{"keep_days":0,"target":"prod"}}' WHERE id = '{id}'"""
        )
        with pytest.raises(DigestMismatch, match="Reject it and propose the call again"):
            await journal.execute(id, wipe)
        await journal.reject(id, "alice", "altered in the database")
        return
    execution = await journal.execute(id, wipe)
    assert execution.proposal.state is (ProposalState.FAILED if ending == "failed" else ProposalState.EXECUTED)


@pytest.mark.parametrize("ending", ["rejected", "failed", "tampered", "executed"])
async def test_proposing_the_call_again_after_a_final_state_is_a_new_pending_entry(
    journal: Journal, ending: str
) -> None:
    """Once an entry is final, the same call proposed again (as error messages advise) waits for its own approval."""
    target = "explode" if ending == "failed" else "staging"
    first = await journal.propose(proposal(target))
    await end_as(journal, first.id, ending)
    ended = await snapshot(journal, first.id)
    again = await journal.propose(proposal(target))
    assert again.id != first.id
    assert (again.state, again.digest, again.args_json) == (ProposalState.PENDING, first.digest, first.args_json)
    assert [t.to_state for t in await journal.history(again.id)] == [ProposalState.PENDING]
    assert await snapshot(journal, first.id) == ended
    assert (await journal.propose(proposal(target))).id == again.id  # open again: deduplicated again
    assert [p.id for p in await journal.pending()] == [again.id]
    if ending != "failed":
        ran.clear()
        await journal.approve(again.id, "alice")
        assert (await journal.execute(again.id, wipe)).ok
        assert ran == [Wipe(target="staging")]


def test_stored_args_are_the_canonical_json_the_digest_covers() -> None:
    """``canonical_json`` is the digest's text, and ``call_digest`` keeps the digests journals already hold."""
    args = Wipe(target="stäging", keep_days=3)
    assert canonical_json(args) == '{"keep_days":3,"target":"stäging"}'
    assert call_digest("wipe", args) == hashlib.sha256(f"wipe\n{canonical_json(args)}".encode()).hexdigest()
    assert call_digest("wipe", args) == "b5c55ec373d140c8fe95457f93fe7e0dad51a98ceb59737a410f0be71a38ab31"


async def test_a_proposal_is_stored_as_canonical_json(journal: Journal) -> None:
    """The inbox keeps exactly ``canonical_json(args)``, the text execute compares against."""
    action = proposal("stäging")
    assert (await journal.propose(action)).args_json == canonical_json(action.args)


async def test_a_proposal_whose_digest_does_not_match_its_args_is_refused(journal: Journal) -> None:
    """A proposal altered after it was made never enters the inbox."""
    forged = proposal().model_copy(update={"args": Wipe(target="production")})
    with pytest.raises(DigestMismatch):
        await journal.propose(forged)
    assert await journal.proposals() == []


async def test_approve_moves_pending_to_approved_and_records_who_and_when(journal: Journal) -> None:
    """approve sets approved_by/approved_at and appends a transition by that person."""
    record = await journal.propose(proposal())
    after = await journal.approve(record.id, "alice")
    assert after.state is ProposalState.APPROVED
    assert after.approved_by == "alice"
    assert after.approved_at is not None
    assert after.approved_at >= record.proposed_at
    last = (await journal.history(record.id))[-1]
    assert (last.from_state, last.to_state, last.actor) == (ProposalState.PENDING, ProposalState.APPROVED, "alice")
    assert await journal.pending() == []
    assert [p.id for p in await journal.proposals(state=ProposalState.APPROVED)] == [record.id]


async def test_reject_records_who_and_why(journal: Journal) -> None:
    """reject is final and keeps the reason on the record and in the history."""
    record = await journal.propose(proposal())
    after = await journal.reject(record.id, "bob", "wrong environment")
    assert (after.state, after.rejected_by, after.reason) == (ProposalState.REJECTED, "bob", "wrong environment")
    assert (await journal.history(record.id))[-1].note == "wrong environment"


async def test_an_approved_proposal_can_still_be_rejected_before_it_runs(journal: Journal) -> None:
    """Revoking an approval is a rejection; a worker then finds nothing to execute."""
    id = await approved(journal)
    await journal.reject(id, "alice", "changed my mind")
    with pytest.raises(TransitionRefused, match="it is rejected"):
        await journal.execute(id, wipe)
    assert ran == []


@pytest.mark.parametrize(
    ("first", "then"),
    [("reject", "approve"), ("approve", "approve"), ("reject", "reject")],
)
async def test_an_illegal_transition_is_refused_and_changes_nothing(journal: Journal, first: str, then: str) -> None:
    """Approving a rejected proposal (or deciding twice) raises TransitionRefused; record and history are unchanged."""
    id = (await journal.propose(proposal())).id
    await (journal.approve(id, "alice") if first == "approve" else journal.reject(id, "alice", "no"))
    before = await snapshot(journal, id)
    with pytest.raises(TransitionRefused) as refused:
        await (journal.approve(id, "bob") if then == "approve" else journal.reject(id, "bob", "no"))
    assert refused.value.state == before[0].state.value
    assert await snapshot(journal, id) == before


async def test_decisions_need_a_name_and_a_reason(journal: Journal) -> None:
    """An empty approver, rejecter or reason is a UsageError; the proposal stays pending."""
    id = (await journal.propose(proposal())).id
    with pytest.raises(UsageError, match="approved_by"):
        await journal.approve(id, "  ")
    with pytest.raises(UsageError, match="reason"):
        await journal.reject(id, "bob", "")
    assert (await journal.get(id)).state is ProposalState.PENDING


@pytest.mark.parametrize("operation", ["get", "history", "approve", "reject", "execute", "resolve"])
async def test_an_unknown_id_raises_unknown_id_and_writes_nothing(journal: Journal, operation: str) -> None:
    """Every operation on an id the journal never saw raises UnknownId naming the id."""
    await journal.propose(proposal())
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: journal.get("nope"),
        "history": lambda: journal.history("nope"),
        "approve": lambda: journal.approve("nope", "alice"),
        "reject": lambda: journal.reject("nope", "alice", "no"),
        "execute": lambda: journal.execute("nope", wipe),
        "resolve": lambda: journal.resolve("nope", "alice", ProposalState.FAILED, "checked"),
    }
    before = await journal.proposals()
    with pytest.raises(UnknownId, match="'nope'") as unknown:
        await calls[operation]()
    assert unknown.value.id == "nope"
    assert isinstance(unknown.value, JournalError)
    assert await journal.proposals() == before
    assert ran == []


async def test_unknown_run_raises_unknown_id(journal: Journal) -> None:
    """Asking for a run the journal never saw raises UnknownId."""
    with pytest.raises(UnknownId, match="no run 'missing-run'"):
        await journal.run("missing-run")


async def test_rounds_of_an_unknown_run_raise_unknown_id(journal: Journal) -> None:
    """rounds() of a run the journal never saw raises UnknownId instead of answering an empty list."""
    with pytest.raises(UnknownId, match="no run 'missing-run'") as unknown:
        await journal.rounds("missing-run")
    assert unknown.value.id == "missing-run"


@pytest.mark.parametrize("operation", ["get", "history", "approve", "execute", "run", "rounds"])
async def test_an_id_that_is_not_a_string_raises_unknown_id(journal: Journal, operation: str) -> None:
    """An int passed as an id is an unknown id on both backends, not a database type error."""
    await journal.propose(proposal())
    bad: Any = 7
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: journal.get(bad),
        "history": lambda: journal.history(bad),
        "approve": lambda: journal.approve(bad, "alice"),
        "execute": lambda: journal.execute(bad, wipe),
        "run": lambda: journal.run(bad),
        "rounds": lambda: journal.rounds(bad),
    }
    with pytest.raises(UnknownId, match="ids are strings"):
        await calls[operation]()
    assert [p.state for p in await journal.proposals()] == [ProposalState.PENDING]


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_limit_below_one_is_a_usage_error(journal: Journal, limit: int) -> None:
    """runs() and proposals() refuse a limit below 1 on both backends (SQLite would read -1 as no limit)."""
    with pytest.raises(UsageError, match="limit must be an integer >= 1"):
        await journal.runs(limit=limit)
    with pytest.raises(UsageError, match="limit must be an integer >= 1"):
        await journal.proposals(limit=limit)


# -- executing ------------------------------------------------------------------------------------


# -- rows that do not parse ------------------------------------------------------------------------


async def test_a_corrupt_proposal_row_is_flagged_in_listings_and_refused_by_name(journal: Journal) -> None:
    """A row with tier 9 does not break pending(): the others are listed, it is flagged; acting on it names it."""
    before = (await journal.propose(proposal("a", round=1))).id
    bad = (await journal.propose(proposal("b", round=2))).id
    after = (await journal.propose(proposal("c", round=3))).id
    raw_sql(journal, f"UPDATE agentkit_proposals SET tier = 9 WHERE id = '{bad}'")
    listed = await journal.pending()
    assert [p.id for p in listed] == [before, bad, after]
    assert [p.unreadable is None for p in listed] == [True, False, True]
    flagged = listed[1].unreadable
    assert flagged is not None
    assert f"proposal {bad!r}" in flagged
    assert "tier 9" in flagged
    assert listed[1].tier is Tier.IRREVERSIBLE  # the placeholder fails closed
    assert [p.id for p in await journal.proposals(limit=5)] == [before, bad, after]
    for operation in (
        lambda: journal.get(bad),
        lambda: journal.approve(bad, "alice"),
        lambda: journal.reject(bad, "alice", "broken"),
        lambda: journal.history(bad),
    ):
        with pytest.raises(JournalError, match=f"proposal {bad!r} cannot be read: tier 9"):
            await operation()
    await journal.approve(after, "alice")  # the rest of the inbox works


async def test_a_corrupt_run_row_is_flagged_in_runs_and_refused_by_name(journal: Journal) -> None:
    """A run whose outcome is not an Outcome is flagged in runs(); run() raises a JournalError naming it."""
    raw_sql(
        journal,
        "INSERT INTO agentkit_runs (id, agent, model, config, outcome, stop_reason) "
        "VALUES ('bad-run', 'A', 'm', '{}', 'exploded', 'executor_done')",
    )
    [run] = await journal.runs()
    assert run.unreadable is not None
    assert "run 'bad-run'" in run.unreadable
    assert "outcome 'exploded'" in run.unreadable
    with pytest.raises(JournalError, match="run 'bad-run' cannot be read: outcome 'exploded'"):
        await journal.run("bad-run")


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [("proposed_at", "'yesterday'", "proposed_at 'yesterday'"), ("round", "'two'", "round 'two'")],
)
async def test_a_sqlite_row_with_an_unparsable_value_is_flagged(
    tmp_path: Path, column: str, value: str, shown: str
) -> None:
    """SQLite keeps any value in any column: a timestamp that does not parse, or text for a number, is flagged."""
    journal = SQLiteJournal(tmp_path / "j.db")
    good = (await journal.propose(proposal("a", round=1))).id
    bad = (await journal.propose(proposal("b", round=2))).id
    raw_sql(journal, f"UPDATE agentkit_proposals SET {column} = {value} WHERE id = '{bad}'")
    listed = await journal.pending()
    assert {p.id: p.unreadable is None for p in listed} == {good: True, bad: False}
    with pytest.raises(JournalError, match=f"proposal {bad!r} cannot be read: {shown}"):
        await journal.get(bad)
    await journal.close()


async def test_execute_runs_an_approved_proposal_and_records_the_batch(journal: Journal) -> None:
    """approved -> executing -> executed; the batch and the worker are on the record."""
    id = await approved(journal)
    execution = await journal.execute(id, wipe, worker="worker-7")
    assert execution.ok
    assert execution.batch == ("wiped staging",)
    record = execution.proposal
    assert (record.state, record.claimed_by, record.batch_size) == (ProposalState.EXECUTED, "worker-7", 1)
    assert record.batch_json == '["wiped staging"]'
    assert ran == [Wipe(target="staging")]
    steps = [(t.from_state, t.to_state, t.actor) for t in await journal.history(id)][2:]
    assert steps == [
        (ProposalState.APPROVED, ProposalState.EXECUTING, "worker-7"),
        (ProposalState.EXECUTING, ProposalState.EXECUTED, "worker-7"),
    ]


async def test_an_executed_proposal_never_runs_again(journal: Journal) -> None:
    """A second execute is refused: the tool ran once."""
    id = await approved(journal)
    await journal.execute(id, wipe)
    with pytest.raises(TransitionRefused, match="it is executed"):
        await journal.execute(id, wipe)
    assert len(ran) == 1


async def test_executing_a_pending_proposal_is_refused(journal: Journal) -> None:
    """Nothing runs before a human approved it; the proposal stays pending."""
    id = (await journal.propose(proposal())).id
    before = await snapshot(journal, id)
    with pytest.raises(TransitionRefused, match="approve it first"):
        await journal.execute(id, wipe)
    assert ran == []
    assert await snapshot(journal, id) == before


@pytest.mark.parametrize("target", ["explode", "wrong"])
async def test_a_failing_tool_marks_the_proposal_failed_with_the_error(journal: Journal, target: str) -> None:
    """A tool that raises (or raises ToolRetry) ends FAILED with its error; it is not retried."""
    id = await approved(journal, target)
    execution = await journal.execute(id, wipe)
    assert isinstance(execution.error, ToolError)
    assert not execution.ok
    assert execution.proposal.state is ProposalState.FAILED
    assert execution.proposal.error == str(execution.error)
    assert ("disk on fire" if target == "explode" else "no such target") in str(execution.error)
    with pytest.raises(TransitionRefused, match="it is failed"):
        await journal.execute(id, wipe)
    assert len(ran) == 1


class Opaque:
    """An item whose repr is all there is to store of it."""

    def __repr__(self) -> str:
        return "Opaque()"


async def test_a_batch_json_cannot_hold_is_recorded_described_and_raises_journal_error(journal: Journal) -> None:
    """The tool ran: a batch with bytes that are not UTF-8 ends executed, those items described, JournalError raised."""

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe_to_bytes(args: Wipe) -> list[object]:
        ran.append(args)
        return ["kept \x00 \udcff", b"\xff\xfe", Opaque()]

    id = await approved(journal)
    with pytest.raises(JournalError, match=r"recorded executed, but 1 of its 3 items cannot be stored") as raised:
        await journal.execute(id, wipe_to_bytes)
    assert "item 1 (bytes" in str(raised.value)
    record = await journal.get(id)
    assert (record.state, record.batch_size, len(ran)) == (ProposalState.EXECUTED, 3, 1)
    assert record.batch_json is not None
    assert json.loads(record.batch_json) == [
        "kept \x00 \udcff",
        {"unserialisable": "bytes", "repr": "b'\\xff\\xfe'"},
        "Opaque()",
    ]
    assert await journal.stuck(older_than=timedelta(0)) == []


async def test_tampered_args_are_refused_and_nothing_runs(journal: Journal) -> None:
    """Args changed in the database after approval no longer reproduce the digest: DigestMismatch, state unchanged."""
    id = await approved(journal)
    raw_sql(
        journal, f"""UPDATE agentkit_proposals SET args = '{{"keep_days":0,"target":"production"}}' WHERE id = '{id}'"""
    )
    before = await snapshot(journal, id)
    with pytest.raises(DigestMismatch, match="do not reproduce the digest"):
        await journal.execute(id, wipe)
    assert ran == []
    assert await snapshot(journal, id) == before
    assert before[0].state is ProposalState.APPROVED


@pytest.mark.parametrize(
    "stored",
    [
        '{"keep_days":0,"note":"evil","target":"staging"}',  # validation would drop the extra key
        '{"target": "staging", "keep_days": 0}',  # same values, not the approved text
    ],
)
async def test_stored_args_that_are_not_the_approved_text_are_refused(journal: Journal, stored: str) -> None:
    """Args whose digest still matches after validation but whose stored text differs: DigestMismatch, nothing runs."""
    id = await approved(journal)
    raw_sql(journal, f"UPDATE agentkit_proposals SET args = '{stored}' WHERE id = '{id}'")
    before = await snapshot(journal, id)
    with pytest.raises(DigestMismatch, match="not the canonical form"):
        await journal.execute(id, wipe)
    assert ran == []
    assert await snapshot(journal, id) == before
    assert before[0].state is ProposalState.APPROVED


async def test_args_that_no_longer_validate_are_refused(journal: Journal) -> None:
    """Stored args the tool's args_type rejects are refused before any claim."""
    id = await approved(journal)
    raw_sql(journal, f"""UPDATE agentkit_proposals SET args = '{{"target":7}}' WHERE id = '{id}'""")
    with pytest.raises(DigestMismatch, match="no longer validate as Wipe"):
        await journal.execute(id, wipe)
    assert (await journal.get(id)).state is ProposalState.APPROVED
    assert ran == []


async def test_execute_refuses_a_different_tool_or_a_changed_tier(journal: Journal) -> None:
    """Only the tool the call was proposed for, at the tier it was approved at, may run it."""
    id = await approved(journal)

    @tool(tier=Tier.IRREVERSIBLE, name="shred")
    def shred(args: Wipe) -> list[str]:
        raise AssertionError("must not run")

    @tool(tier=Tier.REVERSIBLE, name="wipe")
    def softer(args: Wipe) -> list[str]:
        raise AssertionError("must not run")

    with pytest.raises(UsageError, match="for tool 'wipe', not 'shred'"):
        await journal.execute(id, shred)
    # The same error as execute_approved gives for a changed tier (it used to be a plain JournalError here).
    with pytest.raises(TierChanged, match=r"now declares Tier\.REVERSIBLE"):
        await journal.execute(id, softer)
    assert (await journal.get(id)).state is ProposalState.APPROVED


async def test_execute_refuses_a_tool_whose_args_type_changed_since_the_call_was_proposed(journal: Journal) -> None:
    """A tool of the same name and tier whose args type now has another JSON schema (a field added with a default,
    as an MCP server may add one) would run another call than the one approved: refused, nothing claimed or run."""
    id = await approved(journal)

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def widened(args: Widened) -> list[str]:
        raise AssertionError("must not run")

    with pytest.raises(DigestMismatch, match="the tool's args type now has another"):
        await journal.execute(id, widened)
    assert (await journal.get(id)).state is ProposalState.APPROVED
    assert ran == []


# -- abandoned executions -------------------------------------------------------------------------


async def abandon(journal: Journal, id: str) -> None:
    """Start an execution and cancel it mid-tool: the claim stays, as when a worker dies."""
    started = asyncio.Event()

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def slow(args: Wipe) -> list[str]:
        ran.append(args)
        started.set()
        await asyncio.sleep(60)
        return []

    task = asyncio.create_task(journal.execute(id, slow, worker="doomed"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_interrupted_execution_stays_executing_and_is_surfaced(journal: Journal) -> None:
    """A claim whose worker never finished is never re-run; stuck() lists it for a human."""
    id = await approved(journal)
    await abandon(journal, id)
    record = await journal.get(id)
    assert (record.state, record.claimed_by) == (ProposalState.EXECUTING, "doomed")
    assert record.claimed_at is not None
    assert record.approved_at is not None
    assert record.claimed_at >= record.approved_at
    [listed] = await journal.stuck(older_than=timedelta(0))
    assert (listed.id, listed.claimed_by, listed.claimed_at) == (id, "doomed", record.claimed_at)
    assert await journal.stuck(older_than=timedelta(hours=1)) == []
    with pytest.raises(TransitionRefused, match="it is executing"):
        await journal.execute(id, wipe)
    assert len(ran) == 1


class Gated(BaseModel):
    """Args whose validation (inside the claim's transaction) can be held, to cancel execute mid-claim."""

    target: str

    @model_validator(mode="after")
    def _hold(self) -> Gated:
        if claim_gate.armed:
            claim_gate.entered.set()
            claim_gate.release.wait(timeout=30)
        return self


class ClaimGate:
    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()


claim_gate = ClaimGate()


async def test_cancelling_execute_during_the_claim_leaves_it_executing_and_the_tool_not_run(journal: Journal) -> None:
    """The claim commits in its thread even when execute is cancelled: executing, claimed, the tool never called."""
    calls: list[Gated] = []

    @tool(tier=Tier.IRREVERSIBLE, name="gated")
    def gated(args: Gated) -> list[str]:
        calls.append(args)
        return ["ran"]

    action = ProposedAction[Gated].create(tool_name="gated", tier=Tier.IRREVERSIBLE, args=Gated(target="t"), round=1)
    id = (await journal.propose(action)).id
    await journal.approve(id, "alice")
    # A fresh gate per run: a gate left open by an earlier parametrisation would let the task be
    # cancelled before its claim began.
    claim_gate.entered.clear()
    claim_gate.release.clear()
    claim_gate.armed = True
    try:
        task = asyncio.create_task(journal.execute(id, gated, worker="cancelled-worker"))
        assert await asyncio.to_thread(claim_gate.entered.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        claim_gate.armed = False
        claim_gate.release.set()
    # The claim's thread holds the write lock since the gate: a write waits for its transaction to end
    # (a read would not: reads never wait for writes).
    await journal.propose(proposal("other"))
    record = await journal.get(id)
    assert (record.state, record.claimed_by) == (ProposalState.EXECUTING, "cancelled-worker")
    assert calls == []
    assert [p.id for p in await journal.stuck(older_than=timedelta(0))] == [id]


@pytest.mark.parametrize("decision", [ProposalState.EXECUTED, ProposalState.FAILED])
async def test_a_human_resolves_an_abandoned_execution(journal: Journal, decision: ProposalState) -> None:
    """resolve records the decision, who made it and why; the proposal leaves stuck()."""
    id = await approved(journal)
    await abandon(journal, id)
    expire_lease(journal, id)
    record = await journal.resolve(id, "carol", decision, "checked the target by hand")
    assert (record.state, record.resolved_by, record.note) == (decision, "carol", "checked the target by hand")
    assert await journal.stuck(older_than=timedelta(0)) == []
    last = (await journal.history(id))[-1]
    assert (last.from_state, last.to_state, last.actor) == (ProposalState.EXECUTING, decision, "carol")


async def test_resolving_as_approved_lets_a_worker_run_it_again(journal: Journal) -> None:
    """A human who checked that the call did not happen may hand it back to the workers."""
    id = await approved(journal)
    await abandon(journal, id)
    expire_lease(journal, id)
    await journal.resolve(id, "carol", ProposalState.APPROVED, "target untouched; run it")
    execution = await journal.execute(id, wipe)
    assert execution.proposal.state is ProposalState.EXECUTED
    assert len(ran) == 2


async def test_resolve_is_only_for_executions(journal: Journal) -> None:
    """Resolving a pending proposal is refused; resolving to pending is a UsageError."""
    id = (await journal.propose(proposal())).id
    with pytest.raises(TransitionRefused, match="only a executing proposal can be resolved"):
        await journal.resolve(id, "carol", ProposalState.EXECUTED, "n/a")
    with pytest.raises(UsageError, match="resolves to one of"):
        await journal.resolve(id, "carol", ProposalState.PENDING, "n/a")
    assert (await journal.get(id)).state is ProposalState.PENDING


@pytest.mark.parametrize("decision", [ProposalState.EXECUTED, ProposalState.FAILED, ProposalState.APPROVED])
async def test_resolving_a_call_whose_lease_is_live_is_refused(journal: Journal, decision: ProposalState) -> None:
    """A claim under a live lease may still be running: resolve refuses, names the lease's end, changes nothing."""
    id = await approved(journal)
    journal._claim(id, wipe, "alive", "token-1", DEFAULT_LEASE)
    until = (await journal.get(id)).lease_until
    assert until is not None
    with pytest.raises(TransitionRefused, match="lease that lasts until") as refused:
        await journal.resolve(id, "carol", decision, "looked dead")
    assert until.isoformat(timespec="seconds") in str(refused.value)
    assert "agentkit proposals stuck" in str(refused.value)
    record = await journal.get(id)
    assert (record.state, record.claimed_by, record.resolved_by) == (ProposalState.EXECUTING, "alive", None)
    assert journal._renew(id, "token-1", DEFAULT_LEASE)
    expire_lease(journal, id)
    assert (await journal.resolve(id, "carol", decision, "its worker is gone")).state is decision


async def test_a_late_finish_after_a_human_resolved_is_not_recorded(journal: Journal) -> None:
    """A worker that finishes after a human decided cannot overwrite the decision."""
    id = await approved(journal)
    claim = journal._claim(id, wipe, "slowpoke", "token-1", DEFAULT_LEASE)
    expire_lease(journal, id)  # its renewals stopped reaching the journal
    await journal.resolve(id, "carol", ProposalState.FAILED, "worker looked dead")
    with pytest.raises(JournalError, match="resolved it while it ran"):
        journal._finish(id, claim.token, "slowpoke", batch=["late"], error=None)
    record = await journal.get(id)
    assert (record.state, record.batch_json) == (ProposalState.FAILED, None)


# -- durability -----------------------------------------------------------------------------------


async def test_everything_survives_closing_and_reopening(journal: Journal, journal_url: str) -> None:
    """A new connection sees every proposal, decision and transition."""
    id = await approved(journal)
    await journal.close()
    again = open_journal(journal_url, create=False)
    record = await again.get(id)
    assert (record.state, record.approved_by) == (ProposalState.APPROVED, "alice")
    assert len(await again.history(id)) == 2
    await again.close()
