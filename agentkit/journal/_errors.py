"""The journal's exceptions, all under one ``JournalError`` (itself an ``AgentkitError``).

The tree::

    JournalError                 any journal failure; the message names the cause and the fix
    ├── JournalUnavailable       no journal at that path, cannot connect, or a schema this code cannot read
    ├── UnknownId                no proposal (or run) with that id
    ├── TransitionRefused        the proposal is not in a state that allows the change; nothing changed
    ├── DigestMismatch           the stored args no longer reproduce the approved digest; nothing ran
    ├── NothingRan               the journal failed before the claim held: the tool did not run
    └── OutcomeNotRecorded       the tool ran, once; its outcome could not be recorded (never run it again)
"""

from __future__ import annotations

from agentkit.errors import AgentkitError

__all__ = [
    "DigestMismatch",
    "JournalError",
    "JournalUnavailable",
    "NothingRan",
    "OutcomeNotRecorded",
    "TransitionRefused",
    "UnknownId",
]


class JournalError(AgentkitError):
    """A journal operation failed; when it was a change, nothing was written."""


class JournalUnavailable(JournalError):
    """The journal could not be opened: missing database, unreachable server, or unknown schema."""


class UnknownId(JournalError, LookupError):
    """No proposal or run has that id."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
        """The id that was looked up."""


class TransitionRefused(JournalError):
    """The proposal's current state does not allow the change asked for; the journal is unchanged."""

    def __init__(self, message: str, *, id: str, state: str) -> None:
        super().__init__(message)
        self.id = id
        """The proposal."""
        self.state = state
        """Its state when the change was refused."""


class DigestMismatch(JournalError):
    """The stored call does not reproduce the digest that was proposed and approved; it was not run."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
        """The proposal."""


class NothingRan(JournalError):
    """The journal failed (connection lost, server down) before a claim held: the tool was not called.

    The proposal is still ``approved`` and another attempt may run it. When the failure hit the
    claim's commit, the worker hands the claim back if it can; if it cannot reach the database, the
    claim's lease runs out and ``stuck()`` lists the proposal, whose tool never ran.
    """

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
        """The proposal, or ``""`` when the claim of the next approved proposal failed."""


class OutcomeNotRecorded(JournalError):
    """The tool ran, exactly once, but its outcome could not be written after every retry.

    The proposal stays ``executing``, claimed by this worker; once the heartbeat stops, its lease
    runs out and ``stuck()`` lists it. Never run it again: a human records what happened with
    ``resolve``, using ``outcome`` and ``error`` below.
    """

    def __init__(self, message: str, *, id: str, outcome: str, error: str | None) -> None:
        super().__init__(message)
        self.id = id
        """The proposal."""
        self.outcome = outcome
        """What the worker meant to record: ``executed`` or ``failed``."""
        self.error = error
        """The tool's error when it failed, else ``None``."""
