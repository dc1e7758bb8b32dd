"""JournalObserver: every run, round and proposal is in the journal as the run happens, on both backends."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Outcome,
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    ToolRoundInfo,
    run_tool_loop_tiered,
    tool,
)
from agentkit.events import Event, RunAborted
from agentkit.journal import Journal, JournalObserver, ProposalState, RunState, open_journal
from agentkit.journal._store import SQLJournal
from agentkit.observe import Observer
from agentkit.results import Usage
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step

POSTGRES_DSN = os.environ.get("AGENTKIT_TEST_POSTGRES_DSN")


class Query(BaseModel):
    query: str


class Target(BaseModel):
    path: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    return [f"{args.query}-1", f"{args.query}-2"]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path."""
    raise AssertionError("an irreversible tool never runs in the loop")


class Planner:
    """An executor that renders nothing interesting."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="planner-model")

    def render(self, ctx: None, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="plan", dynamic=f"round {info.round}")


CONTINUE = LoopConfig(after_proposal=AfterProposal.CONTINUE)


def tokens(step: dict[str, Any], input_tokens: int, output_tokens: int) -> ScriptedReply:
    return ScriptedReply(value=step, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens))


def script() -> ScriptedCaller:
    """Search, propose a deletion, then stop: three rounds, one proposal, 60 tokens."""
    return ScriptedCaller(
        [
            tokens(call_step(Query(query="logs"), tool="search", rationale="look first"), 10, 5),
            tokens(call_step(Target(path="/var/old"), tool="delete", rationale="it is stale"), 12, 8),
            tokens(done_step("enough"), 20, 5),
        ]
    )


def postgres_schema_url(dsn: str) -> Iterator[str]:
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "journal.db")
        return
    if POSTGRES_DSN is None:
        pytest.skip("AGENTKIT_TEST_POSTGRES_DSN is not set (start a server with .ci/postgres.sh)")
    yield from postgres_schema_url(POSTGRES_DSN)


@pytest.fixture
async def journal(journal_url: str) -> AsyncIterator[Journal]:
    opened = open_journal(journal_url)
    yield opened
    await opened.close()


async def test_a_run_is_recorded_with_its_outcome_usage_and_config(journal: Journal) -> None:
    """The run row carries agent, model, tools, ceiling, outcome, stop reason, rounds and summed usage."""
    result = await run_tool_loop_tiered(
        script(), Planner(), [search, delete], None, CONTINUE, observer=JournalObserver(journal)
    )
    run = await journal.run(result.run_id)
    assert run.state is RunState.FINISHED
    assert (run.agent, run.model) == ("Planner", "planner-model")
    assert run.config == {"tools": ["search", "delete"], "max_rounds": 4}
    assert (run.outcome, run.stop_reason, run.rounds) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, 3)
    assert run.usage == result.usage == Usage(requests=3, input_tokens=42, output_tokens=18)
    assert run.started_at is not None
    assert run.ended_at is not None
    assert run.started_at <= run.ended_at
    assert [r.id for r in await journal.runs()] == [result.run_id]


async def test_every_round_is_recorded_as_the_trace_says(journal: Journal) -> None:
    """Each round keeps its step, call, tier, batch size, timings and usage."""
    result = await run_tool_loop_tiered(
        script(), Planner(), [search, delete], None, CONTINUE, observer=JournalObserver(journal)
    )
    rounds = await journal.rounds(result.run_id)
    assert [r.round for r in rounds] == [1, 2, 3]
    first, second, third = rounds
    assert (first.tool_name, first.tier, first.args_json) == ("search", Tier.READ_ONLY, '{"query":"logs"}')
    assert (first.executed, first.batch_size, first.rationale) == (True, 2, "look first")
    assert (second.tool_name, second.tier, second.proposed, second.executed) == (
        "delete",
        Tier.IRREVERSIBLE,
        True,
        False,
    )
    assert third.done
    assert [r.usage for r in rounds] == [rec.usage for rec in result.trace]
    assert [r.llm_seconds for r in rounds] == [rec.llm_seconds for rec in result.trace]
    assert all(r.from_trace for r in rounds)


async def test_a_proposal_lands_in_the_inbox_pending(journal: Journal) -> None:
    """The run's proposal is pending, with the run's id, its round and the same digest as the result's."""
    result = await run_tool_loop_tiered(
        script(), Planner(), [search, delete], None, CONTINUE, observer=JournalObserver(journal)
    )
    [pending] = await journal.pending()
    [proposed] = result.proposed
    assert (pending.run_id, pending.round, pending.digest) == (result.run_id, 2, proposed.digest)
    assert (pending.tool_name, pending.rationale) == ("delete", "it is stale")
    # The caller storing the result's proposal again gets the same inbox entry.
    assert (await journal.propose(proposed)).id == pending.id


