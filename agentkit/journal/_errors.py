"""The journal's exceptions; they live in ``agentkit.errors`` with every other agentkit error.

The subtree::

    JournalError                 any journal failure; the message names the cause and the fix
    ├── JournalUnavailable       no journal at that path, cannot connect, or a schema this code cannot read
    ├── UnknownId                no proposal (or run) with that id
    ├── TransitionRefused        the proposal is not in a state that allows the change; nothing changed
    └── DigestMismatch           the stored args no longer reproduce the approved digest; nothing ran
"""

from __future__ import annotations

from agentkit.errors import DigestMismatch, JournalError, JournalUnavailable, TransitionRefused, UnknownId

__all__ = ["DigestMismatch", "JournalError", "JournalUnavailable", "TransitionRefused", "UnknownId"]
