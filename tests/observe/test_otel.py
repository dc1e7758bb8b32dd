"""OTelObserver against the real OpenTelemetry SDK and its in-memory span exporter."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer

from agentkit import (
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    Usage,
    run_once,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._agent import ToolRoundInfo
from agentkit._observe import dispatch
from agentkit._once import RoundInfo
from agentkit.errors import ProviderError, Throttled
from agentkit.events import RoundStarted, RunAborted, RunStarted
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
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, ScriptedReply, call_step, done_step
from tests.observe.support import CONFIG, MARKERS, TracedTransport, attrs, parent_of, planted_run, span_id
from tests.support import Doc, Finder, Query, delete, search


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def tracer(provider: TracerProvider) -> Tracer:
    return provider.get_tracer("agentkit-tests")


@pytest.fixture
def observer(tracer: Tracer) -> OTelObserver:
    return OTelObserver(tracer)


@pytest.fixture
async def traced_caller(server: FakeOpenAIServer, tracer: Tracer) -> AsyncIterator[OpenAICaller]:
    """An ``OpenAICaller`` on the fake server whose HTTP requests make spans of their own."""
    async with httpx2.AsyncClient(transport=TracedTransport(tracer)) as http:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", http_client=http)
        yield OpenAICaller(client, max_reasks=0)


def reply(value: dict[str, Any], input_tokens: int, output_tokens: int) -> ScriptedReply:
    return ScriptedReply(value=value, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens))


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)


def exceptions(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "exception"]


class Tuned(Finder):
    """An executor whose role sets every request setting the spans report."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="exec-model", fallback_model="backup-model", temperature=0.2, max_tokens=300, seed=7)


