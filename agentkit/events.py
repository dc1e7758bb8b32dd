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
"""

from agentkit._events import *  # every event: exactly `agentkit._events.__all__`, listed again below
from agentkit._loops import iter_tool_loop, iter_tool_loop_tiered
from agentkit._observe import ApprovedCall, LoggingObserver, ModelCall, ToolInvocation
from agentkit._results import RunEnding
from agentkit._stream import RunStream

__all__ = [
    "AnswerDelta",
    "ApprovedCall",
    "Continued",
    "Decided",
    "DegenerationDetected",
    "Event",
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
]
