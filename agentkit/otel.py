"""`OTelObserver`: OpenTelemetry spans and GenAI metrics for runs, rounds, model calls and tool calls.

Needs the `otel` extra (`pip install 'agentkit[otel]'`); `import agentkit` never imports
OpenTelemetry, only `import agentkit.otel` does.

The span tree of one run (a resumed leg, too: it links to the round it continues):

```text
invoke_agent <Agent>              gen_ai.provider.name, gen_ai.conversation.id, agentkit.outcome, agentkit.usage.*
├── execute_tool <tool>           a resumed leg's approved call: agentkit.approved, agentkit.approval.approved_by
├── agentkit.round                agentkit.round; a proposal's tool, tier and provenance
│   ├── chat <model>              one per logical call; its attempts are agentkit.attempt events
│   │   └── (the HTTP client's spans, one per attempt)
│   └── execute_tool <tool>       gen_ai.tool.name, gen_ai.tool.call.id, gen_ai.tool.type, agentkit.tier
│       └── (spans the tool makes)
└── agentkit.round ...
```

An approved call run outside a run (`execute_approved`, `journal.execute`, a journal worker, a
Temporal tool activity) and a Temporal model activity get their `execute_tool` / `chat` span under
whatever span is current. Spans follow the OpenTelemetry GenAI semantic conventions (`gen_ai.*`);
what they do not cover is under `agentkit.*`. Every span is current while its work runs: the run's
and the round's while the run's own code runs (`render` included), a model call's and a tool's
through `Observer.around`, so the spans other libraries make meanwhile (the HTTP client's, a
database driver's) nest under them.

Metrics (`gen_ai.client.operation.duration`, `gen_ai.client.token.usage`, `agentkit.proposals`,
`agentkit.decisions`) go through the OpenTelemetry metrics API (`agentkit._otel_metrics`).

Content (prompts, replies, tool arguments and results, exception messages, proposal digests)
is recorded only with `capture_content=True`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic_core

from agentkit import events
from agentkit._observe import ModelCall, Observer, ToolInvocation
from agentkit._otel_attributes import (
    described,
    error_type,
    json_text,
    server,
    text_message,
    text_of,
    text_part,
    usage_attributes,
    usage_details,
    wire_message,
)
from agentkit._outcome import Outcome
from agentkit._results import TieredLoopResult, ToolLoopResult, Usage
from agentkit._structured import Completion
from agentkit._tools import declared_tier
from agentkit._transcript import Sent, listening
from agentkit.errors import ToolRetry

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from agentkit._otel_metrics import Metrics
    from agentkit._proposals import ProposedAction
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError("agentkit.otel needs OpenTelemetry; install the extra: pip install 'agentkit[otel]'") from missing

__all__ = [
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
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
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
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
_TOOL_CALL_ID = "gen_ai.tool.call.id"
_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
_TOOL_RESULT = "gen_ai.tool.call.result"
_ERROR_TYPE = "error.type"
_DETAILS = "gen_ai.client.inference.operation.details"
"""The conventions' event for one inference's content: each request a call sent, with capture on."""
_OTHER = "_OTHER"
"""The semantic conventions' value for "none of the known ones" (provider, error type)."""

_INSTRUMENTATION = "agentkit"
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(slots=True)
class _Chat:
    """One open model-call span: its attempts are reported to it, and (with capture) the requests it sent."""

    span: Span
    provider: str
    started: float
    attempts: int = 0
    model: str = ""
    """The model the latest attempt asked (the fallback's, once the call fell back to it)."""
    sent: list[Sent] = field(default_factory=list)


@dataclass(slots=True)
class _RunSpans:
    run: Span
    run_context: Context
    run_token: object
    provider: str
    round: Span | None = None
    round_context: Context | None = None
    round_token: object = None
    round_usage: Usage = field(default_factory=Usage)
    chat: _Chat | None = None


