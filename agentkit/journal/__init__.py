"""The durable run journal and proposal inbox.

`JournalObserver` records runs as they happen, each round's checkpoint included; the journal's
inbox lets a human approve or reject each proposal and lets a worker execute an approved one
exactly once; `journal.resume` continues a run that waited on those decisions, or whose process
died, from its latest checkpoint, in exactly one process. Two backends share one
contract: `SQLiteJournal` (a file, no server; the default) and `PostgresJournal` (extra
`postgres`, for many workers on many machines). `open_journal` picks one from a path or URL.
"""

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
from agentkit.journal._contract import Journal, open_journal
from agentkit.journal._grants import GrantRecord, GrantState
from agentkit.journal._postgres import PostgresJournal
from agentkit.journal._records import (
    Execution,
    ProposalRecord,
    ProposalState,
    RoundEntry,
    RunRecord,
    RunState,
    RunStatus,
    Transition,
)
from agentkit.journal._sqlite import SQLiteJournal
from agentkit.journal._store import DEFAULT_LEASE, DEFAULT_STUCK_AFTER, OUTCOME_ATTEMPTS
from agentkit.journal._worker import Worked, WorkOutcome, WorkReport
from agentkit.journal.observer import JournalObserver

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_STUCK_AFTER",
    "DigestMismatch",
    "Execution",
    "GrantRecord",
    "GrantState",
    "Journal",
    "JournalError",
    "JournalObserver",
    "JournalUnavailable",
    "NothingRan",
    "OUTCOME_ATTEMPTS",
    "OutcomeNotRecorded",
    "PostgresJournal",
    "ProposalRecord",
    "ProposalState",
    "RoundEntry",
    "RunRecord",
    "RunClaimed",
    "RunState",
    "RunStatus",
    "SQLiteJournal",
    "Transition",
    "TransitionRefused",
    "UnknownId",
    "WorkOutcome",
    "WorkReport",
    "Worked",
    "open_journal",
]
