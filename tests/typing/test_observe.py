"""assert_type checks for observers, the event stream and the OpenTelemetry observer (mypy only)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator
from typing import Literal, assert_never, assert_type

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from pydantic import BaseModel

from agentkit import Observer, TieredLoopResult, ToolLoopResult, events
from agentkit._observe import LoggingObserver, ModelCall, ToolInvocation, event_fields, observed, settle
from agentkit._results import Usage
from agentkit.otel import OTelObserver
from agentkit.testing import ScriptedCaller
from tests.typing.models import Doc, Finder, SearchArgs, delete, search


class Tokens(Observer):
    def __init__(self) -> None:
        self.usage = Usage()

    def on_llm_call(self, event: events.LLMCallFinished) -> None:
        self.usage += event.usage


async def stream_plain() -> None:
    caller = ScriptedCaller()
    stream = events.iter_tool_loop(caller, Finder(), search, "ctx", observer=[Tokens(), LoggingObserver()])
    assert_type(stream, events.RunStream[ToolLoopResult[Doc]])
    async with stream as run:
        assert_type(run, events.RunStream[ToolLoopResult[Doc]])
        async for event in run:
            assert_type(event, events.Event)
            assert_type(
                event.kind,
                Literal[
                    "run_start",
                    "round_start",
                    "llm_call",
                    "rationale_delta",
                    "answer_delta",
                    "text_delta",
                    "partial_discarded",
                    "tool_call",
                    "tool_result",
                    "proposal",
                    "degeneration",
                    "run_end",
                    "run_abort",
                ],
            )
            describe(event)
    assert_type(run.result, ToolLoopResult[Doc])
    assert_type(run.result.items, list[Doc])
    assert_type(await run.wait(), ToolLoopResult[Doc])


async def stream_tiered() -> None:
    caller = ScriptedCaller()
    async with events.iter_tool_loop_tiered(caller, Finder(), search, "ctx") as run:
        async for _ in run:
            pass
    assert_type(run.result, TieredLoopResult[SearchArgs, Doc])
    async with events.iter_tool_loop_tiered(caller, Finder(), [search, delete], "ctx") as several:
        async for _ in several:
            pass
    assert_type(several.result, TieredLoopResult[BaseModel, Doc])


def describe(event: events.Event) -> str:
    match event:
        case events.RunStarted():
            return event.model
        case events.RoundStarted():
            return str(event.info.round)
        case events.LLMCallFinished():
            return str(event.usage.total_tokens)
        case events.ToolCallStarted():
            return event.tier.name
        case events.ToolResultReturned():
            return str(event.batch_size)
        case events.ProposalCaptured():
            return event.proposal.digest
        case events.DegenerationDetected():
            return event.tool_name
        case events.RunFinished():
            return event.result.outcome.value
        case events.RunAborted():
            return type(event.error).__name__
        case events.RationaleDelta() | events.AnswerDelta() | events.TextDelta() | events.PartialDiscarded():
            return describe_delta(event)
        case _:
            assert_never(event)


def describe_delta(
    event: events.RationaleDelta | events.AnswerDelta | events.TextDelta | events.PartialDiscarded,
) -> str:
    match event:
        case events.RationaleDelta() | events.TextDelta():
            return event.delta
        case events.AnswerDelta():
            return str(event.partial)
        case events.PartialDiscarded():
            return event.reason
        case _:
            assert_never(event)


def observers() -> None:
    otel = OTelObserver(TracerProvider().get_tracer("t"))
    assert_type(otel, OTelObserver)
    assert_type(OTelObserver(), OTelObserver)
    assert_type(OTelObserver(meter_provider=MeterProvider(), metrics=False), OTelObserver)
    assert_type(otel.traceparent("run"), str | None)


def approvals_and_legs(call: ToolInvocation, started: events.RunStarted) -> None:
    assert_type(call.approval, events.ApprovedCall | None)
    assert_type(call.call_id, str)
    if call.approval is not None:
        assert_type(call.approval.approved_by, str)
        assert_type(call.approval.proposal_id, str | None)
    continues = started.continues
    assert_type(continues, events.Continued | None)
    if continues is not None:
        assert_type(continues.trace, str | None)
        assert_type(continues.decisions, tuple[events.Decided, ...])
        assert_type(continues.decisions[0].approved, bool)
    logs = LoggingObserver(logging.getLogger("app"), level=logging.DEBUG, include_args=False)
    assert_type(logs, LoggingObserver)
    assert_type(event_fields(events.RunAborted(run_id="r", error=ValueError())), dict[str, object])


class Timing(Observer):
    """An observer that wraps each call: its context manager type narrows ``around``'s."""

    @contextlib.contextmanager
    def around(self, call: ModelCall | ToolInvocation) -> Generator[None, None, None]:
        assert_type(call.run_id, str)
        assert_type(call.result, object)
        yield


async def seams(call: ToolInvocation, batch: list[Doc]) -> None:
    otel = OTelObserver(capture_content=True, provider_name="vllm")
    assert_type(otel.capture_content, bool)
    assert_type(Observer().around(call), contextlib.AbstractContextManager[object])

    async def work() -> list[Doc]:
        return batch

    assert_type(await observed((otel, Timing()), call, work()), list[Doc])
    assert_type(call.tool.name, str)
    assert_type(call.args, BaseModel)


async def observers_settle(observer: Observer, observers: tuple[Observer, ...], run_id: str) -> None:
    assert_type(await observer.settle(run_id), None)
    assert_type(await settle(observers, run_id), None)
