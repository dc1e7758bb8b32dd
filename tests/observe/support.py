"""What the OpenTelemetry tests share: an SDK tracer and meter over in-memory exporters, readers of what
they received (spans by name, parents, attributes; metric data points by name), an instrumented HTTP
transport, a run with content planted where it lives, and the span-attribute table of the docs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from agentkit import LoopConfig, StopReason, Tier, ToolRetry, run_tool_loop, tool
from agentkit.otel import OTelObserver
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step
from tests.support import NO_WAIT, Doc, Finder, Query


@dataclass
class Telemetry:
    """One test's tracer and meter provider, and what they exported."""

    exporter: InMemorySpanExporter
    tracer: Tracer
    reader: InMemoryMetricReader
    meters: MeterProvider

    def observer(self, *, capture_content: bool = False) -> OTelObserver:
        return OTelObserver(self.tracer, capture_content=capture_content, meter_provider=self.meters)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        return sorted((s for s in self.spans() if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` exported so far (cumulative)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for exported in scope.metrics:
                    if exported.name == metric:
                        found += list(exported.data.data_points)
        return found

    def metric_names(self) -> set[str]:
        data = self.reader.get_metrics_data()
        return {
            exported.name
            for resource in (data.resource_metrics if data is not None else ())
            for scope in resource.scope_metrics
            for exported in scope.metrics
        }


@pytest.fixture(name="telemetry")
def telemetry_fixture() -> Iterator[Telemetry]:
    """A tracer and a meter provider over in-memory exporters, shut down after the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    yield Telemetry(exporter=exporter, tracer=provider.get_tracer("agentkit-tests"), reader=reader, meters=meters)
    meters.shutdown()
    provider.shutdown()


@pytest.fixture(name="caller")
async def caller_fixture(server: FakeOpenAIServer) -> AsyncIterator[OpenAICaller]:
    """An ``OpenAICaller`` on ``server`` that re-asks nothing itself (``generate_structured`` retries)."""
    async with OpenAICaller(base_url=server.base_url, api_key="unused", max_reasks=0) as made:
        yield made


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def everything_exported(telemetry: Telemetry) -> str:
    """Every string a backend would receive: span names, statuses, attributes, events, links, and every
    metric's name, description and data point attributes."""
    parts: list[str] = []
    for span in telemetry.spans():
        parts += [span.name, span.status.description or "", repr(attrs(span))]
        parts += [f"{e.name} {dict(e.attributes or {})!r}" for e in span.events]
        parts += [repr(dict(link.attributes or {})) for link in span.links]
    data = telemetry.reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for exported in scope.metrics:
                parts += [exported.name, exported.description or "", exported.unit or ""]
                parts += [repr(dict(point.attributes or {})) for point in exported.data.data_points]
    return "\n".join(parts)


CONFIG = LoopConfig(retry=NO_WAIT)


class TracedTransport(httpx2.AsyncBaseTransport):
    """An instrumented HTTP client, as httpx instrumentation makes one: a CLIENT span per request."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with self.tracer.start_as_current_span(f"{request.method} {request.url.path}", kind=SpanKind.CLIENT) as span:
            response = await self.inner.handle_async_request(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@tool(tier=Tier.READ_ONLY)
async def hanging(args: Query) -> list[Doc]:
    """Blocks until cancelled."""
    await asyncio.sleep(60)
    return []


@tool(tier=Tier.READ_ONLY)
def planted(args: Query) -> list[Doc]:
    """Look up documents (markers planted in its failures and results)."""
    if args.query == "retry":
        raise ToolRetry("MARKER-RETRY no such index")
    if args.query == "boom":
        raise RuntimeError("MARKER-ERROR index offline")
    return [Doc(id="MARKER-RESULT")]


MARKERS = [
    "MARKER-PROMPT",
    "MARKER-BAD-REPLY",
    "MARKER-REPLY",
    "MARKER-ARGS",
    "MARKER-RETRY",
    "MARKER-RESULT",
    "MARKER-ERROR",
]


async def planted_run(caller: OpenAICaller, server: FakeOpenAIServer, observer: OTelObserver) -> None:
    """A run that puts each marker where content lives: prompt, invalid and valid replies, args, results, errors."""
    server.add(
        FakeReply.text("MARKER-BAD-REPLY is not JSON"),
        FakeReply.value(call_step(Query(query="retry"), rationale="MARKER-REPLY")),
        FakeReply.value(call_step(Query(query="MARKER-ARGS"))),
        FakeReply.value(call_step(Query(query="boom"))),
    )
    result = await run_tool_loop(caller, Finder(), planted, "MARKER-PROMPT", CONFIG, observer=observer)
    assert result.stop_reason is StopReason.TOOL_ERROR


DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


KINDS = {"invoke_agent ": "run", "agentkit.round": "round", "chat ": "chat", "execute_tool ": "execute_tool"}


def kind_of(span: ReadableSpan) -> str | None:
    """The table's name for a span's kind (a Temporal client's ``invoke_agent`` is a ``durable run``)."""
    if span.name.startswith("invoke_agent ") and span.kind is SpanKind.CLIENT:
        return "durable run"
    return next((kind for prefix, kind in KINDS.items() if span.name.startswith(prefix)), None)


def docs_section(name: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
    return text[text.index(start) + len(start) : text.index(end)]


def documented_attributes() -> dict[tuple[str, str], str]:
    """(span kind, attribute) -> when it is recorded, from the table in the docs."""
    table: dict[tuple[str, str], str] = {}
    for line in docs_section("span-attributes").splitlines()[2:]:
        kind, attribute, recorded = (cell.strip() for cell in line.strip("|").split("|"))
        table[(kind, attribute.strip("`"))] = recorded
    return table


def undocumented(spans: tuple[ReadableSpan, ...], table: dict[tuple[str, str], str]) -> list[str]:
    """What of ``spans`` the table does not say: an attribute it does not list, or one it says is always there
    and is missing."""
    wrong: list[str] = []
    for span in spans:
        kind = kind_of(span)
        if kind is None:
            continue
        wrong += [f"{key} on a {kind} span" for key in attrs(span) if (kind, key) not in table]
        wrong += [
            f"{key} missing on {span.name}"
            for (documented, key), recorded in table.items()
            if documented == kind and recorded.startswith("always") and key not in attrs(span)
        ]
    return wrong
