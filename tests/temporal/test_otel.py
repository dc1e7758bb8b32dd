"""Traces of a durable run on a real Temporal dev server: temporalio's tracing interceptor for the workflow and
its activities, agentkit's ``chat`` and ``execute_tool`` spans inside the activities, one trace per run across
workers and legs, and the GenAI metrics the activities record."""

from __future__ import annotations

import pytest

from agentkit import Outcome, StopReason
from agentkit.temporal import RunStatus
from tests.observe.support import (  # noqa: F401  # the fixture telemetry
    Telemetry,
    attrs,
    documented_attributes,
    kind_of,
    parent_of,
    span_id,
    telemetry_fixture,
    trace_id,
    undocumented,
)
from tests.temporal.agents import DONE, Brief, step, until
from tests.temporal.support import TemporalTest

pytestmark = pytest.mark.slow


async def test_a_durable_run_is_one_trace_across_workers_with_the_approved_call_in_it(
    temporal: TemporalTest, telemetry: Telemetry
) -> None:
    """Propose on one worker, approve, execute and finish on another: every span of the run (the client's
    ``invoke_agent``, the interceptor's workflow and activity spans, agentkit's ``chat`` and ``execute_tool``
    in the activities) is in one trace; the approved call's span says who approved it; the metrics count
    each model attempt."""
    traced = await temporal.traced(telemetry.tracer)
    temporal.fake.add(step("search", query="a"), step("send", to="bob", text="hi"), DONE)
    async with traced.worker(observer=telemetry.observer()):
        handle = await traced.runs.start(temporal.research, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
    async with traced.worker(observer=telemetry.observer()):
        await handle.approve(proposal, by="alice")
        result = await handle.result()
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    run_id = handle.run_id

    [root] = telemetry.named("invoke_agent")
    assert attrs(root).items() >= {"gen_ai.agent.name": "research", "gen_ai.conversation.id": run_id}.items()
    assert root.parent is None
    legs = telemetry.named("RunWorkflow:agentkit.run")
    # The run continued as new at its wait for people: two legs (the second played on both workers).
    assert len({attrs(leg)["temporalRunID"] for leg in legs}) == 2
    chats = telemetry.named("chat ")
    tools = telemetry.named("execute_tool")
    activities = {span_id(s): s.name for s in telemetry.named("RunActivity:")}
    for span in [*legs, *chats, *tools, *telemetry.named("RunActivity:")]:
        assert trace_id(span) == trace_id(root), span.name

    assert [attrs(c)["agentkit.round"] for c in chats] == [1, 2, 3]
    for chat in chats:
        assert activities[parent_of(chat) or 0] == "RunActivity:agentkit.model_call"
        assert attrs(chat)["gen_ai.conversation.id"] == run_id
        assert attrs(chat)["gen_ai.provider.name"] == "openai"
        assert attrs(chat)["agentkit.attempts"] == 1

    search, send = tools
    assert activities[parent_of(send) or 0] == "RunActivity:agentkit.tool_call"
    assert "agentkit.approved" not in attrs(search)
    assert (
        attrs(send).items()
        >= {
            "gen_ai.tool.name": "send",
            "agentkit.tier": "IRREVERSIBLE",
            "agentkit.approved": True,
            "agentkit.approval.approved_by": "alice",
            "agentkit.round": 2,
            "gen_ai.tool.call.id": f"{run_id}:2",
            "gen_ai.conversation.id": run_id,
        }.items()
    )

    # The docs' attribute table holds for these spans too, the client's "durable run" span included.
    table = documented_attributes()
    assert undocumented(telemetry.spans(), table) == []
    durable = {key for kind, key in table if kind == "durable run"}
    assert kind_of(root) == "durable run"
    assert set(attrs(root)) == durable

    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 3
    assert dict(duration.attributes or {})["gen_ai.provider.name"] == "openai"
    assert {dict(p.attributes or {})["gen_ai.token.type"] for p in telemetry.points("gen_ai.client.token.usage")} == {
        "input",
        "output",
    }


async def test_an_untraced_client_and_worker_emit_nothing(temporal: TemporalTest, telemetry: Telemetry) -> None:
    """Without a tracer or an observer nothing is traced, and the run is what it always was."""
    temporal.fake.add(step("search", query="a"), DONE)
    async with temporal.worker():
        result = await (await temporal.runs.start(temporal.research, Brief(topic="t"))).result()
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert telemetry.spans() == ()
