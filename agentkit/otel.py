"""``OTelObserver``: OpenTelemetry spans for runs, rounds, model calls and tool calls.

Needs the ``otel`` extra (``pip install 'agentkit[otel]'``); ``import agentkit`` never imports
OpenTelemetry, only ``import agentkit.otel`` does.

The span tree of one run::

    invoke_agent <Agent>              gen_ai.provider.name, agentkit.outcome, agentkit.usage.*
    ├── agentkit.round                agentkit.round; a proposal's tool and tier
    │   ├── chat <model>              one per logical call; its attempts are agentkit.attempt events
    │   │   └── (the HTTP client's spans, one per attempt)
    │   └── execute_tool <tool>       gen_ai.tool.name, gen_ai.tool.type, agentkit.tier
    │       └── (spans the tool makes)
    └── agentkit.round ...

Spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``); what they do not cover
is under ``agentkit.*``. A model call and a tool invocation run *inside* their span (the span is
current, through ``Observer.around``), so the spans other libraries make while they run (the
HTTP client's, a database driver's) nest under them. Run and round spans are parented
explicitly and never made current.

Content (prompts, replies, tool arguments and results, exception messages, proposal digests)
is recorded only with ``capture_content=True``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic_core

from agentkit._events import (
    DegenerationDetected,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunAborted,
    RunFinished,
    RunStarted,
)
from agentkit._observe import ModelCall, Observer, ToolInvocation
from agentkit._outcome import Outcome
from agentkit._results import TieredLoopResult, ToolLoopResult, Usage
from agentkit._structured import Completion
from agentkit._tools import declared_tier

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
_OUTPUT_TYPE = "gen_ai.output.type"
_TEMPERATURE = "gen_ai.request.temperature"
_MAX_TOKENS = "gen_ai.request.max_tokens"
_SEED = "gen_ai.request.seed"
_RESPONSE_MODEL = "gen_ai.response.model"
_RESPONSE_ID = "gen_ai.response.id"
_FINISH_REASONS = "gen_ai.response.finish_reasons"
_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
_INPUT_MESSAGES = "gen_ai.input.messages"
_OUTPUT_MESSAGES = "gen_ai.output.messages"
_TOOL_TYPE = "gen_ai.tool.type"
_TOOL_DESCRIPTION = "gen_ai.tool.description"
_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
_TOOL_RESULT = "gen_ai.tool.call.result"
_SERVER_ADDRESS = "server.address"
_SERVER_PORT = "server.port"
_ERROR_TYPE = "error.type"
_OTHER = "_OTHER"
"""The semantic conventions' value for "none of the known ones" (provider, error type)."""

_INSTRUMENTATION = "agentkit"


@dataclass(slots=True)
class _RunSpans:
    run: Span
    run_context: Context
    round: Span | None = None
    round_context: Context | None = None
    round_usage: Usage = field(default_factory=Usage)
    chat: Span | None = None
    """The open model-call span: its attempts are reported to it as events."""
    attempts: int = 0


