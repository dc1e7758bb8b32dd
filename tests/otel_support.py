"""What the OpenTelemetry tests share: an SDK tracer and meter over in-memory exporters, and readers of what
they received (spans by name, parents, attributes; metric data points by name)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentkit.otel import OTelObserver
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer


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


@pytest.fixture(name="server")
def server_fixture() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server, on loopback HTTP."""
    with FakeOpenAIServer() as fake:
        yield fake


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
