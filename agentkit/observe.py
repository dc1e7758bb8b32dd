"""``Observer``: hooks called as a run happens. An observer can never change a run's outcome."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agentkit.events import (
    DegenerationDetected,
    Event,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunFinished,
    RunStarted,
    ToolCallStarted,
    ToolResultReturned,
)

__all__ = ["Observer", "ObserverArg", "dispatch", "observers_of"]

logger = logging.getLogger("agentkit.observe")


class Observer:
    """Base class with a no-op hook per moment of a run; override the ones you need.

    Hooks are synchronous and should be quick. An exception raised by a hook is logged through
    ``logging`` (logger ``agentkit.observe``) and swallowed: it never changes the run.
    """

    def on_run_start(self, event: RunStarted) -> None:
        """A run began."""

    def on_round_start(self, event: RoundStarted) -> None:
        """A round began."""

    def on_llm_call(self, event: LLMCallFinished) -> None:
        """One model attempt finished."""

    def on_tool_call(self, event: ToolCallStarted) -> None:
        """A tool is about to run."""

    def on_tool_result(self, event: ToolResultReturned) -> None:
        """A tool call finished."""

    def on_proposal(self, event: ProposalCaptured) -> None:
        """A call became a proposal."""

    def on_degeneration(self, event: DegenerationDetected) -> None:
        """The executor repeated itself."""

    def on_run_end(self, event: RunFinished) -> None:
        """A run ended."""


ObserverArg = Observer | Sequence[Observer] | None
"""What ``observer=`` takes: one observer, several, or none."""


def observers_of(observer: ObserverArg) -> tuple[Observer, ...]:
    """Normalise ``observer=`` to a tuple."""
    if observer is None:
        return ()
    if isinstance(observer, Observer):
        return (observer,)
    return tuple(observer)


def dispatch(observers: tuple[Observer, ...], event: Event) -> None:
    """Deliver ``event`` to each observer's hook for it, isolating failures."""
    for observer in observers:
        try:
            match event:
                case RunStarted():
                    observer.on_run_start(event)
                case RoundStarted():
                    observer.on_round_start(event)
                case LLMCallFinished():
                    observer.on_llm_call(event)
                case ToolCallStarted():
                    observer.on_tool_call(event)
                case ToolResultReturned():
                    observer.on_tool_result(event)
                case ProposalCaptured():
                    observer.on_proposal(event)
                case DegenerationDetected():
                    observer.on_degeneration(event)
                case RunFinished():
                    observer.on_run_end(event)
        except Exception:
            logger.exception("observer %s failed in its %s hook; the run goes on", type(observer).__name__, event.kind)