# --- the tree -------------------------------------------------------------------------------------


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
    assert [attrs(r)["agentkit.round"] for r in rounds] == [1, 2, 3]
    assert all(parent_of(r) == span_id(run) for r in rounds)
    round_ids = {attrs(r)["agentkit.round"]: span_id(r) for r in rounds}
    for child in [*chats, *tools]:
        assert parent_of(child) == round_ids[attrs(child)["agentkit.round"]]

    assert attrs(run)[GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert attrs(run)[GEN_AI_AGENT_NAME] == "Finder"
    assert attrs(run)["agentkit.run_id"] == result.run_id
    assert attrs(run)["agentkit.outcome"] == "applied"
    assert attrs(run)["agentkit.rounds"] == 3
    assert attrs(run)["agentkit.items"] == 4
    assert attrs(run)["agentkit.usage.input_tokens"] == 360
    assert GEN_AI_USAGE_INPUT_TOKENS not in attrs(run)
    assert run.status.status_code is StatusCode.UNSET

    chat = chats[1]
    assert chat.name == "chat exec-model"
    assert chat.kind is SpanKind.CLIENT
    assert attrs(chat)[GEN_AI_OPERATION_NAME] == "chat"
    assert attrs(chat)[GEN_AI_REQUEST_MODEL] == "exec-model"
    assert attrs(chat)["gen_ai.response.model"] == "exec-model"
    assert attrs(chat)["gen_ai.output.type"] == "json"
    assert attrs(chat)[GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert attrs(chat)[GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert attrs(chat)["agentkit.attempts"] == 1
    assert attrs(rounds[1])["agentkit.usage.input_tokens"] == 120

    (tool_span, _) = tools
    assert tool_span.name == "execute_tool search"
    assert tool_span.kind is SpanKind.INTERNAL
    assert attrs(tool_span)[GEN_AI_TOOL_NAME] == "search"
    assert attrs(tool_span)["gen_ai.tool.type"] == "function"
    assert attrs(tool_span)["gen_ai.tool.description"] == "Look up documents."
    assert attrs(tool_span)["agentkit.tier"] == "READ_ONLY"
    assert attrs(tool_span)["agentkit.batch_size"] == 2
    for child in spans:
        if child is not run:
            assert (child.start_time or 0) >= (run.start_time or 0)
            assert (child.end_time or 0) <= (run.end_time or 0)


async def test_chat_span_reports_the_request_and_response_of_an_openai_call(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """Over the OpenAI adapter, the chat span carries the provider, server, request settings and response."""
    server.add(FakeReply.value(done_step()))
    await run_tool_loop(traced_caller, Tuned(), search, "ctx", CONFIG, observer=observer)
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat ")
    port = int(server.base_url.split(":")[2].split("/")[0])
    assert attrs(run)[GEN_AI_PROVIDER_NAME] == "openai"
    expected = {
        GEN_AI_PROVIDER_NAME: "openai",
        "server.address": "127.0.0.1",
        "server.port": port,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 300,
        "gen_ai.request.seed": 7,
        "gen_ai.response.model": "exec-model",
        "gen_ai.response.finish_reasons": ("stop",),
        "agentkit.fallback_model": "backup-model",
    }
    assert {key: attrs(chat).get(key) for key in expected} == expected
    assert str(attrs(chat)["gen_ai.response.id"]).startswith("chatcmpl-")


async def test_provider_name_comes_from_the_caller_used(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    """The caller's own provider_name wins; the observer's is only the fallback for callers without one."""

    class Named(ScriptedCaller):
        provider_name = "vllm"

    observer = OTelObserver(tracer, provider_name="ollama")
    await run_tool_loop(Named([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=OTelObserver(tracer))
    runs = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert [attrs(r)[GEN_AI_PROVIDER_NAME] for r in runs] == ["vllm", "ollama", "_OTHER"]
    chats = by_name(exporter.get_finished_spans(), "chat ")
    assert [attrs(c)[GEN_AI_PROVIDER_NAME] for c in chats] == ["vllm", "ollama", "_OTHER"]


def test_openai_caller_names_its_provider_from_the_host() -> None:
    """OpenAICaller reports a known provider's name from the base URL's host, else "openai"."""
    cases = {
        "https://api.openai.com/v1": ("openai", "api.openai.com", 443),
        "https://api.deepseek.com/v1": ("deepseek", "api.deepseek.com", 443),
        "https://x.openai.azure.com/openai/v1": ("azure.ai.openai", "x.openai.azure.com", 443),
        "http://127.0.0.1:8000/v1": ("openai", "127.0.0.1", 8000),
    }
    for url, expected in cases.items():
        caller = OpenAICaller(base_url=url, api_key="unused")
        assert (caller.provider_name, caller.server_address, caller.server_port) == expected


# --- nesting: the work runs inside its span --------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_span_made_inside_a_tool_nests_under_its_tool_span(
    kind: str, tracer: Tracer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A span a tool opens (a database query, say) is a child of ``execute_tool``, async or sync tool alike."""

    def query(args: Query) -> list[Doc]:
        with tracer.start_as_current_span("db.query"):
            return [Doc(id=args.query)]

    @tool(tier=Tier.READ_ONLY)
    async def lookup(args: Query) -> list[Doc]:
        """Query the database."""
        return query(args)

    @tool(tier=Tier.READ_ONLY)
    def lookup_sync(args: Query) -> list[Doc]:
        """Query the database (blocking)."""
        return query(args)

    chosen = lookup if kind == "async" else lookup_sync
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    await run_tool_loop(caller, Finder(), chosen, "ctx", CONFIG, observer=observer)
    spans = exporter.get_finished_spans()
    (db,) = by_name(spans, "db.query")
    (tool_span,) = by_name(spans, "execute_tool")
    assert parent_of(db) == span_id(tool_span)
    assert (tool_span.start_time or 0) <= (db.start_time or 0) <= (db.end_time or 0) <= (tool_span.end_time or 0)


async def test_http_spans_of_each_attempt_nest_under_the_chat_span(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """The HTTP client's spans of a retried call (a 503, then a reply) are both children of its one chat span."""
    server.add(FakeReply.error(503), FakeReply.value(done_step()))
    result = await run_tool_loop(traced_caller, Finder(), search, "ctx", CONFIG, observer=observer)
    assert result.stop_reason is StopReason.NOTHING_RETRIEVED
    spans = exporter.get_finished_spans()
    (chat,) = by_name(spans, "chat ")
    posts = by_name(spans, "POST")
    assert [attrs(p)["http.response.status_code"] for p in posts] == [503, 200]
    assert all(parent_of(p) == span_id(chat) for p in posts)
    assert (chat.start_time or 0) <= (posts[0].start_time or 0)
    assert (posts[-1].end_time or 0) <= (chat.end_time or 0)


async def test_single_shot_model_call_runs_inside_its_chat_span(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """run_once uses the same seam: its HTTP span nests under its chat span, under its run."""

    class Verdict(Doc):
        pass

    class Judge:
        def role(self) -> RoleSpec:
            return RoleSpec(model="judge-model")

        def render(self, ctx: str, info: RoundInfo) -> Prompt:
            return Prompt(system="judge", dynamic=ctx)

    server.add(FakeReply.value({"id": "v"}))
    result = await run_once(traced_caller, Judge(), "ctx", schema=Verdict, observer=observer)
    assert result.value == Verdict(id="v")
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat ")
    (post,) = by_name(spans, "POST")
    assert parent_of(post) == span_id(chat)
    assert chat.context is not None
    assert run.context is not None
    assert chat.context.trace_id == run.context.trace_id


# --- retries, errors -------------------------------------------------------------------------------


async def test_one_chat_span_covers_retries_and_fallback(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A call retried, then answered by the fallback: one chat span, not an error, its attempts as events,
    named and attributed as the fallback's call."""
    caller = ScriptedCaller(
        [ProviderError("503", transient=True), ProviderError("503", transient=True), reply(done_step(), 5, 1)]
    )
    await run_tool_loop(caller, Tuned(), search, "ctx", CONFIG, observer=observer)
    (chat,) = by_name(exporter.get_finished_spans(), "chat ")
    assert chat.name == "chat backup-model"
    assert attrs(chat)[GEN_AI_REQUEST_MODEL] == "backup-model"
    assert attrs(chat)["agentkit.fallback_model"] == "backup-model"
    assert chat.status.status_code is StatusCode.UNSET
    assert attrs(chat)["agentkit.attempts"] == 3
    assert not exceptions(chat)
    attempts = [dict(e.attributes or {}) for e in chat.events if e.name == "agentkit.attempt"]
    assert [(a["agentkit.attempt"], a[GEN_AI_REQUEST_MODEL], a.get("error.type")) for a in attempts] == [
        (1, "exec-model", "agentkit.errors.ProviderError"),
        (2, "exec-model", "agentkit.errors.ProviderError"),
        (3, "backup-model", None),
    ]
    # Usage of every attempt, counted once, on the one span of the call (the scripted caller
    # reports one request and no tokens for a scripted error).
    assert (attrs(chat)[GEN_AI_USAGE_INPUT_TOKENS], attrs(chat)[GEN_AI_USAGE_OUTPUT_TOKENS]) == (5, 1)


async def test_each_exception_is_recorded_once_on_the_span_that_failed(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A failing tool: its span has the exception event; the round and run spans have status and error.type only."""
    caller = ScriptedCaller([call_step(Query(query="boom"))])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)
    spans = exporter.get_finished_spans()
    (tool_span,) = by_name(spans, "execute_tool")
    (run,) = by_name(spans, "invoke_agent")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert attrs(tool_span)["error.type"] == "RuntimeError"
    assert exceptions(tool_span) == [{"exception.type": "RuntimeError"}]
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["error.type"] == "agentkit.errors.ToolError"
    assert sum(len(exceptions(s)) for s in spans) == 1


async def test_throttled_call_fails_its_chat_span_and_marks_the_run(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A throttle: the chat span records it; the run span is an error with its stop reason, no exception event."""
    caller = ScriptedCaller([Throttled("slow down", retry_after=3)])
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)
    assert result.stop_reason is StopReason.THROTTLED
    spans = exporter.get_finished_spans()
    (run,) = by_name(spans, "invoke_agent")
    (chat,) = by_name(spans, "chat ")
    assert exceptions(chat) == [{"exception.type": "agentkit.errors.Throttled"}]
    assert not exceptions(run)
    for span in (run, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description is None
        assert attrs(span)["error.type"] == "agentkit.errors.Throttled"
    assert attrs(run)["agentkit.stop_reason"] == "throttled"


async def test_proposal_round_carries_agentkit_attributes_not_a_tool_name(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A proposal: no tool span and no gen_ai.tool.name (nothing ran); no digest unless content is captured."""
    caller = ScriptedCaller([call_step(Query(query="old"), tool="delete")])
    result = await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", CONFIG, observer=observer)
    assert result.proposed
    spans = exporter.get_finished_spans()
    assert not by_name(spans, "execute_tool")
    (round_span,) = by_name(spans, "agentkit.round")
    assert attrs(round_span)["agentkit.proposal.tool_name"] == "delete"
    assert attrs(round_span)["agentkit.proposal.tier"] == "IRREVERSIBLE"
    assert all(not key.startswith("gen_ai.tool") for s in spans for key in attrs(s))
    assert [e.name for e in round_span.events] == ["agentkit.proposal"]
    (run,) = by_name(spans, "invoke_agent")
    assert attrs(run)["agentkit.proposals"] == 1
    assert all("digest" not in key for s in spans for key in attrs(s))


async def test_proposal_digest_is_recorded_with_capture_on(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    """With content captured, the round and run carry the proposal's digest (the SDK stores sequences as tuples)."""
    caller = ScriptedCaller([call_step(Query(query="old"), tool="delete")])
    observer = OTelObserver(tracer, capture_content=True)
    result = await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", CONFIG, observer=observer)
    (proposal,) = result.proposed
    spans = exporter.get_finished_spans()
    assert attrs(by_name(spans, "agentkit.round")[0])["agentkit.proposal.digest"] == proposal.digest
    assert attrs(by_name(spans, "invoke_agent")[0])["agentkit.proposal.digests"] == (proposal.digest,)


async def test_run_span_nests_under_the_current_span(
    tracer: Tracer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A run started inside the caller's span becomes its child."""
    with tracer.start_as_current_span("handle-request") as outer:
        await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    (run,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert parent_of(run) == outer.get_span_context().span_id


async def test_concurrent_runs_keep_their_spans_apart(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """One observer shared by concurrent runs parents each round, chat and tool span under its own run."""

    async def one() -> str:
        caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
        return (await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=observer)).run_id

    await asyncio.gather(one(), one())
    spans = exporter.get_finished_spans()
    runs = by_name(spans, "invoke_agent")
    assert len(runs) == 2
    for run in runs:
        assert run.context is not None
        trace_spans = [s for s in spans if s.context is not None and s.context.trace_id == run.context.trace_id]
        assert sorted(s.name for s in trace_spans) == sorted(
            ["invoke_agent Finder", *["agentkit.round"] * 2, *["chat exec-model"] * 2, "execute_tool search"]
        )


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
    failed = [s for s in spans if not s.name.startswith("chat")]
    assert [s.status.status_code for s in failed] == [StatusCode.ERROR] * 3
    assert all(attrs(s)["error.type"] == "asyncio.exceptions.CancelledError" for s in failed)
    (run,) = by_name(spans, "invoke_agent")
    assert attrs(run)["agentkit.aborted"] is True
    assert sum(len(exceptions(s)) for s in spans) == 1


def test_events_of_an_unknown_run_are_ignored(observer: OTelObserver, exporter: InMemorySpanExporter) -> None:
    """Events for a run the observer never saw start (attached mid-run) make no broken spans."""
    dispatch((observer,), RoundStarted(run_id="x", info=ToolRoundInfo(round=2, max_rounds=4, is_final_round=False)))
    dispatch((observer,), RunAborted(run_id="x", error=asyncio.CancelledError()))
    assert exporter.get_finished_spans() == ()


def test_an_aborted_run_without_a_round_ends_its_run_span(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """RunAborted right after RunStarted ends the run span as an error, with no max_rounds when unlimited."""
    dispatch((observer,), RunStarted(run_id="r1", agent="Finder", model="m", tools=("search",), max_rounds=None))
    dispatch((observer,), RunAborted(run_id="r1", error=asyncio.CancelledError()))
    (run,) = exporter.get_finished_spans()
    assert run.status.status_code is StatusCode.ERROR
    assert "agentkit.max_rounds" not in attrs(run)


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
        "import sys, agentkit, agentkit._stream, agentkit._observe, agentkit.testing; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- content ---------------------------------------------------------------------------------------


def everything_recorded(spans: tuple[ReadableSpan, ...]) -> str:
    """Every string a backend would receive: names, status descriptions, attributes, events."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, span.status.description or "", repr(dict(span.attributes or {}))]
        parts += [f"{e.name} {dict(e.attributes or {})!r}" for e in span.events]
    return "\n".join(parts)


async def test_no_content_reaches_any_span_by_default(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """Markers planted in the prompt, replies, args, results and errors appear on no span by default."""
    await planted_run(traced_caller, server, observer)
    recorded = everything_recorded(exporter.get_finished_spans())
    assert [marker for marker in MARKERS if marker in recorded] == []


async def test_capture_content_records_every_planted_marker(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """With capture_content=True, each marker is recorded, under the semantic conventions' opt-in attributes."""
    await planted_run(traced_caller, server, OTelObserver(tracer, capture_content=True))
    spans = exporter.get_finished_spans()
    recorded = everything_recorded(spans)
    assert [marker for marker in MARKERS if marker not in recorded] == []
    chats = by_name(spans, "chat ")
    assert "MARKER-PROMPT" in attrs(chats[0])["gen_ai.input.messages"]
    assert "MARKER-REPLY" in attrs(chats[0])["gen_ai.output.messages"]
    tools = by_name(spans, "execute_tool")
    assert "MARKER-ARGS" in attrs(tools[1])["gen_ai.tool.call.arguments"]
    assert "MARKER-RESULT" in attrs(tools[1])["gen_ai.tool.call.result"]
    assert "MARKER-ERROR" in exceptions(tools[2])[0]["exception.message"]


async def test_each_call_of_a_step_has_its_own_tool_span_under_the_round(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """A step of three calls makes three execute_tool spans, each under the round's span, each with its own call id."""
    from dataclasses import replace

    from agentkit.testing import calls_step

    step = calls_step(*(call_step(Query(query=q)) for q in "abc"))
    caller = ScriptedCaller([reply(step, 100, 10), reply(done_step(), 120, 12)])
    config = replace(CONFIG, max_calls_per_step=3)
    await run_tool_loop(caller, Finder(), search, "ctx", config, observer=observer)
    spans = exporter.get_finished_spans()
    rounds = by_name(spans, "agentkit.round")
    tools = by_name(spans, "execute_tool")
    assert len(tools) == 3
    assert {parent_of(t) for t in tools} == {span_id(rounds[0])}
    ids = [attrs(t)["gen_ai.tool.call.id"] for t in tools]
    assert len(set(ids)) == 3
    assert sorted(i.rsplit(":", 1)[1] for i in ids) == ["0", "1", "2"]


async def test_a_proposal_after_untrusted_content_carries_its_provenance(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """The round of a proposal made after an untrusted result says so, whether the policy held it, and which
    argument fields first appeared in untrusted content (names, never values); the run counts its untrusted reads."""
    from agentkit import AfterProposal
    from agentkit.provenance import Trust
    from tests.support import PathArgs, Recording

    reader = Recording("read_mail", Tier.READ_ONLY)
    reader.trust = Trust.UNTRUSTED  # type: ignore[attr-defined]  # a declaration set on a hand-made tool
    archive = Recording("archive", Tier.REVERSIBLE, PathArgs)
    caller = ScriptedCaller(
        [call_step(Query(query="inbox"), tool="read_mail"), call_step(PathArgs(path="read_mail:1"), tool="archive")]
    )
    config = dataclasses.replace(CONFIG, after_proposal=AfterProposal.STOP)
    await run_tool_loop_tiered(caller, Finder(), [reader, archive], "ctx", config, observer=observer)
    spans = exporter.get_finished_spans()
    proposing = [s for s in by_name(spans, "agentkit.round") if "agentkit.proposal.tool_name" in attrs(s)]
    [round_span] = proposing
    assert attrs(round_span)["agentkit.proposal.after_untrusted"] is True
    assert attrs(round_span)["agentkit.proposal.held_by_provenance"] is True
    assert tuple(attrs(round_span)["agentkit.proposal.from_untrusted"]) == ("path",)
    assert "agentkit.proposal.steered" not in attrs(round_span)
    assert all("read_mail:1" not in str(value) for s in spans for value in attrs(s).values())
    (run,) = by_name(spans, "invoke_agent")
    assert attrs(run)["agentkit.untrusted_reads"] == 1


async def test_a_proposal_names_the_fields_of_steered_values(
    observer: OTelObserver, exporter: InMemorySpanExporter
) -> None:
    """Under `ProvenancePolicy(steered=True)`, the fields whose values came from a trusted read made after the
    untrusted one are named apart, as `agentkit.proposal.steered` (they are in `from_untrusted` too)."""
    from agentkit import AfterProposal
    from agentkit.provenance import ProvenancePolicy, Trust
    from tests.support import PathArgs, Recording

    reader = Recording("read_mail", Tier.READ_ONLY)
    reader.trust = Trust.UNTRUSTED  # type: ignore[attr-defined]  # a declaration set on a hand-made tool
    lookup = Recording("lookup", Tier.READ_ONLY)
    archive = Recording("archive", Tier.REVERSIBLE, PathArgs)
    caller = ScriptedCaller(
        [
            call_step(Query(query="inbox"), tool="read_mail"),
            call_step(Query(query="folders"), tool="lookup"),
            call_step(PathArgs(path="lookup:1"), tool="archive"),
        ]
    )
    config = dataclasses.replace(CONFIG, after_proposal=AfterProposal.STOP, provenance=ProvenancePolicy(steered=True))
    await run_tool_loop_tiered(caller, Finder(), [reader, lookup, archive], "ctx", config, observer=observer)
    [round_span] = [
        s for s in by_name(exporter.get_finished_spans(), "agentkit.round") if "agentkit.proposal.tool_name" in attrs(s)
    ]
    assert tuple(attrs(round_span)["agentkit.proposal.from_untrusted"]) == ("path",)
    assert tuple(attrs(round_span)["agentkit.proposal.steered"]) == ("path",)
