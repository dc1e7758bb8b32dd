"""The journal's exceptions; they live in `agentkit.errors` with every other agentkit error.

The subtree:

```text
JournalError                 any journal failure; the message names the cause and the fix
├── JournalUnavailable       no journal at that path, cannot connect, or a schema this code cannot read
├── UnknownId                no proposal (or run) with that id
├── TransitionRefused        the proposal is not in a state that allows the change; nothing changed
├── DigestMismatch           the stored args no longer reproduce the approved digest; nothing ran
├── NothingRan               the journal failed before the claim held: the tool did not run
├── OutcomeNotRecorded       the tool ran, once; its outcome could not be recorded (never run it again)
└── RunClaimed               another live process holds the run (it runs, or resumes it); nothing ran
```
"""

from __future__ import annotations

from agentkit.errors import (
    DigestMismatch,
    JournalError,
    JournalUnavailable,
    NothingRan,
    OutcomeNotRecorded,
    RunClaimed,
    TransitionRefused,
    UnknownId,
)

__all__ = [
    "DigestMismatch",
    "JournalError",
    "JournalUnavailable",
    "NothingRan",
    "OutcomeNotRecorded",
    "RunClaimed",
    "TransitionRefused",
    "UnknownId",
]
