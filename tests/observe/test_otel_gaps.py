"""The smaller promises of the traces: the provider from the start, error classes, a tool's timeout and
``ToolRetry``, a failed run's round, the text call's response, the tool call id, and the transcript as sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.util.types import Attributes

from agentkit import LoopConfig, Prompt, RoleSpec, StopReason, Tier, ToolRetry, run_once_text, run_tool_loop, tool
from agentkit._once import RoundInfo
from agentkit.errors import ProviderError
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, call_step, done_step
from tests.observe.support import (  # noqa: F401  # the fixtures caller and telemetry
    CONFIG,
    Telemetry,
    attrs,
    caller_fixture,
    parent_of,
    span_id,
    telemetry_fixture,
)
from tests.support import NO_WAIT, Doc, Finder, Query


class Seen(Sampler):
    """Records the attributes each span starts with: what a sampler decides on."""

    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        self.started[name] = dict(attributes or {})
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "seen"


async def test_the_run_span_starts_with_the_callers_provider(server: FakeOpenAIServer, caller: OpenAICaller) -> None:
    """A sampler sees ``invoke_agent`` start with the caller's provider, not ``_OTHER`` fixed later."""
    from agentkit.otel import OTelObserver

    seen = Seen()
    provider = TracerProvider(sampler=seen)
    server.add(FakeReply.value(done_step()))
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=OTelObserver(provider.get_tracer("t")))
    assert seen.started["invoke_agent Finder"]["gen_ai.provider.name"] == "openai"
    assert seen.started["chat exec-model"]["gen_ai.provider.name"] == "openai"


@tool(tier=Tier.READ_ONLY)
async def search(args: Query) -> list[Doc]:
    """Look up documents (slowly for "slow", wrongly for "retry", failing for "boom")."""
    if args.query == "slow":
        await asyncio.sleep(5)
    if args.query == "retry":
        raise ToolRetry("no such index")
    if args.query == "boom":
        raise RuntimeError("index offline")
    return [Doc(id=args.query)]


async def test_a_tool_cut_off_by_its_timeout_reads_tool_timeout(telemetry: Telemetry) -> None:
    """A tool past ``tool_timeout``: its span's error.type is ``ToolTimeout``; no span or event says CancelledError."""
    caller = ScriptedCaller([call_step(Query(query="slow"))])
    config = LoopConfig(retry=NO_WAIT, tool_timeout=0.05)
    result = await run_tool_loop(caller, Finder(), search, "ctx", config, observer=telemetry.observer())
    assert result.stop_reason is StopReason.TOOL_ERROR
    [span] = telemetry.named("execute_tool")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "agentkit.errors.ToolTimeout"
    assert [dict(e.attributes or {}) for e in span.events] == [{"exception.type": "agentkit.errors.ToolTimeout"}]
    everything = repr([(s.name, attrs(s), [(e.name, e.attributes) for e in s.events]) for s in telemetry.spans()])
    assert "CancelledError" not in everything


