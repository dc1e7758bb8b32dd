"""assert_type checks for checkpoints and resume_tool_loop (mypy only)."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import (
    Approval,
    Rejection,
    ResumeRefused,
    RunCheckpoint,
    TieredLoopResult,
    UsageError,
    approve,
    reject,
    resume_tool_loop,
    run_tool_loop_tiered,
)
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, delete, search
from tests.typing.test_tiered import Planner


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


def refusal_is_a_usage_error(error: ResumeRefused) -> UsageError:
    return error
