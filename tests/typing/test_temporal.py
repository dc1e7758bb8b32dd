"""assert_type checks for agentkit.temporal: the durable agent's (or its spec's) ctx and item types flow
to the client's handle and result; an agent started by name gives JSON values (mypy only)."""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel, JsonValue

from agentkit import AgentkitError, StructuredCaller, Tool, ToolAgent
from agentkit.temporal import (
    AgentSpec,
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


class Note(BaseModel):
    text: str


async def durable_types(
    caller: StructuredCaller, runs: DurableRuns, agent: ToolAgent[Brief, Search, Doc], search: Tool[Search, Doc]
) -> None:
    durable = DurableAgent(name="research", agent=agent, tools=search, caller=caller, ctx_type=Brief)
    assert_type(durable, DurableAgent[Brief, Doc])
    assert_type(durable.rerunnable("search"), bool)
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


async def client_types(runs: DurableRuns, durable: DurableAgent[Brief, Doc]) -> None:
    spec = AgentSpec(name="research", ctx_type=Brief, item_type=Doc)
    assert_type(spec, AgentSpec[Brief, Doc])
    assert_type(durable.spec, AgentSpec[Brief, Doc])
    either = AgentSpec[Brief, Doc | Note](name="research", ctx_type=Brief, item_type=Doc | Note)
    assert_type(either, AgentSpec[Brief, Doc | Note])
    handle = await runs.start(spec, Brief(topic="t"))
    assert_type(handle, RunHandle[Doc])
    assert_type((await runs.start(either, Brief(topic="t"))).run_id, str)
    assert_type(runs.get(spec, "run-1"), RunHandle[Doc])
    named = await runs.start("research", {"topic": "t"})
    assert_type(named, RunHandle[JsonValue])
    assert_type(runs.get("research", "run-1"), RunHandle[JsonValue])
    assert_type((await named.result()).items, list[JsonValue])
    assert_type(await handle.wait_for(RunStatus.WAITING, RunStatus.OUTCOME_UNKNOWN), RunState)
    assert_type(await runs.wait_for("run-1", RunStatus.WAITING, timeout=None), RunState)
    result = await handle.result()
    assert_type(result.error, AgentkitError | None)
    assert_type(result.raise_for_error(), DurableResult[Doc])
    assert_type(await runs.start_named("research", {"topic": "t"}), str)
    await runs.start(spec, "not a brief")  # type: ignore[misc]  # the ctx must be the spec's


async def traced_types(durable: DurableAgent[Brief, Doc]) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from temporalio.client import Client
    from temporalio.worker import Worker

    from agentkit.otel import OTelObserver
    from agentkit.temporal import build_worker, connect

    tracer = TracerProvider().get_tracer("t")
    runs = await DurableRuns.connect("localhost:7233", task_queue="q", tracer=tracer)
    assert_type(runs, DurableRuns)
    assert_type(await connect("localhost:7233", tracer=tracer), Client)
    worker = build_worker(runs.client, durable, task_queue="q", observer=OTelObserver(tracer))
    assert_type(worker, Worker)