async def test_tool_retry_does_not_paint_the_tool_span_red(telemetry: Telemetry) -> None:
    """A ``ToolRetry`` is the executor's feedback, not a failure: the span is not an error and says it was retried."""
    caller = ScriptedCaller([call_step(Query(query="retry")), call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    retried, ran = telemetry.named("execute_tool")
    for span in (retried, ran):
        assert span.status.status_code is StatusCode.UNSET
        assert "error.type" not in attrs(span)
    assert [e.name for e in retried.events] == ["agentkit.tool_retry"]
    assert dict(retried.events[0].attributes or {}) == {}  # its message is content


async def test_a_failed_runs_round_span_is_an_error(telemetry: Telemetry) -> None:
    """The round in which a run failed carries ERROR and the run's error.type, as its run span does."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="boom"))])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    first, failed = telemetry.named("agentkit.round")
    assert first.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "agentkit.errors.ToolError"
    [run] = telemetry.named("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR


async def test_each_tool_span_names_its_call(telemetry: Telemetry) -> None:
    """``gen_ai.tool.call.id`` is the run id and the round: unique in the run, shared with that round's approval."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b")), done_step()])
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    ids = [attrs(s)["gen_ai.tool.call.id"] for s in telemetry.named("execute_tool")]
    assert ids == [f"{result.run_id}:1", f"{result.run_id}:2"]


async def test_http_errors_are_typed_by_status_and_client_failures_by_class(
    server: FakeOpenAIServer, caller: OpenAICaller, telemetry: Telemetry
) -> None:
    """A server's answer is typed by its HTTP status (``503``), a scripted error by its class."""
    server.add(FakeReply.error(503), FakeReply.value(done_step()))
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    [chat] = telemetry.named("chat ")
    attempts = [dict(e.attributes or {}) for e in chat.events if e.name == "agentkit.attempt"]
    assert [a.get("error.type") for a in attempts] == ["503", None]

    telemetry.exporter.clear()
    async with OpenAICaller(base_url="http://127.0.0.1:9/v1", api_key="unused", timeout=2) as unreachable:
        result = await run_tool_loop(unreachable, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    assert result.stop_reason is StopReason.LLM_ERROR
    [chat] = telemetry.named("chat ")
    assert attrs(chat)["error.type"] == "openai.APIConnectionError"

    telemetry.exporter.clear()
    scripted = ScriptedCaller([ProviderError("down", status=502), ProviderError("down", status=502)])
    await run_tool_loop(scripted, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    [chat] = telemetry.named("chat ")
    assert attrs(chat)["error.type"] == "502"


class Writer:
    def role(self) -> RoleSpec:
        return RoleSpec(model="writer")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="write", dynamic=ctx)


async def test_a_text_call_keeps_its_response_id_and_finish_reasons(
    server: FakeOpenAIServer, caller: OpenAICaller, telemetry: Telemetry
) -> None:
    """``run_once_text`` over the OpenAI adapter: the chat span has the reply's id and finish reasons."""
    server.add(FakeReply.text("a short poem"))
    result = await run_once_text(caller, Writer(), "a poem", observer=telemetry.observer())
    assert result.text == "a short poem"
    [chat] = telemetry.named("chat ")
    assert str(attrs(chat)["gen_ai.response.id"]).startswith("chatcmpl-")
    assert attrs(chat)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs(chat)["gen_ai.output.type"] == "text"


@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.JSON, StructuredMode.MD_JSON])
async def test_the_captured_transcript_is_every_message_as_sent(
    mode: StructuredMode, server: FakeOpenAIServer, telemetry: Telemetry
) -> None:
    """With capture on, an invalid reply re-asked within the attempt: the chat span holds one details event per
    request (the re-ask and its correction included), and the system instructions exactly as the server got
    them (the schema text the JSON modes add)."""
    server.add(FakeReply.text("not json at all"), FakeReply.value(done_step()))
    async with OpenAICaller(base_url=server.base_url, api_key="unused", mode=mode) as caller:
        await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer(capture_content=True))
    sent = [request["messages"] for request in server.requests]
    assert len(sent) == 2
    [chat] = telemetry.named("chat ")
    details = [
        {key: str(value) for key, value in (e.attributes or {}).items()}
        for e in chat.events
        if e.name == "gen_ai.client.inference.operation.details"
    ]
    assert len(details) == 2
    for event, messages in zip(details, sent, strict=True):
        recorded = json.loads(event["gen_ai.input.messages"])
        assert [m["role"] for m in recorded] == [m["role"] for m in messages]
        texts = [part.get("content") for m in recorded for part in m["parts"] if part["type"] == "text"]
        assert texts == [m["content"] for m in messages if isinstance(m.get("content"), str) and m["content"]]
    assert "not json at all" in details[0]["gen_ai.output.messages"]
    system = [m["content"] for m in sent[-1] if m["role"] == "system"]
    assert json.loads(attrs(chat)["gen_ai.system_instructions"]) == [{"type": "text", "content": c} for c in system]
    if mode is not StructuredMode.JSON_SCHEMA:
        assert "properties" in system[0]  # the schema text, as sent
    final = json.loads(attrs(chat)["gen_ai.input.messages"])
    assert len(final) == len(sent[-1]) - len(system) > 1  # the re-ask's messages are there


async def test_a_transcript_listener_is_only_there_while_its_call_runs(telemetry: Telemetry) -> None:
    """Outside a captured call nothing listens, so a caller reporting what it sent costs nothing."""
    from agentkit._transcript import listened

    assert not listened()
    seen: list[bool] = []

    class Reporting(ScriptedCaller):
        async def complete(self, request: Any, schema: Any) -> Any:
            seen.append(listened())
            return await super().complete(request, schema)

    observer = telemetry.observer(capture_content=True)
    await run_tool_loop(Reporting([done_step()]), Finder(), search, "c", CONFIG, observer=observer)
    await run_tool_loop(Reporting([done_step()]), Finder(), search, "c", CONFIG, observer=telemetry.observer())
    assert seen == [True, False]
    assert not listened()


async def test_the_parent_of_a_round_is_its_run_and_the_run_is_current_between_rounds(telemetry: Telemetry) -> None:
    """After the run, nothing of it stays current: the caller's context is as it was."""
    from opentelemetry import trace

    before = trace.get_current_span()
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    assert trace.get_current_span() is before
    [run] = telemetry.named("invoke_agent")
    assert all(parent_of(r) == span_id(run) for r in telemetry.named("agentkit.round"))
