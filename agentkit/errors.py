"""Every exception agentkit raises or attaches to a result.

The tree::

    AgentkitError
    ├── UsageError              wiring mistake; raised before any model call, with the fix
    ├── TierParseError          a tier read from text was not recognised (fails closed)
    ├── Throttled               HTTP 429: never retried, never failed over
    ├── ProviderError           the model server failed; ``transient`` ones are retried
    ├── StructuredOutputError   the reply never validated against the requested schema
    ├── ToolError               a tool failed; carries the tool's name
    │   ├── MissingTierError    a tool declares no reversibility tier; it is never called
    │   └── ToolTimeout         a tool ran past ``LoopConfig.tool_timeout``
    ├── ToolRetry               raised *by* a tool: the call was wrong, tell the model and go on
    └── VerifierError           a pair's verifier failed; the unverified draft is discarded

Expected endings of a run come back as results carrying one of these in ``error``; only
``UsageError`` (and cancellation) is raised out of the loops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit.results import Usage

__all__ = [
    "AgentkitError",
    "MissingTierError",
    "ProviderError",
    "StructuredOutputError",
    "Throttled",
    "TierParseError",
    "ToolError",
    "ToolRetry",
    "ToolTimeout",
    "UsageError",
    "VerifierError",
]


class AgentkitError(Exception):
    """Root of every agentkit exception."""

    usage: Usage | None = None
    """Model usage spent before a model-call error was raised, when a caller reported it."""


class UsageError(AgentkitError, ValueError):
    """The library was wired wrongly; the message names the fix."""


class TierParseError(AgentkitError, ValueError):
    """A tier read from text was not one of the four; the caller got ``Tier.IRREVERSIBLE``."""


class Throttled(AgentkitError):
    """The provider answered HTTP 429.

    It is never retried and never failed over to the fallback model: it surfaces at once so that
    a queue consumer can release the work and let the queue be the backoff.
    """

    def __init__(self, message: str = "throttled", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the server asked to wait (its ``Retry-After`` header), when it sent one."""


class ProviderError(AgentkitError):
    """The model server failed.

    Only ``transient=True`` errors (5xx, timeouts, dropped connections) are retried and failed
    over; anything else (400, 401, 403, 404) ends the call at once.
    """

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        """Whether retrying the same request may succeed."""
        self.status = status
        """The HTTP status, when there was a response."""


class StructuredOutputError(AgentkitError):
    """The model's reply did not validate against the requested schema, re-asks included."""

    def __init__(self, message: str, *, schema_name: str = "", raw: str | None = None) -> None:
        super().__init__(message)
        self.schema_name = schema_name
        """The name of the schema the reply had to match."""
        self.raw = raw
        """The last raw reply, when there was one."""


class ToolError(AgentkitError):
    """A tool failed while the loop ran it; the run ended with ``Outcome.ERROR``."""

    def __init__(self, message: str, *, tool_name: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        """The name of the tool that failed."""


class MissingTierError(ToolError):
    """A tool declares no reversibility tier, so it is never called."""


class ToolTimeout(ToolError):
    """A tool call ran past the per-tool timeout."""


class ToolRetry(AgentkitError):
    """Raised by a tool when the call itself was wrong (unknown id, empty query).

    The message becomes that call's observation in the next round and the loop goes on; the
    round still counts toward the ceiling. Any other exception from a tool ends the run.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        """What the model is told about its call."""


class VerifierError(AgentkitError):
    """A pair's verifier raised; the draft it was reviewing is discarded, never returned as approved."""