class Peek(Observer):
    """Reads the journal through a second connection when round 3 starts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[tuple[int, bool, bool]] = []
        self.pending: list[str] = []

    def on_round_start(self, event: Any) -> None:
        if event.info.round != 3:
            return
        other = open_journal(self.url, create=False)
        assert isinstance(other, SQLJournal)
        self.seen = [(r.round, r.executed, r.proposed) for r in other._rounds(event.run_id)]
        self.pending = [p.state.value for p in other._proposals()]
        other._close()


async def test_rounds_are_in_the_journal_while_the_run_is_still_going(journal: Journal, journal_url: str) -> None:
    """Another process reading mid-run sees the rounds done so far and the pending proposal."""
    peek = Peek(journal_url)
    await run_tool_loop_tiered(
        script(), Planner(), [search, delete], None, CONTINUE, observer=[JournalObserver(journal), peek]
    )
    assert peek.seen[:2] == [(1, True, False), (2, False, True)]
    assert peek.pending == [ProposalState.PENDING.value]


class Capture(Observer):
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


async def test_rounds_of_a_run_without_an_end_are_rebuilt_from_its_events(journal: Journal) -> None:
    """When the end was never written, the event log still gives every round that happened."""
    capture = Capture()
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=capture)
    for event in capture.events[:-1]:  # everything but the run's end, as if the process died there
        journal.record(event)
    run = await journal.run(result.run_id)
    assert (run.state, run.outcome, run.rounds) == (RunState.UNFINISHED, None, 3)
    assert run.usage == result.usage
    rebuilt = await journal.rounds(result.run_id)
    assert not any(r.from_trace for r in rebuilt)

    def key(r: Any) -> tuple[object, ...]:
        return (r.round, r.tool_name, r.tier, r.executed, r.proposed, r.batch_size, r.usage)

    traced = [(t.round, t.tool_name, t.tier, t.executed, t.proposed, t.batch_size, t.usage) for t in result.trace]
    assert [key(r) for r in rebuilt] == traced


async def test_a_repeated_call_is_recorded_as_the_round_that_ended_the_run(journal: Journal) -> None:
    """A stalemate run marks its last round as a repeat."""
    caller = ScriptedCaller([call_step(Query(query="x"), tool="search")] * 2)
    result = await run_tool_loop_tiered(caller, Planner(), [search, delete], None, observer=JournalObserver(journal))
    assert result.outcome is Outcome.STALEMATE
    rounds = await journal.rounds(result.run_id)
    assert [r.repeated for r in rounds] == [False, True]
    assert (await journal.run(result.run_id)).stop_reason is StopReason.DEGENERATION


async def test_an_aborted_run_is_recorded_as_aborted(journal: Journal) -> None:
    """A run that was cancelled ends ABORTED with the error, no outcome, and the rounds it got through."""
    capture = Capture()
    result = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=capture)
    observer = JournalObserver(journal)
    for event in capture.events[:-1]:
        observer.on_event(event)
    observer.on_event(RunAborted(run_id=result.run_id, error=asyncio.CancelledError("shutting down")))
    run = await journal.run(result.run_id)
    assert (run.state, run.outcome, run.stop_reason) == (RunState.ABORTED, None, None)
    assert run.error == "aborted: CancelledError: shutting down"
    assert run.ended_at is not None
    assert [r.round for r in await journal.rounds(run.id)] == [1, 2, 3]
    assert observer.failures == 0


async def test_a_failing_journal_never_changes_the_run(journal: Journal, caplog: pytest.LogCaptureFixture) -> None:
    """With every write failing, the result equals an unobserved run's; failures are logged and counted."""
    plain = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE)
    await journal.close()
    observer = JournalObserver(journal)
    with caplog.at_level(logging.WARNING, logger="agentkit.journal"):
        observed = await run_tool_loop_tiered(script(), Planner(), [search, delete], None, CONTINUE, observer=observer)

    def essence(r: Any) -> tuple[object, ...]:
        return (r.outcome, r.stop_reason, r.items, r.rounds, r.usage, [p.digest for p in r.proposed])

    assert essence(observed) == essence(plain)
    assert observer.failures > 0
    assert observer.failures == len([r for r in caplog.records if r.name == "agentkit.journal"])
    assert "closed" in str(observer.last_error)
