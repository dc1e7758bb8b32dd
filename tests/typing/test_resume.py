"""assert_type checks for checkpoints, resume_tool_loop and journal.resume (mypy only)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, assert_never, assert_type

from pydantic import BaseModel

from agentkit import (
    Approval,
    Rejection,
    RunCheckpoint,
    TieredLoopResult,
    UsageError,
    approve,
    reject,
    resume_tool_loop,
    run_tool_loop_tiered,
)
from agentkit.errors import ResumeRefused
from agentkit.journal import Journal, JournalError, JournalObserver, RunClaimed, RunStatus, SQLiteJournal
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, Planner, delete, search


async def single_tool() -> None:
    first = await run_tool_loop_tiered(ScriptedCaller(), Planner(), delete, "ctx")
    assert_type(first.checkpoint, RunCheckpoint)
    assert_type(RunCheckpoint.model_validate_json(first.checkpoint.model_dump_json()), RunCheckpoint)
    approval = approve(first.proposed[0], approved_by="ana")
    assert_type(approval, Approval[DeleteArgs])
    result = await resume_tool_loop(ScriptedCaller(), Planner(), delete, "ctx", first.checkpoint, [approval])
    assert_type(result, TieredLoopResult[DeleteArgs, Doc])
    assert_type(result.items, list[Doc])
    assert_type(result.checkpoint, RunCheckpoint)


async def multi_tool() -> None:
    first = await run_tool_loop_tiered(ScriptedCaller(), Planner(), [search, delete], "ctx")
    decisions: list[Approval[Any] | Rejection[Any]] = [reject(first.proposed[0], rejected_by="bo", reason="no")]
    result = await resume_tool_loop(ScriptedCaller(), Planner(), [search, delete], "ctx", first.checkpoint, decisions)
    assert_type(result, TieredLoopResult[BaseModel, Doc])
    assert_type(result.proposed[0].args, BaseModel)


class Verdict(BaseModel):
    reason: str


def refusal_is_a_usage_error(error: ResumeRefused) -> UsageError:
    return error


def same_path(a: DeleteArgs, b: DeleteArgs) -> bool:
    return a == b


async def journal_resume(journal: Journal) -> None:
    single = await journal.resume("run-1", ScriptedCaller(), Planner(), delete, "ctx")
    assert_type(single, TieredLoopResult[DeleteArgs, Doc])
    assert_type(single.items, list[Doc])
    several = await journal.resume(
        "run-1", ScriptedCaller(), Planner(), [search, delete], "ctx", observer=None, lease=timedelta(seconds=5)
    )
    assert_type(several, TieredLoopResult[BaseModel, Doc])
    sqlite = SQLiteJournal(":memory:", in_memory=True)
    assert_type(
        await sqlite.resume("run-1", ScriptedCaller(), Planner(), delete, "ctx"), TieredLoopResult[DeleteArgs, Doc]
    )
    compared = await journal.resume("run-1", ScriptedCaller(), Planner(), delete, "ctx", same=same_path)
    assert_type(compared, TieredLoopResult[DeleteArgs, Doc])
    answered = await journal.resume("run-1", ScriptedCaller(), Planner(), delete, "ctx", answer=Verdict)
    assert_type(answered, TieredLoopResult[DeleteArgs, Doc, Verdict])
    assert_type(answered.answer, Verdict | None)


async def journal_runs(journal: Journal) -> None:
    [run] = await journal.runs()
    assert_type(run.status, RunStatus)
    assert_type(run.resumable, bool)
    assert_type(run.checkpoint_round, int | None)
    assert_type(run.claimed_by, str | None)
    assert_type(run.lease_until, datetime | None)
    match run.status:
        case RunStatus.RUNNING | RunStatus.WAITING | RunStatus.READY:
            pass
        case RunStatus.CRASHED | RunStatus.ABORTED | RunStatus.FINISHED:
            pass
        case _:
            assert_never(run.status)


def run_claimed_is_a_journal_error(error: RunClaimed) -> JournalError:
    assert_type(error.holder, str)
    assert_type(error.id, str)
    return error


def observer_takes_a_lease(journal: Journal) -> None:
    JournalObserver(journal, lease=timedelta(seconds=10)).on_checkpoint("run-1", RunCheckpoint())
