"""``OTelObserver``: OpenTelemetry spans for runs, rounds, model calls and tool calls.

Needs the ``otel`` extra (``pip install 'agentkit[otel]'``); ``import agentkit`` never imports
OpenTelemetry, only ``import agentkit.otel`` does.

The span tree of one run::

    invoke_agent <Agent>              agentkit.outcome, agentkit.stop_reason, agentkit.usage.*
    ├── agentkit.round                agentkit.round; a proposal's tier and digest
    │   ├── chat <model>              one per attempt: gen_ai.request.model, gen_ai.usage.*
    │   └── execute_tool <tool>       gen_ai.tool.name, agentkit.tier, agentkit.batch_size
    └── agentkit.round ...

Model-call spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``); what they
do not cover is under ``agentkit.*``. Token counts sit as ``gen_ai.usage.*`` only on model-call
spans, so a backend summing them does not count a token twice; run and round spans carry their
totals as ``agentkit.usage.*``. Spans are parented explicitly, never made current: hooks are
synchronous, and a context attached in one could outlive a cancelled run in the caller's task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentkit.events import (
    DegenerationDetected,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunAborted,
    RunFinished,
    RunStarted,
    ToolCallStarted,
    ToolResultReturned,
)
from agentkit.observe import Observer
from agentkit.outcome import Outcome
from agentkit.results import TieredLoopResult, ToolLoopResult, Usage

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError("agentkit.otel needs OpenTelemetry; install the extra: pip install 'agentkit[otel]'") from missing

__all__ = [
    "GEN_AI_AGENT_NAME",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "OTelObserver",
]

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
ERROR_TYPE = "error.type"

_INSTRUMENTATION = "agentkit"


@dataclass(slots=True)
class _RunSpans:
    run: Span
    run_context: Context
    round: Span | None = None
    round_context: Context | None = None
    round_started_ns: int = 0
    round_usage: Usage = field(default_factory=Usage)
    tools: dict[str, Span] = field(default_factory=dict)
    """Open tool spans by tool name (one call runs at a time per tool within a round)."""


class OTelObserver(Observer):
    """Makes one span per run, per round, per model attempt and per tool call.

    An observer may be shared by concurrent runs: spans are kept per ``run_id``. A run that ends
    in ``Outcome.ERROR`` (or is aborted) marks its run span as error, with the exception recorded.

    Args:
        tracer: The tracer to use; ``trace.get_tracer("agentkit")`` (the global provider) when
            omitted.
        provider_name: ``gen_ai.provider.name`` on model-call spans: ``"openai"`` for OpenAI and
            the servers that speak its API through ``OpenAICaller``; name yours (``"vllm"``,
            ``"ollama"``) when the backend is known.
    """

    def __init__(self, tracer: Tracer | None = None, *, provider_name: str = "openai") -> None:
        self.tracer = tracer or trace.get_tracer(_INSTRUMENTATION)
        self.provider_name = provider_name
        self._runs: dict[str, _RunSpans] = {}

    def on_run_start(self, event: RunStarted) -> None:
        """Open the run span (a child of whatever span is current)."""
        span = self.tracer.start_span(
            f"invoke_agent {event.agent}",
            kind=SpanKind.INTERNAL,
            attributes={
                GEN_AI_OPERATION_NAME: "invoke_agent",
                GEN_AI_AGENT_NAME: event.agent,
                GEN_AI_REQUEST_MODEL: event.model,
                "agentkit.run_id": event.run_id,
                "agentkit.tools": list(event.tools),
            },
        )
        if event.max_rounds is not None:
            span.set_attribute("agentkit.max_rounds", event.max_rounds)
        self._runs[event.run_id] = _RunSpans(run=span, run_context=trace.set_span_in_context(span))

    def on_round_start(self, event: RoundStarted) -> None:
        """Close the previous round's span and open this round's."""
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        self._end_round(spans)
        started = time.time_ns()
        span = self.tracer.start_span(
            "agentkit.round",
            context=spans.run_context,
            start_time=started,
            attributes={"agentkit.round": event.info.round, "agentkit.final_round": event.info.is_final_round},
        )
        spans.round, spans.round_context, spans.round_started_ns = span, trace.set_span_in_context(span), started

    def on_llm_call(self, event: LLMCallFinished) -> None:
        """Record the finished attempt as a span spanning its latency."""
        spans = self._runs.get(event.run_id)
        context = self._parent(spans)
        ended = time.time_ns()
        started = ended - int(event.seconds * 1e9)
        if spans is not None and spans.round is not None:
            started = max(started, spans.round_started_ns)
            spans.round_usage += event.usage
        span = self.tracer.start_span(
            f"chat {event.model}",
            context=context,
            kind=SpanKind.CLIENT,
            start_time=started,
            attributes={
                GEN_AI_OPERATION_NAME: "chat",
                GEN_AI_PROVIDER_NAME: self.provider_name,
                GEN_AI_REQUEST_MODEL: event.model,
                GEN_AI_USAGE_INPUT_TOKENS: event.usage.input_tokens,
                GEN_AI_USAGE_OUTPUT_TOKENS: event.usage.output_tokens,
                "agentkit.role": event.role,
                "agentkit.round": event.round,
                "agentkit.attempt": event.attempt,
            },
        )
        if event.error is not None:
            _fail(span, event.error)
        span.end(end_time=ended)

    def on_tool_call(self, event: ToolCallStarted) -> None:
        """Open the tool call's span."""
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        spans.tools[event.tool_name] = self.tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=self._parent(spans),
            attributes={
                GEN_AI_OPERATION_NAME: "execute_tool",
                GEN_AI_TOOL_NAME: event.tool_name,
                "agentkit.tier": event.tier.name,
                "agentkit.round": event.round,
            },
        )

    def on_tool_result(self, event: ToolResultReturned) -> None:
        """Close the tool call's span with its batch size, observation or error."""
        spans = self._runs.get(event.run_id)
        span = spans.tools.pop(event.tool_name, None) if spans is not None else None
        if span is None:
            return
        span.set_attribute("agentkit.batch_size", event.batch_size)
        if event.observation is not None:
            span.set_attribute("agentkit.observation", event.observation)
        if event.error is not None:
            _fail(span, event.error)
        span.end()

    def on_proposal(self, event: ProposalCaptured) -> None:
        """Mark the round: its call became a proposal (no tool span: nothing ran)."""
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is None:
            return
        proposal = event.proposal
        attributes = {
            GEN_AI_TOOL_NAME: proposal.tool_name,
            "agentkit.tier": proposal.tier.name,
            "agentkit.proposal.digest": proposal.digest,
        }
        span.set_attributes(attributes)
        span.add_event("agentkit.proposal", attributes=attributes)

    def on_degeneration(self, event: DegenerationDetected) -> None:
        """Mark the round: the executor repeated a call."""
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is not None:
            span.add_event("agentkit.degeneration", attributes={GEN_AI_TOOL_NAME: event.tool_name})

    def on_run_end(self, event: RunFinished) -> None:
        """Close the run's spans with its outcome, stop reason and usage."""
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        self._end_round(spans)
        result = event.result
        span = spans.run
        span.set_attributes(
            {
                "agentkit.outcome": result.outcome.value,
                "agentkit.stop_reason": result.stop_reason.value,
                "agentkit.rounds": result.rounds,
                **_usage_attributes(result.usage),
            }
        )
        if isinstance(result, ToolLoopResult):
            span.set_attribute("agentkit.items", len(result.items))
        if isinstance(result, TieredLoopResult) and result.proposed:
            span.set_attribute("agentkit.proposal.digests", [proposal.digest for proposal in result.proposed])
        if result.outcome is Outcome.ERROR:
            _fail(span, result.error)
        span.end()

    def on_run_abort(self, event: RunAborted) -> None:
        """Close every span the run left open, as errors."""
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        for tool_span in spans.tools.values():
            _fail(tool_span, event.error)
            tool_span.end()
        if spans.round is not None:
            _fail(spans.round, event.error)
        self._end_round(spans)
        spans.run.set_attribute("agentkit.aborted", True)
        _fail(spans.run, event.error)
        spans.run.end()

    def _parent(self, spans: _RunSpans | None) -> Context | None:
        if spans is None:
            return None
        return spans.round_context or spans.run_context

    def _end_round(self, spans: _RunSpans) -> None:
        if spans.round is None:
            return
        spans.round.set_attributes(_usage_attributes(spans.round_usage))
        spans.round.end()
        spans.round, spans.round_context, spans.round_usage = None, None, Usage()


def _usage_attributes(usage: Usage) -> dict[str, int]:
    return {
        "agentkit.usage.requests": usage.requests,
        "agentkit.usage.input_tokens": usage.input_tokens,
        "agentkit.usage.output_tokens": usage.output_tokens,
    }


def _fail(span: Span, error: BaseException | None) -> None:
    if error is None:
        span.set_status(Status(StatusCode.ERROR))
        return
    span.record_exception(error)
    span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
