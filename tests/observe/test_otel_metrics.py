"""The GenAI metrics, read back from the OpenTelemetry SDK's in-memory metric reader over real runs."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from agentkit import StopReason, run_tool_loop, run_tool_loop_tiered
from agentkit._otel_metrics import DURATION_BUCKETS, TOKEN_BUCKETS
from agentkit.errors import ProviderError
from agentkit.otel import OTelObserver
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, ScriptedCaller, ScriptedReply, call_step, done_step
from tests.observe.support import (  # noqa: F401  # the fixtures caller and telemetry
    CONFIG,
    MARKERS,
    Telemetry,
    caller_fixture,
    everything_exported,
    planted_run,
    telemetry_fixture,
)
from tests.support import Finder, Query, delete, search


def used(value: dict[str, object], input_tokens: int, output_tokens: int) -> ScriptedReply:
    from agentkit import Usage

    return ScriptedReply(value=value, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens))


async def test_each_model_call_is_one_duration_and_two_token_points(telemetry: Telemetry) -> None:
    """Per logical call: one ``gen_ai.client.operation.duration`` measurement (seconds, the spec's buckets) and
    its input and output tokens as ``gen_ai.client.token.usage`` (the spec's buckets), with the spec's attributes."""
    caller = ScriptedCaller([used(call_step(Query(query="a")), 100, 10), used(done_step(), 140, 14)])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert tuple(duration.explicit_bounds) == DURATION_BUCKETS
    assert 0 < duration.sum < 5
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "_OTHER",
        "gen_ai.request.model": "exec-model",
        "gen_ai.response.model": "exec-model",
    }
    assert dict(duration.attributes or {}) == expected
    tokens = {dict(p.attributes or {})["gen_ai.token.type"]: p for p in telemetry.points("gen_ai.client.token.usage")}
    assert sorted(tokens) == ["input", "output"]
    assert (tokens["input"].count, tokens["input"].sum) == (2, 240)
    assert (tokens["output"].count, tokens["output"].sum) == (2, 24)
    assert tuple(tokens["input"].explicit_bounds) == tuple(float(b) for b in TOKEN_BUCKETS)
    assert dict(tokens["output"].attributes or {}) == expected | {"gen_ai.token.type": "output"}


async def test_a_failed_call_is_measured_with_its_error_type(telemetry: Telemetry) -> None:
    """A call that failed after every attempt: its duration point carries ``error.type`` and no response model."""
    caller = ScriptedCaller([ProviderError("down", status=503, transient=True)] * 2)
    result = await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    assert result.stop_reason is StopReason.LLM_ERROR
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert dict(duration.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "_OTHER",
        "gen_ai.request.model": "exec-model",
        "error.type": "503",
    }


async def test_an_openai_call_is_measured_with_its_server(
    server: FakeOpenAIServer, caller: OpenAICaller, telemetry: Telemetry
) -> None:
    """Over the OpenAI adapter: the provider, ``server.address`` and ``server.port``, and the reply's token counts."""
    from agentkit.testing import FakeReply

    server.add(FakeReply.value(done_step()))
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer())
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    port = int(server.base_url.split(":")[2].split("/")[0])
    assert (
        dict(duration.attributes or {}).items()
        >= {
            "gen_ai.provider.name": "openai",
            "server.address": "127.0.0.1",
            "server.port": port,
        }.items()
    )
    tokens = telemetry.points("gen_ai.client.token.usage")
    assert all(point.sum > 0 for point in tokens)


async def test_proposals_are_counted_by_tier(telemetry: Telemetry) -> None:
    """``agentkit.proposals``: one per call that became a proposal, by tool and tier."""
    caller = ScriptedCaller([call_step(Query(query="x"), tool="delete")])
    await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", CONFIG, observer=telemetry.observer())
    [counted] = telemetry.points("agentkit.proposals")
    assert counted.value == 1
    assert dict(counted.attributes or {}) == {"gen_ai.tool.name": "delete", "agentkit.tier": "IRREVERSIBLE"}


async def test_metrics_off_records_none(telemetry: Telemetry) -> None:
    """``OTelObserver(metrics=False)``: spans only."""
    observer = OTelObserver(telemetry.tracer, meter_provider=telemetry.meters, metrics=False)
    await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    assert telemetry.metric_names() == set()
    assert telemetry.named("chat ")


async def test_the_global_meter_provider_is_used_when_none_is_given() -> None:
    """Without ``meter_provider=`` the global one is asked (a no-op until an SDK is installed): nothing fails."""
    observer = OTelObserver()
    result = await run_tool_loop(ScriptedCaller([done_step()]), Finder(), search, "ctx", CONFIG, observer=observer)
    assert result.stop_reason is StopReason.NOTHING_RETRIEVED


async def test_nothing_planted_reaches_spans_or_metrics_by_default(
    server: FakeOpenAIServer, caller: OpenAICaller, telemetry: Telemetry
) -> None:
    """Markers planted in the prompt, replies, args, results and errors appear in no span, event, link or metric."""
    await planted_run(caller, server, telemetry.observer())
    exported = everything_exported(telemetry)
    assert telemetry.metric_names() >= {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"}
    assert [marker for marker in MARKERS if marker in exported] == []


async def test_metrics_never_carry_content_even_with_capture(
    server: FakeOpenAIServer, caller: OpenAICaller, telemetry: Telemetry
) -> None:
    """Content capture is for spans: with it on, the metrics still carry no planted marker."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    observer = OTelObserver(telemetry.tracer, capture_content=True, meter_provider=meters)
    await planted_run(caller, server, observer)
    data = reader.get_metrics_data()
    assert data is not None
    text = repr(
        [
            (m.name, [dict(p.attributes or {}) for p in m.data.data_points])
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        ]
    )
    assert "gen_ai.client.operation.duration" in text
    assert [marker for marker in MARKERS if marker in text] == []
    meters.shutdown()


async def test_usage_details_are_span_attributes_and_detail_token_points(telemetry: Telemetry) -> None:
    """Cached, cache-written and reasoning tokens are the GenAI attributes on the chat and attempt spans, and points
    of `agentkit.client.token.usage.details` by type; the conventions' `input`/`output` points are unchanged; the
    reasoning text reaches no span, even with content capture on."""
    from agentkit import Usage

    usage = Usage(
        requests=1,
        input_tokens=100,
        output_tokens=40,
        cached_input_tokens=64,
        cache_write_tokens=8,
        reasoning_tokens=30,
    )
    caller = ScriptedCaller([ScriptedReply(value=done_step(), usage=usage, reasoning="SECRET-THOUGHT")])
    await run_tool_loop(caller, Finder(), search, "ctx", CONFIG, observer=telemetry.observer(capture_content=True))
    [chat] = telemetry.named("chat")
    details = {
        "gen_ai.usage.cache_read.input_tokens": 64,
        "gen_ai.usage.cache_creation.input_tokens": 8,
        "gen_ai.usage.reasoning.output_tokens": 30,
    }
    assert {k: v for k, v in (chat.attributes or {}).items() if k in details} == details
    tokens = {
        dict(p.attributes or {})["gen_ai.token.type"]: p.sum for p in telemetry.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": 100, "output": 40}
    parts = telemetry.points("agentkit.client.token.usage.details")
    assert {dict(p.attributes or {})["gen_ai.token.type"]: p.sum for p in parts} == {
        "cache_read": 64,
        "cache_creation": 8,
        "reasoning": 30,
    }
    assert "SECRET-THOUGHT" not in everything_exported(telemetry)