class OTelObserver(Observer):
    """Makes one span per run, per round, per logical model call and per tool invocation, and records
    the GenAI client metrics.

    An observer may be shared by concurrent runs: spans are kept per `run_id`. A model call or
    tool invocation that fails records its exception on its own span; the run span of a run that
    ends in `Outcome.ERROR` (or is aborted), and its round span, get the ERROR status and
    `error.type` only. A tool's `ToolRetry` is not a failure: its span says so in an
    `agentkit.tool_retry` event.

    Args:
        tracer: The tracer to use; `trace.get_tracer("agentkit")` (the global provider) when
            omitted.
        capture_content: Record content, as the semantic conventions' opt-in attributes: the
            prompts as sent (`gen_ai.system_instructions`, `gen_ai.input.messages`, with the
            schema text a JSON mode adds and every re-ask, one
            `gen_ai.client.inference.operation.details` event per request), the replies
            (`gen_ai.output.messages`), tool arguments and results (`gen_ai.tool.call.*`),
            exception messages and stack traces, and proposals' arguments and digests. Off by
            default: content is likely to hold personal or secret data.
        provider_name: `gen_ai.provider.name` for runs whose caller does not declare one (a
            caller's `provider_name` attribute, as `OpenAICaller` has, always wins);
            `"_OTHER"` when omitted.
        meter_provider: Where the metrics go; the global meter provider when omitted.
        metrics: Record metrics at all (`False`: spans only).
    """

    def __init__(
        self,
        tracer: Tracer | None = None,
        *,
        capture_content: bool = False,
        provider_name: str | None = None,
        meter_provider: MeterProvider | None = None,
        metrics: bool = True,
    ) -> None:
        self.tracer = tracer or trace.get_tracer(_INSTRUMENTATION)
        self.capture_content = capture_content
        self.provider_name = provider_name or _OTHER
        self.metrics = Metrics(meter_provider) if metrics else None
        self._runs: dict[str, _RunSpans] = {}

    def on_run_start(self, event: events.RunStarted) -> None:
        """Open the run span (a child of whatever span is current) and make it current."""
        provider = described(event.caller, "provider_name", str) or self.provider_name
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "invoke_agent",
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_AGENT_NAME: event.agent,
            GEN_AI_REQUEST_MODEL: event.model,
            GEN_AI_CONVERSATION_ID: event.run_id,
            "agentkit.run_id": event.run_id,
            "agentkit.tools": list(event.tools),
        }
        if event.max_rounds is not None:
            attributes["agentkit.max_rounds"] = event.max_rounds
        continues = event.continues
        links = []
        if continues is not None:
            attributes["agentkit.continues.round"] = continues.round
            if continues.fork:
                attributes["agentkit.fork.parent"] = continues.run_id
            link = _link(continues)
            if link is not None:
                links.append(link)
        span = self.tracer.start_span(
            f"invoke_agent {event.agent}", kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )
        run_context = trace.set_span_in_context(span)
        token = otel_context.attach(run_context)
        self._runs[event.run_id] = _RunSpans(run=span, run_context=run_context, run_token=token, provider=provider)
        if continues is not None and self.metrics is not None:
            for decision in continues.decisions:
                self.metrics.decision(decision)

    def on_round_start(self, event: events.RoundStarted) -> None:
        """Close the previous round's span and open this round's (current until the next)."""
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
        spans.round_token = otel_context.attach(spans.round_context)

    def traceparent(self, run_id: str) -> str | None:
        """The W3C `traceparent` of the run's current round (its run span's before the first), for its state."""
        spans = self._runs.get(run_id)
        if spans is None:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=spans.round_context or spans.run_context)
        return carrier.get("traceparent")

    @contextlib.contextmanager
    def around(self, call: ModelCall | ToolInvocation) -> Iterator[None]:
        """Open the call's span and make it current while the call runs."""
        spans = self._runs.get(call.run_id)
        if isinstance(call, ModelCall):
            chat = self._start_chat(spans, call)
            try:
                listens = listening(chat.sent.append) if self.capture_content else contextlib.nullcontext()
                with trace.use_span(chat.span, record_exception=False, set_status_on_exception=False), listens:
                    yield
            except BaseException as error:
                self._end_chat(chat, call, error)
                raise
            else:
                self._end_chat(chat, call, None)
            finally:
                if spans is not None and spans.chat is chat:
                    spans.chat = None
                chat.span.end()
            return
        span = self._start_tool(spans, call)
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                yield
        except ToolRetry as retry:
            self._retried(span, retry)
            raise
        except BaseException as error:
            self._fail(span, error)
            raise
        else:
            self._end_tool(span, call)
        finally:
            span.end()

    def on_llm_call(self, event: events.LLMCallFinished) -> None:
        """Add the attempt to its model call's span, as an `agentkit.attempt` event."""
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        spans.round_usage += event.usage
        chat = spans.chat
        if chat is None:
            return
        chat.attempts += 1
        chat.model = event.model
        attributes: dict[str, str | int | float] = {
            "agentkit.attempt": event.attempt,
            GEN_AI_REQUEST_MODEL: event.model,
            GEN_AI_USAGE_INPUT_TOKENS: event.usage.input_tokens,
            GEN_AI_USAGE_OUTPUT_TOKENS: event.usage.output_tokens,
            **usage_details(event.usage),
            "agentkit.duration": event.seconds,
        }
        if event.error is not None:
            attributes[_ERROR_TYPE] = error_type(event.error)
            if self.capture_content:
                attributes["exception.message"] = str(event.error)
        chat.span.add_event("agentkit.attempt", attributes=attributes)

    def on_proposal(self, event: events.ProposalCaptured) -> None:
        """Mark the round: its call became a proposal (no tool span: nothing ran); count it."""
        proposal = event.proposal
        if self.metrics is not None:
            self.metrics.proposal(proposal)
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is None:
            return
        attributes = _proposal_attributes(proposal, capture_content=self.capture_content)
        span.set_attributes(attributes)
        span.add_event("agentkit.proposal", attributes=attributes)

    def on_degeneration(self, event: events.DegenerationDetected) -> None:
        """Mark the round: the executor repeated a call."""
        spans = self._runs.get(event.run_id)
        span = spans.round if spans is not None else None
        if span is not None:
            span.add_event("agentkit.degeneration", attributes={"agentkit.degeneration.tool_name": event.tool_name})

    def on_run_end(self, event: events.RunFinished) -> None:
        """Close the run's spans with its outcome, stop reason and usage."""
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        result = event.result
        failed = result.outcome is Outcome.ERROR
        if failed and spans.round is not None:
            self._mark(spans.round, result.error)
        self._end_round(spans)
        span = spans.run
        span.set_attributes(
            {
                "agentkit.outcome": result.outcome.value,
                "agentkit.stop_reason": result.stop_reason.value,
                "agentkit.rounds": result.rounds,
                **usage_attributes(result.usage),
            }
        )
        if isinstance(result, ToolLoopResult):
            span.set_attribute("agentkit.items", len(result.items))
            if result.provenance is not None:
                span.set_attribute("agentkit.untrusted_reads", len(result.provenance.untrusted))
                span.set_attribute("agentkit.answer_after_untrusted", result.provenance.answer_after_untrusted)
        if isinstance(result, TieredLoopResult) and result.proposed:
            span.set_attribute("agentkit.proposals", len(result.proposed))
            if self.capture_content:
                span.set_attribute("agentkit.proposal.digests", [proposal.digest for proposal in result.proposed])
        if failed:
            self._mark(span, result.error)
        self._end_run(spans)

    def on_run_abort(self, event: events.RunAborted) -> None:
        """Close the run's spans as errors (the exception itself is on the span it escaped, if any)."""
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        if spans.round is not None:
            self._mark(spans.round, event.error)
        self._end_round(spans)
        spans.run.set_attribute("agentkit.aborted", True)
        self._mark(spans.run, event.error)
        self._end_run(spans)

    def _start_chat(self, spans: _RunSpans | None, call: ModelCall) -> _Chat:
        request, caller = call.request, call.caller
        provider = described(caller, "provider_name", str) or (spans.provider if spans else self.provider_name)
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_REQUEST_MODEL: request.model,
            _OUTPUT_TYPE: described(caller, "output_type", str) or "json",
            "agentkit.role": call.role,
            "agentkit.round": call.round,
        }
        optional = {
            GEN_AI_CONVERSATION_ID: call.run_id or None,
            _TEMPERATURE: request.temperature,
            _MAX_TOKENS: request.max_tokens,
            _SEED: request.seed,
            "agentkit.fallback_model": request.fallback_model,
        }
        attributes |= {key: value for key, value in optional.items() if value is not None}
        attributes |= server(caller)
        if self.capture_content:
            if request.system:
                attributes[_SYSTEM_INSTRUCTIONS] = json_text([text_part(request.system)])
            attributes[_INPUT_MESSAGES] = json_text([text_message("user", request.dynamic)])
        parent = spans.round_context or spans.run_context if spans is not None else None
        span = self.tracer.start_span(
            f"chat {request.model}", context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        chat = _Chat(span=span, provider=provider, started=time.perf_counter(), model=request.model)
        if spans is not None:
            spans.chat = chat
        else:
            chat.attempts = 1  # outside a run (a Temporal model activity) the call is one attempt
        return chat

    def _end_chat(self, chat: _Chat, call: ModelCall, error: BaseException | None) -> None:
        span, request = chat.span, call.request
        if chat.model != request.model:
            # The fallback model answered (or failed last): the call is named and attributed as its call.
            span.update_name(f"chat {chat.model}")
            span.set_attribute(GEN_AI_REQUEST_MODEL, chat.model)
        span.set_attribute("agentkit.attempts", chat.attempts)
        completion = call.result if error is None else None
        usage = getattr(error, "usage", None) if error is not None else getattr(completion, "usage", None)
        usage = usage if isinstance(usage, Usage) else None
        _set_usage(span, usage)
        if isinstance(completion, Completion):
            span.set_attribute(_RESPONSE_MODEL, completion.model)
            if completion.response_id:
                span.set_attribute(_RESPONSE_ID, completion.response_id)
            if completion.finish_reasons:
                span.set_attribute(_FINISH_REASONS, list(completion.finish_reasons))
            if self.capture_content:
                self._transcript(chat, call, completion)
        elif self.capture_content and chat.sent:
            self._transcript(chat, call, None)
        if error is not None:
            self._fail(span, error)
        if self.metrics is not None:
            self.metrics.chat(time.perf_counter() - chat.started, self._metric_attributes(chat, call, error), usage)

    def _transcript(self, chat: _Chat, call: ModelCall, completion: Completion[Any] | None) -> None:
        """The content of the call as sent: every request the caller reported, else the request as first asked."""
        span = chat.span
        for request in chat.sent:
            details = {_INPUT_MESSAGES: json_text([wire_message(message) for message in request.messages])}
            if request.reply is not None:
                details[_OUTPUT_MESSAGES] = json_text([text_message("assistant", request.reply)])
            span.add_event(_DETAILS, attributes=details)
        if chat.sent:
            last = chat.sent[-1]
            system = [text_of(m) for m in last.messages if m.get("role") == "system"]
            if system:
                span.set_attribute(_SYSTEM_INSTRUCTIONS, json_text([text_part(text) for text in system]))
            messages = [wire_message(m) for m in last.messages if m.get("role") != "system"]
            span.set_attribute(_INPUT_MESSAGES, json_text(messages))
        if completion is not None:
            value = completion.value
            text = getattr(value, "text", None) if described(call.caller, "output_type", str) == "text" else None
            content = text if isinstance(text, str) else value.model_dump_json()
            finish = completion.finish_reasons[0] if completion.finish_reasons else "stop"
            span.set_attribute(
                _OUTPUT_MESSAGES, json_text([text_message("assistant", content) | {"finish_reason": finish}])
            )

    def _metric_attributes(self, chat: _Chat, call: ModelCall, error: BaseException | None) -> dict[str, str | int]:
        attributes: dict[str, str | int] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_PROVIDER_NAME: chat.provider,
            GEN_AI_REQUEST_MODEL: chat.model,
            **server(call.caller),
        }
        completion = call.result
        if isinstance(completion, Completion) and error is None:
            attributes[_RESPONSE_MODEL] = completion.model
        if error is not None:
            attributes[_ERROR_TYPE] = error_type(error)
        return attributes

    def _start_tool(self, spans: _RunSpans | None, call: ToolInvocation) -> Span:
        tool = call.tool
        tier = declared_tier(tool)
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "execute_tool",
            GEN_AI_TOOL_NAME: tool.name,
            _TOOL_TYPE: "function",
            _TOOL_CALL_ID: call.call_id,
            "agentkit.tier": tier.name if tier is not None else "none",
            "agentkit.round": call.round,
        }
        if call.run_id:
            attributes[GEN_AI_CONVERSATION_ID] = call.run_id
        description = getattr(tool, "description", None)
        if isinstance(description, str) and description:
            attributes[_TOOL_DESCRIPTION] = description
        approval = call.approval
        if approval is not None:
            attributes["agentkit.approved"] = True
            attributes["agentkit.approval.approved_by"] = approval.approved_by
            if approval.proposal_id:
                attributes["agentkit.proposal.id"] = approval.proposal_id
            if self.capture_content:
                attributes["agentkit.proposal.digest"] = approval.digest
        if self.capture_content:
            attributes[_TOOL_ARGUMENTS] = call.args.model_dump_json()
        parent = spans.round_context or spans.run_context if spans is not None else None
        return self.tracer.start_span(
            f"execute_tool {tool.name}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
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

    def _retried(self, span: Span, retry: ToolRetry) -> None:
        """A `ToolRetry`: the tool told the executor its call was wrong. The span is not an error."""
        attributes = {"exception.message": str(retry)} if self.capture_content else {}
        span.add_event("agentkit.tool_retry", attributes=attributes)

    def _fail(self, span: Span, error: BaseException) -> None:
        """The failing span: status, `error.type` and the one exception event (its message only with capture)."""
        if self.capture_content:
            span.record_exception(error)
        else:
            span.add_event("exception", attributes={"exception.type": error_type(error)})
        self._mark(span, error)

    def _mark(self, span: Span, error: BaseException | None) -> None:
        """ERROR status and `error.type`, no exception event (it is on the span that failed)."""
        span.set_attribute(_ERROR_TYPE, error_type(error) if error is not None else _OTHER)
        description = f"{type(error).__name__}: {error}" if error is not None and self.capture_content else None
        span.set_status(Status(StatusCode.ERROR, description))

    def _end_round(self, spans: _RunSpans) -> None:
        if spans.round is None:
            return
        _detach(spans.round_token)
        spans.round.set_attributes(usage_attributes(spans.round_usage))
        spans.round.end()
        spans.round, spans.round_context, spans.round_token, spans.round_usage = None, None, None, Usage()

    def _end_run(self, spans: _RunSpans) -> None:
        _detach(spans.run_token)
        spans.run.end()


def _proposal_attributes(proposal: ProposedAction[Any], *, capture_content: bool) -> dict[str, Any]:
    """What a proposal's round span says of it: the tool and tier; whether untrusted content preceded the call
    and which argument fields first appeared in it (field names, not values: values are content); with
    `capture_content`, the arguments, the digest and the untrusted sources."""
    attributes: dict[str, Any] = {
        "agentkit.proposal.tool_name": proposal.tool_name,
        "agentkit.proposal.tier": proposal.tier.name,
    }
    provenance = proposal.evidence.provenance if proposal.evidence is not None else None
    if provenance is not None:
        attributes["agentkit.proposal.after_untrusted"] = provenance.tainted
        attributes["agentkit.proposal.held_by_provenance"] = provenance.held
        attributes["agentkit.proposal.from_untrusted"] = [mark.path for mark in provenance.from_untrusted]
        steered = [mark.path for mark in provenance.from_untrusted if mark.steered]
        if steered:
            attributes["agentkit.proposal.steered"] = steered
    if capture_content:
        attributes["agentkit.proposal.arguments"] = proposal.args.model_dump_json()
        attributes["agentkit.proposal.digest"] = proposal.digest
        if provenance is not None:
            attributes["agentkit.proposal.untrusted_sources"] = [
                f"round {o.round} {o.tool_name}" for o in provenance.untrusted
            ]
    return attributes


def _detach(token: object) -> None:
    """Make current again what was before a span was (the run's own task, on its way out)."""
    if token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]  # the Token attach returned


def _link(continues: events.Continued) -> Link | None:
    """The link from a leg to the round it continues, when that round's span context was recorded."""
    if not continues.trace:
        return None
    parent = trace.get_current_span(_PROPAGATOR.extract({"traceparent": continues.trace})).get_span_context()
    if not parent.is_valid:
        return None
    kind = "fork" if continues.fork else "resume"
    attributes: dict[str, str | int] = {
        "agentkit.link": kind,
        "agentkit.run_id": continues.run_id,
        "agentkit.round": continues.round,
    }
    return Link(parent, attributes=attributes)


def _set_usage(span: Span, usage: Usage | None) -> None:
    if usage is not None:
        span.set_attributes(
            {
                GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
                GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
                **usage_details(usage),
            }
        )
