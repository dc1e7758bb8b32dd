"""What a run reports as it goes: the events, the observers' call descriptors, and runs as streams of events.

The events (`RunStarted` to `RunFinished`) are frozen values, matched by class or by `kind`;
`Event` is their union. `RunFinished.result` is a `RunEnding`: what every run's result shares
(outcome, stop reason, error, usage, rounds, run id), so a handler written against it serves every
run shape. An `Observer` (`agentkit.Observer`) gets them through its hooks;
`iter_tool_loop` and `iter_tool_loop_tiered` (and `ToolLoop.stream`) give a run as a
`RunStream` to iterate; `LoggingObserver` writes them to a logger. `ModelCall` and
`ToolInvocation` describe the call an `Observer.around` context wraps (`ApprovedCall`: the approval
an invocation runs under); `RunStarted.continues` (a `Continued`, with its `Decided` decisions) what
a resumed leg goes on from.

Every event has one JSON form, for a UI or a log to take as it is: `event.to_json()` writes it (an
object with every field: `seq`, `kind`, `run_id`, `round` and its own; tool args as their JSON, an error
as its class name and message), `parse_event` reads it back, and `EVENT_SCHEMA` is the JSON Schema of the
union of them all, discriminated by `kind`. Args read back are an `EventArgs`; errors a `ReportedError`.
"""

from typing import TYPE_CHECKING

from pydantic import JsonValue

from agentkit._events import *  # every event: exactly `agentkit._events.__all__`, listed again below
from agentkit._jsonform import EventArgs
from agentkit._loops import iter_tool_loop, iter_tool_loop_tiered
from agentkit._observe import ApprovedCall, LoggingObserver, ModelCall, ToolInvocation
from agentkit._results import RunEnding
from agentkit._stream import RunStream

if TYPE_CHECKING:
    EVENT_SCHEMA: dict[str, JsonValue]
    """The JSON Schema (draft 2020-12) of every event's JSON form (`event.to_json()`): a `oneOf` over the
    event classes, discriminated by `kind`."""


def parse_event(text: str | bytes) -> Event:
    """An event from its JSON form (`event.to_json()`), as the class that wrote it.

    Tool args come back as `EventArgs` (their fields as the JSON had them) and errors as `ReportedError`
    (class name and message); every other field is the value written, so
    `parse_event(e.to_json()).to_json() == e.to_json()` for every event `e`.

    Raises:
        UsageError: the text is not an event's JSON form; the message names the first problem.
    """
    from agentkit._event_json import parse_event as parse  # the adapter over every event: made on first use

    return parse(text)


def __getattr__(name: str) -> object:
    if name == "EVENT_SCHEMA":  # made on first use: it builds the adapter over every event class
        from agentkit._event_json import event_schema

        return event_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EVENT_SCHEMA",
    "AnswerDelta",
    "ApprovedCall",
    "Continued",
    "Decided",
    "DegenerationDetected",
    "Event",
    "EventArgs",
    "EventBase",
    "LLMCallFinished",
    "LoggingObserver",
    "ModelCall",
    "PartialDiscarded",
    "ProposalCaptured",
    "RoundStarted",
    "RunAborted",
    "RunEnding",
    "RunFinished",
    "RunStarted",
    "RunStream",
    "RationaleDelta",
    "TextDelta",
    "ToolCallStarted",
    "ToolInvocation",
    "ToolResultReturned",
    "iter_tool_loop",
    "iter_tool_loop_tiered",
    "parse_event",
]
