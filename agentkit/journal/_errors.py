"""The journal's exceptions, all under one ``JournalError`` (itself an ``AgentkitError``).

The tree::

    JournalError                 any journal failure; the message names the cause and the fix
    ├── JournalUnavailable       no journal at that path, cannot connect, or a schema this code cannot read
    ├── UnknownId                no proposal (or run) with that id
    ├── TransitionRefused        the proposal is not in a state that allows the change; nothing changed
    └── DigestMismatch           the stored args no longer reproduce the approved digest; nothing ran
"""

from __future__ import annotations

from agentkit.errors import AgentkitError

__all__ = ["DigestMismatch", "JournalError", "JournalUnavailable", "TransitionRefused", "UnknownId"]


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