class OTelObserver(Observer):
    """Makes one span per run, per round, per logical model call and per tool invocation.

    An observer may be shared by concurrent runs: spans are kept per ``run_id``. A model call or
    tool invocation that fails records its exception on its own span; the run span of a run that
    ends in ``Outcome.ERROR`` (or is aborted) gets the ERROR status and ``error.type`` only.

    Args:
        tracer: The tracer to use; ``trace.get_tracer("agentkit")`` (the global provider) when
            omitted.
        capture_content: Record content, as the semantic conventions' opt-in attributes: the
            prompts (``gen_ai.system_instructions``, ``gen_ai.input.messages``), the replies
            (``gen_ai.output.messages``), tool arguments and results (``gen_ai.tool.call.*``),
            exception messages and stack traces, and proposals' arguments and digests. Off by
            default: content is likely to hold personal or secret data.
        provider_name: ``gen_ai.provider.name`` for runs whose caller does not declare one (a
            caller's ``provider_name`` attribute, as ``OpenAICaller`` has, always wins);
            ``"_OTHER"`` when omitted.
    """

    def __init__(
        self, tracer: Tracer | None = None, *, capture_content: bool = False, provider_name: str | None = None
    ) -> None:
        self.tracer = tracer or trace.get_tracer(_INSTRUMENTATION)
        self.capture_content = capture_content
        self.provider_name = provider_name or _OTHER
        self._runs: dict[str, _RunSpans] = {}

    def on_run_start(self, event: RunStarted) -> None:
        """Open the run span (a child of whatever span is current)."""
        span = self.tracer.start_span(
            f"invoke_agent {event.agent}",
            kind=SpanKind.INTERNAL,
            attributes={
                GEN_AI_OPERATION_NAME: "invoke_agent",
                GEN_AI_PROVIDER_NAME: self.provider_name,
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
        span = self.tracer.start_span(
            "agentkit.round",
            context=spans.run_context,
            attributes={"agentkit.round": event.info.round, "agentkit.final_round": event.info.is_final_round},
        )
        spans.round, spans.round_context = span, trace.set_span_in_context(span)

    @contextlib.contextmanager
    def around(self, call: ModelCall | ToolInvocation) -> Iterator[None]:
        """Open the call's span and make it current while the call runs."""
        spans = self._runs.get(call.run_id)
        if spans is None:
            yield
            return
        span = self._start_chat(spans, call) if isinstance(call, ModelCall) else self._start_tool(spans, call)
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                yield
        except BaseException as error:
            if isinstance(call, ModelCall):
                _set_usage(span, getattr(error, "usage", None))
            self._fail(span, error)
            raise
        else:
            if isinstance(call, ModelCall):
                self._end_chat(span, call)
            else:
                self._end_tool(span, call)
        finally:
            if spans.chat is span:
                span.set_attribute("agentkit.attempts", spans.attempts)
                spans.chat, spans.attempts = None, 0
            span.end()

    def on_llm_call(self, event: LLMCallFinished) -> None:
        """Add the attempt to its model call's span, as an ``agentkit.attempt`` event."""
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        spans.round_usage += event.usage
        if spans.chat is None:
            return
        spans.attempts += 1
        attributes: dict[str, str | int | float] = {
            "agentkit.attempt": event.attempt,
            GEN_AI_REQUEST_MODEL: event.model,
            GEN_AI_USAGE_INPUT_TOKENS: event.usage.input_tokens,
            GEN_AI_USAGE_OUTPUT_TOKENS: event.usage.output_tokens,
            "agentkit.duration": event.seconds,
        }
        if event.error is not None:
            attributes[_ERROR_TYPE] = _error_type(event.error)
            if self.capture_content:
                attributes["exception.message"] = str(event.error)
        spans.chat.add_event("agentkit.attempt", attributes=attributes)

    def on_proposal(self, event: ProposalCaptured) -> None:
        """Mark the round: its call became a proposal (no tool span: nothing ran)."""
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is None:
            return
        proposal = event.proposal
        attributes = {"agentkit.proposal.tool_name": proposal.tool_name, "agentkit.proposal.tier": proposal.tier.name}
        if self.capture_content:
            attributes["agentkit.proposal.arguments"] = proposal.args.model_dump_json()
            attributes["agentkit.proposal.digest"] = proposal.digest
        span.set_attributes(attributes)
        span.add_event("agentkit.proposal", attributes=attributes)

    def on_degeneration(self, event: DegenerationDetected) -> None:
        """Mark the round: the executor repeated a call."""
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is not None:
            span.add_event("agentkit.degeneration", attributes={"agentkit.degeneration.tool_name": event.tool_name})

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
            span.set_attribute("agentkit.proposals", len(result.proposed))
            if self.capture_content:
                span.set_attribute("agentkit.proposal.digests", [proposal.digest for proposal in result.proposed])
        if result.outcome is Outcome.ERROR:
            self._mark(span, result.error)
        span.end()

    def on_run_abort(self, event: RunAborted) -> None:
        """Close the run's spans as errors (the exception itself is on the span it escaped, if any)."""
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        if spans.round is not None:
            self._mark(spans.round, event.error)
        self._end_round(spans)
        spans.run.set_attribute("agentkit.aborted", True)
        self._mark(spans.run, event.error)
        spans.run.end()

    def _parent(self, spans: _RunSpans) -> Context:
        return spans.round_context or spans.run_context

    def _start_chat(self, spans: _RunSpans, call: ModelCall) -> Span:
        request, caller = call.request, call.caller
        provider = _described(caller, "provider_name", str) or self.provider_name
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_REQUEST_MODEL: request.model,
            _OUTPUT_TYPE: _described(caller, "output_type", str) or "json",
            "agentkit.role": call.role,
            "agentkit.round": call.round,
        }
        optional = {
            _TEMPERATURE: request.temperature,
            _MAX_TOKENS: request.max_tokens,
            _SEED: request.seed,
            "agentkit.fallback_model": request.fallback_model,
        }
        attributes |= {key: value for key, value in optional.items() if value is not None}
        address = _described(caller, "server_address", str)
        port = _described(caller, "server_port", int)
        if address:
            attributes[_SERVER_ADDRESS] = address
            if port:
                attributes[_SERVER_PORT] = port
        if self.capture_content:
            if request.system:
                attributes[_SYSTEM_INSTRUCTIONS] = _json([{"type": "text", "content": request.system}])
            attributes[_INPUT_MESSAGES] = _json([_message("user", request.dynamic)])
        spans.run.set_attribute(GEN_AI_PROVIDER_NAME, provider)
        span = self.tracer.start_span(
            f"chat {request.model}", context=self._parent(spans), kind=SpanKind.CLIENT, attributes=attributes
        )
        spans.chat, spans.attempts = span, 0
        return span

    def _end_chat(self, span: Span, call: ModelCall) -> None:
        completion = call.result
        if not isinstance(completion, Completion):
            return
        _set_usage(span, completion.usage)
        span.set_attribute(_RESPONSE_MODEL, completion.model)
        if completion.response_id:
            span.set_attribute(_RESPONSE_ID, completion.response_id)
        if completion.finish_reasons:
            span.set_attribute(_FINISH_REASONS, list(completion.finish_reasons))
        if self.capture_content:
            value = completion.value
            text = getattr(value, "text", None) if _described(call.caller, "output_type", str) == "text" else None
            content = text if isinstance(text, str) else value.model_dump_json()
            finish = completion.finish_reasons[0] if completion.finish_reasons else "stop"
            span.set_attribute(_OUTPUT_MESSAGES, _json([_message("assistant", content) | {"finish_reason": finish}]))

    def _start_tool(self, spans: _RunSpans, call: ToolInvocation) -> Span:
        tool = call.tool
        tier = declared_tier(tool)
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "execute_tool",
            GEN_AI_TOOL_NAME: tool.name,
            _TOOL_TYPE: "function",
            "agentkit.tier": tier.name if tier is not None else "none",
            "agentkit.round": call.round,
        }
        description = getattr(tool, "description", None)
        if isinstance(description, str) and description:
            attributes[_TOOL_DESCRIPTION] = description
        if self.capture_content:
            attributes[_TOOL_ARGUMENTS] = call.args.model_dump_json()
        return self.tracer.start_span(
            f"execute_tool {tool.name}", context=self._parent(spans), kind=SpanKind.INTERNAL, attributes=attributes
        )

    def _end_tool(self, span: Span, call: ToolInvocation) -> None:
        batch = call.result
        if not isinstance(batch, Sequence) or isinstance(batch, str | bytes):
            span.set_attribute(_ERROR_TYPE, "TypeError")
            span.set_status(Status(StatusCode.ERROR))
            return
        span.set_attribute("agentkit.batch_size", len(batch))
        if self.capture_content:
            span.set_attribute(_TOOL_RESULT, pydantic_core.to_json(list(batch), fallback=repr).decode())

    def _fail(self, span: Span, error: BaseException) -> None:
        """The failing span: status, ``error.type`` and the one exception event (its message only with capture)."""
        if self.capture_content:
            span.record_exception(error)
        else:
            span.add_event("exception", attributes={"exception.type": _error_type(error)})
        self._mark(span, error)

    def _mark(self, span: Span, error: BaseException | None) -> None:
        """ERROR status and ``error.type``, no exception event (it is on the span that failed)."""
        span.set_attribute(_ERROR_TYPE, _error_type(error) if error is not None else _OTHER)
        description = f"{type(error).__name__}: {error}" if error is not None and self.capture_content else None
        span.set_status(Status(StatusCode.ERROR, description))

    def _end_round(self, spans: _RunSpans) -> None:
        if spans.round is None:
            return
        spans.round.set_attributes(_usage_attributes(spans.round_usage))
        spans.round.end()
        spans.round, spans.round_context, spans.round_usage = None, None, Usage()


def _described(caller: object, name: str, kind: type[Any]) -> Any:
    """A caller's self-description (``provider_name``, ...), looked up through a wrapper's ``caller``."""
    for candidate in (caller, getattr(caller, "caller", None)):
        value = getattr(candidate, name, None)
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
    return None


def _set_usage(span: Span, usage: object) -> None:
    if isinstance(usage, Usage):
        span.set_attributes(
            {GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens, GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens}
        )


def _usage_attributes(usage: Usage) -> dict[str, int]:
    return {
        "agentkit.usage.requests": usage.requests,
        "agentkit.usage.input_tokens": usage.input_tokens,
        "agentkit.usage.output_tokens": usage.output_tokens,
    }


def _message(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _error_type(error: BaseException) -> str:
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
