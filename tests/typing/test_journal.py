"""assert_type checks for the journal, its inbox and its observer (mypy only)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, assert_never, assert_type

from pydantic import BaseModel

from agentkit import Observer, ProposedAction, Tier, tool
from agentkit._outcome import Outcome
from agentkit._proposals import canonical_json
from agentkit.errors import ToolError
from agentkit.journal import (
    DigestMismatch,
    Execution,
    Journal,
    JournalError,
    JournalObserver,
    JournalUnavailable,
    PostgresJournal,
    ProposalRecord,
    ProposalState,
    RoundEntry,
    RunRecord,
    RunState,
    SQLiteJournal,
    Transition,
    TransitionRefused,
    UnknownId,
    WorkReport,
    open_journal,
)
from agentkit.otel import OTelObserver


class Target(BaseModel):
    path: str


class Receipt(BaseModel):
    path: str


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[Receipt]:
    """Delete a path."""
    return [Receipt(path=args.path)]


def backends_are_journals(path: str, url: str) -> None:
    sqlite: Journal = SQLiteJournal(path)
    # An annotated assignment is the check that a backend is a Journal (pyright narrows the
    # variable to the assigned class, so an assert_type on it would test nothing).
    _postgres: Journal = PostgresJournal(url, create=False)
    assert_type(open_journal(path), Journal)
    assert_type(open_journal(":memory:", in_memory=True), Journal)
    assert_type(SQLiteJournal(":memory:", in_memory=True, create=True), SQLiteJournal)
    assert_type(sqlite.where, str)


def observer_is_an_observer(journal: Journal) -> None:
    _observer: Observer = JournalObserver(journal)
    assert_type(JournalObserver(journal).failures, int)
    assert_type(JournalObserver(journal).last_error, Exception | None)
    assert_type(JournalObserver(journal, linger=0.5).linger, float)
    with JournalObserver(journal, capacity=100, flush_timeout=1.0) as opened:
        assert_type(opened, JournalObserver)
        assert_type(opened.flush(timeout=2.0), bool)
        assert_type(opened.close(), bool)


async def observer_waits_without_blocking(observer: JournalObserver, run_id: str) -> None:
    assert_type(await observer.wait_flushed(), None)
    assert_type(await observer.settle(run_id), None)


async def inbox(journal: Journal, action: ProposedAction[Target]) -> None:
    record = await journal.propose(action)
    assert_type(record, ProposalRecord)
    assert_type(record.id, str)
    assert_type(record.state, ProposalState)
    assert_type(record.args, dict[str, Any])
    assert_type(record.args_as(Target), Target)
    assert_type(record.unreadable, str | None)
    assert_type(record.left_until, datetime | None)
    assert_type(record.left_note, str | None)
    assert_type(await journal.pending(), list[ProposalRecord])
    assert_type(await journal.proposals(state=ProposalState.APPROVED), list[ProposalRecord])
    assert_type(await journal.get(record.id), ProposalRecord)
    assert_type(await journal.approve(record.id, "alice"), ProposalRecord)
    assert_type(await journal.reject(record.id, "bob", "no"), ProposalRecord)
    assert_type(await journal.history(record.id), list[Transition])
    assert_type(await journal.stuck(older_than=timedelta(minutes=5)), list[ProposalRecord])
    assert_type(await journal.resolve(record.id, "carol", ProposalState.FAILED, "checked"), ProposalRecord)


async def execution_is_typed_by_the_tool(journal: Journal, id: str) -> None:
    execution = await journal.execute(id, delete)
    assert_type(execution, Execution[Receipt])
    assert_type(execution.batch, tuple[Receipt, ...])
    assert_type(execution.error, ToolError | None)
    assert_type(execution.proposal.state, ProposalState)
    traced = await journal.execute(id, delete, observer=OTelObserver())
    assert_type(traced, Execution[Receipt])
    assert_type(await journal.work([delete], until_empty=True, observer=[OTelObserver()]), WorkReport)


async def runs(journal: Journal, run_id: str) -> None:
    run = await journal.run(run_id)
    assert_type(run, RunRecord)
    assert_type(run.outcome, Outcome | None)
    assert_type(run.loop_config, dict[str, Any] | None)
    assert_type(run.unreadable, str | None)
    assert_type(record_of(run_id).claimed_at, datetime | None)
    assert_type(await journal.runs(limit=5), list[RunRecord])
    assert_type(await journal.rounds(run_id), list[RoundEntry])
    match run.state:
        case RunState.FINISHED | RunState.UNFINISHED | RunState.ABORTED:
            pass
        case _:
            assert_never(run.state)


def record_of(id: str) -> ProposalRecord:
    raise NotImplementedError


def canonical_args_are_text(args: Target) -> None:
    assert_type(canonical_json(args), str)


def states_are_closed(state: ProposalState) -> str:
    match state:
        case ProposalState.PENDING | ProposalState.APPROVED | ProposalState.EXECUTING:
            return "open"
        case ProposalState.REJECTED | ProposalState.EXECUTED | ProposalState.FAILED:
            return "final"
        case _:
            assert_never(state)


def errors_are_journal_errors() -> None:
    _errors: tuple[type[JournalError], ...] = (JournalUnavailable, UnknownId, TransitionRefused, DigestMismatch)
