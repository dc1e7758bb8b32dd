"""assert_type checks for agentkit.temporal: the durable agent's ctx and item types flow to the
client's handle and result (mypy only)."""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel

from agentkit import StructuredCaller, Tool, ToolAgent
from agentkit.temporal import (
    DurableAgent,
    DurableOutcome,
    DurableResult,
    DurableRuns,
    PendingProposal,
    RunHandle,
    RunState,
    RunStatus,
    RunSummary,
)


class Brief(BaseModel):
    topic: str


class Search(BaseModel):
    query: str


class Doc(BaseModel):
    id: str


async def durable_types(
    caller: StructuredCaller, runs: DurableRuns, agent: ToolAgent[Brief, Search, Doc], search: Tool[Search, Doc]
) -> None:
    durable = DurableAgent(name="research", agent=agent, tools=search, caller=caller, ctx_type=Brief)
    assert_type(durable, DurableAgent[Brief, Doc])
    handle = await runs.start(durable, Brief(topic="t"))
    assert_type(handle, RunHandle[Doc])
    assert_type(runs.get(durable, "run-1"), RunHandle[Doc])
    result = await handle.result()
    assert_type(result, DurableResult[Doc])
    assert_type(result.items, list[Doc])
    state = await handle.state()
    assert_type(state, RunState)
    assert_type(state.status, RunStatus)
    assert_type(state.pending, list[PendingProposal])
    assert_type(await handle.approve(state.pending[0], by="alice"), RunState)
    assert_type(await runs.outcome("run-1"), DurableOutcome)
    assert_type(await runs.list(), list[RunSummary])
    await runs.start(durable, "not a brief")  # type: ignore[misc]  # the ctx must be the agent's
