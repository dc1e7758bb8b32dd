"""OTelObserver against the real OpenTelemetry SDK and its in-memory span exporter."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentkit import (
    LoopConfig,
    ProviderError,
    RoleSpec,
    StopReason,
    Throttled,
    Tier,
    Usage,
    UsageError,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit.agent import ToolRoundInfo
from agentkit.events import Event, RoundStarted, RunAborted, RunStarted, ToolCallStarted
from agentkit.observe import dispatch
from agentkit.otel import (
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_TOOL_NAME,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    OTelObserver,
)
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.test_observe import NO_WAIT, Doc, Finder, Query, delete, search

CONFIG = LoopConfig(retry=NO_WAIT)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def observer(provider: TracerProvider) -> OTelObserver:
    return OTelObserver(provider.get_tracer("agentkit-tests"))


def reply(value: dict[str, Any], input_tokens: int, output_tokens: int) -> ScriptedReply:
    return ScriptedReply(value=value, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens))


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


async def test_three_round_run_makes_the_span_tree(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """A three-round run: one run span, three round spans under it, model and tool spans under their rounds."""
    caller = ScriptedCaller(
        [
            reply(call_step(Query(query="a")), 100, 10),
            reply(call_step(Query(query="b")), 120, 12),
            reply(done_step(), 140, 14),
        ]
    )
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)
    spans = exporter.get_finished_spans()
    assert len(spans) == 1 + 3 + 3 + 2

    (run,) = by_name(spans, "invoke_agent")
    rounds = by_name(spans, "agentkit.round")
    chats = by_name(spans, "chat ")
    tools = by_name(spans, "execute_tool")
    assert run.name == "invoke_agent Finder"
    assert run.parent is None
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id if run.context else 0}

    assert [r.attributes["agentkit.round"] for r in rounds if r.attributes] == [1, 2, 3]
    assert all(parent_of(r) == span_id(run) for r in rounds)
    round_ids = {r.attributes["agentkit.round"]: span_id(r) for r in rounds if r.attributes}
    for child in [*chats, *tools]:
        assert child.attributes is not None
        assert parent_of(child) == round_ids[child.attributes["agentkit.round"]]
    assert [t.attributes["agentkit.round"] for t in tools if t.attributes] == [1, 2]

    assert run.attributes is not None
    assert run.attributes[GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert run.attributes[GEN_AI_AGENT_NAME] == "Finder"
    assert run.attributes["agentkit.run_id"] == result.run_id
    assert run.attributes["agentkit.outcome"] == "applied"
    assert run.attributes["agentkit.stop_reason"] == "executor_done"
    assert run.attributes["agentkit.rounds"] == 3
    assert run.attributes["agentkit.items"] == 4
    assert run.attributes["agentkit.usage.input_tokens"] == 360
    assert run.attributes["agentkit.usage.output_tokens"] == 36
    assert GEN_AI_USAGE_INPUT_TOKENS not in run.attributes
    assert run.status.status_code is StatusCode.UNSET

    chat = chats[1]
    assert chat.name == "chat exec-model"
    assert chat.kind is SpanKind.CLIENT
    assert chat.attributes is not None
    assert chat.attributes[GEN_AI_OPERATION_NAME] == "chat"
    assert chat.attributes[GEN_AI_PROVIDER_NAME] == "openai"
    assert chat.attributes[GEN_AI_REQUEST_MODEL] == "exec-model"
    assert chat.attributes[GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert chat.attributes[GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert chat.attributes["agentkit.attempt"] == 1
    assert rounds[1].attributes is not None
    assert rounds[1].attributes["agentkit.usage.input_tokens"] == 120

    tool = tools[0]
    assert tool.name == "execute_tool search"
    assert tool.attributes is not None
    assert tool.attributes[GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool.attributes[GEN_AI_TOOL_NAME] == "search"
    assert tool.attributes["agentkit.tier"] == "READ_ONLY"
    assert tool.attributes["agentkit.batch_size"] == 2

    for child in spans:
        if child is not run:
            assert (child.start_time or 0) >= (run.start_time or 0)
            assert (child.end_time or 0) <= (run.end_time or 0)


async def test_throttled_run_marks_the_run_span_as_error(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A throttle: the model span records the exception, and the run span is an error with its stop reason."""
    caller = ScriptedCaller([Throttled("slow down", retry_after=3)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)
    assert result.stop_reason is StopReason.THROTTLED
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["agentkit.round", "chat exec-model", "invoke_agent Finder"]
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat ")
    for span in (run, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "Throttled: slow down"
        assert span.attributes is not None
        assert span.attributes["error.type"] == "agentkit.errors.Throttled"
        (exception,) = [e for e in span.events if e.name == "exception"]
        assert exception.attributes is not None
        assert exception.attributes["exception.type"] == "agentkit.errors.Throttled"
    assert run.attributes is not None
    assert run.attributes["agentkit.outcome"] == "error"
    assert run.attributes["agentkit.stop_reason"] == "throttled"


async def test_proposal_is_recorded_on_its_round(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """A proposal: no tool span (nothing ran); the round and the run carry its tier and digest."""
    caller = ScriptedCaller([call_step(Query(query="old"), tool="delete")])
    result = await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", CONFIG, observer=observer)
    (proposal,) = result.proposed
    spans = exporter.get_finished_spans()
    assert not by_name(spans, "execute_tool")
    (round_span,) = by_name(spans, "agentkit.round")
    assert round_span.attributes is not None
    assert round_span.attributes["agentkit.proposal.digest"] == proposal.digest
    assert round_span.attributes["agentkit.tier"] == "IRREVERSIBLE"
    assert round_span.attributes[GEN_AI_TOOL_NAME] == "delete"
    assert [e.name for e in round_span.events] == ["agentkit.proposal"]
    (run,) = by_name(spans, "invoke_agent")
    assert run.attributes is not None
    assert run.attributes["agentkit.stop_reason"] == "proposed"
    assert run.attributes["agentkit.outcome"] == "applied"
    # The SDK stores every sequence attribute as a tuple, so equality pins the exact digests.
    assert run.attributes["agentkit.proposal.digests"] == (proposal.digest,)
    assert run.status.status_code is StatusCode.UNSET


async def test_failed_tool_span_records_the_exception(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """A tool that raises: its span is an error with the ToolError recorded."""
    caller = ScriptedCaller([call_step(Query(query="boom"))])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)
    (tool,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes is not None
    assert tool.attributes["error.type"] == "agentkit.errors.ToolError"
    assert "index offline" in (tool.status.description or "")


async def test_each_attempt_gets_its_own_model_span(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """A retried call and its fallback: one model span per attempt, the failed ones marked as errors."""

    class WithFallback(Finder):
        def role(self) -> RoleSpec:
            return RoleSpec(model="exec-model", fallback_model="backup-model")

    caller = ScriptedCaller(
        [ProviderError("503", transient=True), ProviderError("503", transient=True), reply(done_step(), 5, 1)]
    )
    await run_tool_loop(caller, WithFallback(), search, "ctx", CONFIG, observer=observer)
    chats = by_name(exporter.get_finished_spans(), "chat ")
    assert [(c.name, c.status.status_code) for c in chats] == [
        ("chat exec-model", StatusCode.ERROR),
        ("chat exec-model", StatusCode.ERROR),
        ("chat backup-model", StatusCode.UNSET),
    ]
    assert [c.attributes["agentkit.attempt"] for c in chats if c.attributes] == [1, 2, 3]


async def test_run_span_nests_under_the_current_span(
    provider: TracerProvider, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A run started inside the caller's span becomes its child."""
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("handle-request") as outer:
        await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    (run,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert parent_of(run) == outer.get_span_context().span_id


async def test_concurrent_runs_keep_their_spans_apart(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """One observer shared by concurrent runs parents each round under its own run."""

    async def one() -> str:
        caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
        return (await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)).run_id

    await asyncio.gather(one(), one())
    spans = exporter.get_finished_spans()
    runs = {span_id(s): s for s in by_name(spans, "invoke_agent")}
    assert len(runs) == 2
    for round_span in by_name(spans, "agentkit.round"):
        assert parent_of(round_span) in runs
    assert sorted(parent_of(r) or 0 for r in by_name(spans, "agentkit.round")) == sorted([*runs, *runs])


def test_an_aborted_run_ends_its_open_spans_as_errors(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """On RunAborted, the open tool, round and run spans end, marked as errors."""
    events: list[Event] = [
        RunStarted(run_id="r1", agent="Finder", model="m", tools=("search",), max_rounds=None),
        RoundStarted(run_id="r1", info=ToolRoundInfo(round=1, max_rounds=None, is_final_round=False)),
        ToolCallStarted(run_id="r1", round=1, tool_name="search", tier=Tier.READ_ONLY, args=Query(query="a")),
        RunAborted(run_id="r1", error=asyncio.CancelledError()),
    ]
    for event in events:
        dispatch((observer,), event)
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["agentkit.round", "execute_tool search", "invoke_agent Finder"]
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    (run,) = by_name(spans, "invoke_agent")
    assert run.attributes is not None
    assert run.attributes["agentkit.aborted"] is True
    assert "agentkit.max_rounds" not in run.attributes


def test_events_of_an_unknown_run_are_ignored(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """Events for a run the observer never saw start (attached mid-run) make no broken spans."""
    dispatch((observer,), RoundStarted(run_id="x", info=ToolRoundInfo(round=2, max_rounds=4, is_final_round=False)))
    dispatch((observer,), RunAborted(run_id="x", error=UsageError("wiring")))
    assert exporter.get_finished_spans() == ()


def test_attribute_names_match_the_semantic_conventions_package() -> None:
    """The gen_ai.* names used are those of the installed OpenTelemetry semantic conventions."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv

    assert GEN_AI_OPERATION_NAME == semconv.GEN_AI_OPERATION_NAME
    assert GEN_AI_REQUEST_MODEL == semconv.GEN_AI_REQUEST_MODEL
    assert GEN_AI_USAGE_INPUT_TOKENS == semconv.GEN_AI_USAGE_INPUT_TOKENS
    assert GEN_AI_USAGE_OUTPUT_TOKENS == semconv.GEN_AI_USAGE_OUTPUT_TOKENS
    assert GEN_AI_AGENT_NAME == semconv.GEN_AI_AGENT_NAME
    assert GEN_AI_TOOL_NAME == semconv.GEN_AI_TOOL_NAME
    assert GEN_AI_PROVIDER_NAME == semconv.GEN_AI_PROVIDER_NAME


def test_importing_agentkit_does_not_import_opentelemetry() -> None:
    """``import agentkit`` (and its stream and observers) leaves OpenTelemetry unimported."""
    code = (
        "import sys, agentkit, agentkit.stream, agentkit.observe, agentkit.testing; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_a_cancelled_run_closes_its_spans(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """Cancelling a run inside a tool call still ends its tool, round and run spans, as errors."""
    entered = asyncio.Event()

    @tool(tier=Tier.READ_ONLY)
    async def hang(args: Query) -> list[Doc]:
        """Blocks until cancelled."""
        entered.set()
        await asyncio.sleep(60)
        return []

    task = asyncio.create_task(
        run_tool_loop(ScriptedCaller([call_step(Query(query="a"))]), Finder(), hang, "ctx", observer=observer)
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "agentkit.round",
        "chat exec-model",
        "execute_tool hang",
        "invoke_agent Finder",
    ]
    assert [s.status.status_code for s in spans if not s.name.startswith("chat")] == [StatusCode.ERROR] * 3
