"""Types of the journal's worker API (checked by mypy only)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, assert_never, assert_type

from pydantic import BaseModel

from agentkit import Tier, tool
from agentkit.journal import (
    DEFAULT_LEASE,
    OUTCOME_ATTEMPTS,
    Execution,
    Journal,
    JournalError,
    NothingRan,
    OutcomeNotRecorded,
    PostgresJournal,
    Worked,
    WorkOutcome,
    WorkReport,
)


class Target(BaseModel):
    path: str


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Target) -> list[str]:
    """Wipe."""
    return [args.path]


async def a_worker(journal: Journal, stop: asyncio.Event) -> None:
    seen: list[Worked] = []
    report = await journal.work(
        [wipe],
        limit=10,
        stop=stop,
        concurrency=4,
        until_empty=True,
        worker="w1",
        lease=timedelta(seconds=10),
        poll=0.5,
        report=seen.append,
    )
    assert_type(report, WorkReport)
    assert_type(report.executed, int)
    assert_type(report.not_recorded, list[str])
    assert_type(report.claimed, int)
    assert_type(seen[0].execution, Execution[Any] | None)
    assert_type(await journal.execute("id", wipe, lease=DEFAULT_LEASE), Execution[str])
    assert_type(OUTCOME_ATTEMPTS, int)


def a_pool(dsn: str) -> PostgresJournal:
    return PostgresJournal(dsn, pool_size=4)


def outcomes_are_closed(outcome: WorkOutcome) -> str:
    match outcome:
        case WorkOutcome.EXECUTED | WorkOutcome.FAILED | WorkOutcome.NOT_RECORDED:
            return "ran"
        case WorkOutcome.LEFT | WorkOutcome.NOTHING_RAN:
            return "did not run"
        case _:
            assert_never(outcome)


def errors_tell_what_ran(error: JournalError) -> str | None:
    if isinstance(error, OutcomeNotRecorded):
        assert_type(error.outcome, str)
        return error.error
    if isinstance(error, NothingRan):
        return error.id
    return None
