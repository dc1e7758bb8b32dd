"""The journal's schema: a journal written by an older agentkit is migrated forward in place, on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentkit import ProposedAction, Tier, Usage, tool
from agentkit._proposals import canonical_json
from agentkit.journal import JournalError, JournalUnavailable, ProposalState, RunState, SQLiteJournal, open_journal
from agentkit.journal._postgres import _PostgresConnection
from agentkit.journal._schema import MIGRATIONS, SCHEMA_VERSION, render
from agentkit.journal._sql import Connection, now
from agentkit.journal._sqlite import _SQLiteConnection
from tests.support import Wipe


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Wipe) -> list[str]:
    """Delete a target's data."""
    return [f"wiped {args.target}"]


def proposal() -> ProposedAction[Wipe]:
    return ProposedAction[Wipe].create(
        tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Wipe(target="staging"), round=2, run_id="old-run"
    )


def connect(url: str) -> Connection:
    return _PostgresConnection(url) if url.startswith("postgresql") else _SQLiteConnection(url)


def version_1_journal(url: str, action: ProposedAction[Wipe]) -> str:
    """A journal as schema version 1 left it: one run and one pending proposal; returns the proposal's id."""
    db = connect(url)
    try:
        db.begin(write=True)
        for statement in MIGRATIONS[0]:
            sql = render(statement, db.dialect, db.types)
            assert sql is not None
            db.execute(sql)
        db.execute("INSERT INTO agentkit_schema (version) VALUES (1)")
        db.execute(
            "INSERT INTO agentkit_runs (id, agent, model, config, started_at) VALUES (?, ?, ?, ?, ?)",
            ("old-run", "Janitor", "m", json.dumps({"tools": ["wipe"], "max_rounds": 4}), db.to_db_time(now())),
        )
        # The row as version 1 wrote it (today's insert_proposal writes columns a later version added).
        id, at = "old-proposal", db.to_db_time(now())
        db.execute(
            "INSERT INTO agentkit_proposals (id, state, tool_name, tier, args, digest, rationale, round, run_id, "
            "proposed_at) VALUES (?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
            (id, action.tool_name, int(action.tier), canonical_json(action.args), action.digest, "", 2, "old-run", at),
        )
        db.execute(
            "INSERT INTO agentkit_transitions (proposal_id, from_state, to_state, actor, at, note) "
            "VALUES (?, NULL, 'pending', 'run:old-run', ?, '')",
            (id, at),
        )
        db.commit()
    finally:
        db.close()
    return id


async def test_a_version_1_journal_is_migrated_forward_keeping_its_data(journal_url: str) -> None:
    """Opening a schema-1 journal moves it to the current version: its run, proposal and history are intact."""
    action = proposal()
    id = version_1_journal(journal_url, action)
    journal = open_journal(journal_url, create=False)
    assert journal.schema_version() == SCHEMA_VERSION
    record = await journal.get(id)
    assert (record.state, record.digest, record.args) == (ProposalState.PENDING, action.digest, {"target": "staging"})
    assert [(t.to_state, t.actor) for t in await journal.history(id)] == [(ProposalState.PENDING, "run:old-run")]
    run = await journal.run("old-run")
    assert (run.agent, run.config, run.loop_config) == ("Janitor", {"tools": ["wipe"], "max_rounds": 4}, None)
    await journal.close()


async def test_a_migrated_journal_follows_the_current_rules(journal_url: str) -> None:
    """After migration an open entry still deduplicates, a final one does not, and history keeps its references."""
    action = proposal()
    id = version_1_journal(journal_url, action)
    journal = open_journal(journal_url, create=False)
    assert (await journal.propose(action)).id == id
    await journal.reject(id, "bob", "not that one")
    again = await journal.propose(action)
    assert again.id != id
    await journal.approve(again.id, "alice")
    assert (await journal.execute(again.id, wipe)).ok
    steps = [t.to_state.value for t in await journal.history(again.id)]
    assert steps == ["pending", "approved", "executing", "executed"]
    assert [t.to_state.value for t in await journal.history(id)] == ["pending", "rejected"]
    # A transition must still name an existing proposal.
    with pytest.raises(JournalError), journal._tx(write=True) as db:
        db.execute(
            "INSERT INTO agentkit_transitions (proposal_id, from_state, to_state, actor, at, note) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ("ghost", None, "pending", "x", db.to_db_time(now()), ""),
        )
    await journal.close()


def version_10_journal(url: str) -> None:
    """A journal as schema version 10 left it: one run that finished, its usage totals on its row."""
    db = connect(url)
    try:
        db.begin(write=True)
        for statement in (statement for statements in MIGRATIONS[:10] for statement in statements):
            sql = render(statement, db.dialect, db.types)
            if sql is not None:
                db.execute(sql)
        db.execute("INSERT INTO agentkit_schema (version) VALUES (10)")
        at = db.to_db_time(now())
        db.execute(
            "INSERT INTO agentkit_runs (id, agent, model, started_at, ended_at, outcome, stop_reason, rounds, "
            "requests, input_tokens, output_tokens) VALUES (?, ?, ?, ?, ?, 'applied', 'executor_done', 2, 2, 30, 7)",
            ("old-run", "Janitor", "m", at, at),
        )
        db.commit()
    finally:
        db.close()


async def test_a_run_finished_before_version_11_reads_with_its_usage_details_zero(journal_url: str) -> None:
    """A schema-10 journal opens and migrates; its finished run keeps its totals, its detail counts read as 0."""
    version_10_journal(journal_url)
    journal = open_journal(journal_url, create=False)
    assert journal.schema_version() == SCHEMA_VERSION
    run = await journal.run("old-run")
    assert (run.state, run.rounds) == (RunState.FINISHED, 2)
    assert run.usage == Usage(requests=2, input_tokens=30, output_tokens=7)
    assert [r.usage for r in await journal.runs()] == [run.usage]
    await journal.close()


def test_opening_a_non_journal_without_create_leaves_it_untouched(tmp_path: Path) -> None:
    """``create=False`` reads the file read-only first: an empty file stays empty and gains no header."""
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(JournalUnavailable, match="holds no agentkit journal"):
        SQLiteJournal(empty, create=False)
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
