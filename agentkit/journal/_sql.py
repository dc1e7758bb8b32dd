"""The journal's statements and row conversions, shared by every SQL backend."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from agentkit.events import Event, RunAborted, RunFinished, RunStarted
from agentkit.journal._errors import DigestMismatch, JournalError
from agentkit.journal._events import entry_of_record, fold_events, loop_config_data
from agentkit.journal._records import ProposalRecord, ProposalState, RoundEntry, RunRecord, RunState, Transition
from agentkit.outcome import Outcome, StopReason
from agentkit.proposals import ProposedAction, canonical_json
from agentkit.results import Usage
from agentkit.tiers import Tier

__all__ = [
    "OPEN_STATES",
    "Connection",
    "abort_run",
    "append_event",
    "claim_next_statement",
    "claim_statement",
    "finish_run",
    "folded",
    "insert_proposal",
    "insert_run",
    "lock_proposal_statement",
    "log_transition",
    "now",
    "proposal_of",
    "round_of",
    "run_of",
    "transition_of",
]


class Connection(Protocol):
    """What the journal needs from one database connection (used by one thread at a time)."""

    dialect: str
    """``sqlite`` or ``postgresql``: which side of a ``PerDatabase`` migration step applies."""
    errors: tuple[type[Exception], ...]
    """The driver's exception classes; the journal turns them into ``JournalError``."""
    types: Mapping[str, str]
    """Column types for the schema's ``{ts}``, ``{serial}``, ``{bool}`` and ``{real}``."""
    serialised: bool
    """``True``: one connection, so the journal runs one transaction at a time on it (SQLite);
    ``False``: each transaction takes its own connection from a pool (PostgreSQL)."""

    def begin(self, *, write: bool) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]: ...
    def execute(self, sql: str, params: Sequence[object] = ()) -> int: ...
    def table_exists(self, name: str) -> bool: ...
    def lock_schema(self) -> None: ...
    def to_db_time(self, at: datetime) -> object: ...
    def from_db_time(self, value: object) -> datetime: ...
    def close(self) -> None: ...


def now() -> datetime:
    """The current time, UTC (every timestamp in the journal)."""
    return datetime.now(UTC)


_CLAIM_SET = "state = 'executing', claimed_by = ?, claimed_at = ?, claim = ?, lease_until = ?"


def lock_proposal_statement(dialect: str) -> str:
    """Read one proposal by id for a claim, locking its row on PostgreSQL (SQLite's ``BEGIN IMMEDIATE`` already has).

    The only predicate is the primary key, so the plan is the primary key's index whatever the
    statistics say about states: a state predicate here let a custom plan drive the claim from the
    state index and filter thousands of rows.
    """
    lock = " FOR UPDATE" if dialect == "postgresql" else ""
    return f"SELECT * FROM agentkit_proposals WHERE id = ?{lock}"


def claim_statement() -> str:
    """Claim the proposal read by ``lock_proposal_statement`` (params: worker, time, token, lease, id)."""
    return f"UPDATE agentkit_proposals SET {_CLAIM_SET} WHERE id = ?"


def claim_next_statement(dialect: str, *, tools: int, skip: int) -> str:
    """Claim the oldest approved proposal for one of ``tools`` tool names, skipping ``skip`` ids; one statement.

    Params: worker, time, token, lease, the tool names, then the ids to skip. It returns the claimed
    row, or none when nothing is approved for these tools. On PostgreSQL, ``FOR UPDATE SKIP LOCKED``
    makes concurrent workers take different rows instead of queueing on the same one, and the
    update finds its row by primary key (the subquery's result), never by a scan. On SQLite the
    write lock (``BEGIN IMMEDIATE``) makes the claim single-writer, so the oldest row is free.
    """
    if tools < 1:
        raise ValueError("claim_next_statement needs at least one tool name")
    names = ", ".join("?" * tools)
    others = f" AND id NOT IN ({', '.join('?' * skip)})" if skip else ""
    lock = " FOR UPDATE SKIP LOCKED" if dialect == "postgresql" else ""
    pick = (
        f"SELECT id FROM agentkit_proposals WHERE state = 'approved' AND tool_name IN ({names}){others} "
        f"ORDER BY proposed_at, id LIMIT 1{lock}"
    )
    return f"UPDATE agentkit_proposals SET {_CLAIM_SET} WHERE id = ({pick}) RETURNING *"


def insert_run(db: Connection, event: RunStarted, at: datetime) -> None:
    """Record a run's start."""
    config = json.dumps({"tools": list(event.tools), "max_rounds": event.max_rounds})
    loop = None if event.config is None else json.dumps(loop_config_data(event.config))
    db.execute(
        "INSERT INTO agentkit_runs (id, agent, model, config, loop_config, started_at) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING",
        (event.run_id, event.agent, event.model, config, loop, db.to_db_time(at)),
    )


def append_event(db: Connection, event: Event, round: int | None, data: Mapping[str, Any], at: datetime) -> None:
    """Append one event to the run's log (never updated, never deleted)."""
    db.execute(
        "INSERT INTO agentkit_events (run_id, kind, round, at, data) VALUES (?, ?, ?, ?, ?)",
        (event.run_id, event.kind, round, db.to_db_time(at), json.dumps(data)),
    )


def finish_run(db: Connection, event: RunFinished, at: datetime) -> None:
    """Record a run's ending and the rounds of its trace; the first ending recorded wins."""
    result = event.result
    usage = result.usage
    db.execute(
        "INSERT INTO agentkit_runs (id, ended_at, outcome, stop_reason, error, rounds, requests, input_tokens, "
        "output_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "ended_at = excluded.ended_at, outcome = excluded.outcome, stop_reason = excluded.stop_reason, "
        "error = excluded.error, rounds = excluded.rounds, requests = excluded.requests, "
        "input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens "
        "WHERE agentkit_runs.ended_at IS NULL",
        (
            event.run_id,
            db.to_db_time(at),
            result.outcome.value,
            result.stop_reason.value,
            None if result.error is None else str(result.error),
            result.rounds,
            usage.requests,
            usage.input_tokens,
            usage.output_tokens,
        ),
    )
    last = len(result.trace) - 1
    for index, record in enumerate(result.trace):
        repeated = index == last and result.stop_reason is StopReason.DEGENERATION
        e = entry_of_record(event.run_id, record, repeated=repeated)
        db.execute(
            "INSERT INTO agentkit_rounds (run_id, round, done, rationale, tool_name, tier, args, executed, "
            "proposed, repeated, batch_size, observation, error, llm_seconds, tool_seconds, requests, "
            "input_tokens, output_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, round) DO NOTHING",
            (
                e.run_id,
                e.round,
                e.done,
                e.rationale,
                e.tool_name,
                None if e.tier is None else int(e.tier),
                e.args_json,
                e.executed,
                e.proposed,
                e.repeated,
                e.batch_size,
                e.observation,
                e.error,
                e.llm_seconds,
                e.tool_seconds,
                e.usage.requests,
                e.usage.input_tokens,
                e.usage.output_tokens,
            ),
        )


OPEN_STATES = (ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING)
"""States in which the same call proposed again is the same inbox entry."""


def insert_proposal(db: Connection, action: ProposedAction[Any], actor: str, at: datetime) -> str:
    """Put ``action`` in the inbox as pending; returns its id.

    While an entry for the same call (run, round, digest) is still open (pending, approved or
    executing), that entry's id is returned and nothing is written: the observer and the caller
    recording one proposal must not make two approvable entries. Once it is final (rejected,
    executed, failed), proposing the call again is a new request and gets a new pending entry.
    """
    if not action.digest_matches():
        raise DigestMismatch(
            f"proposal for {action.tool_name!r} carries a digest that does not match its args; "
            "build it with ProposedAction.create so the digest covers exactly the call",
            id="",
        )
    key = (action.run_id, action.round, action.digest, *(s.value for s in OPEN_STATES))
    # The partial unique index on open entries makes a concurrent insert of the same call do nothing;
    # the loop covers the open entry becoming final between that insert and the lookup.
    for _ in range(3):
        new_id = uuid.uuid4().hex[:16]
        inserted = db.execute(
            "INSERT INTO agentkit_proposals (id, state, tool_name, tier, args, digest, rationale, round, run_id, "
            "proposed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (
                new_id,
                ProposalState.PENDING.value,
                action.tool_name,
                int(action.tier),
                canonical_json(action.args),
                action.digest,
                action.rationale,
                action.round,
                action.run_id,
                db.to_db_time(action.created_at),
            ),
        )
        if inserted == 1:
            log_transition(db, new_id, None, ProposalState.PENDING, actor, at, "")
            return new_id
        rows = db.query(
            "SELECT id FROM agentkit_proposals WHERE run_id = ? AND round = ? AND digest = ? AND state IN (?, ?, ?)",
            key,
        )
        if rows:
            return str(rows[0]["id"])
    raise JournalError(
        f"proposal for {action.tool_name!r} (run {action.run_id!r}, round {action.round}) kept changing while it "
        "was recorded; try again"
    )


def log_transition(
    db: Connection, id: str, before: ProposalState | None, after: ProposalState, actor: str, at: datetime, note: str
) -> None:
    db.execute(
        "INSERT INTO agentkit_transitions (proposal_id, from_state, to_state, actor, at, note) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (id, None if before is None else before.value, after.value, actor, db.to_db_time(at), note),
    )


def abort_run(db: Connection, event: RunAborted, at: datetime) -> None:
    """Record that a run was cancelled or raised: it ended, with no outcome."""
    db.execute(
        "INSERT INTO agentkit_runs (id, ended_at, error) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "ended_at = excluded.ended_at, error = excluded.error WHERE agentkit_runs.ended_at IS NULL",
        (event.run_id, db.to_db_time(at), f"aborted: {type(event.error).__name__}: {event.error}"),
    )


def proposal_of(db: Connection, row: Mapping[str, Any]) -> ProposalRecord:
    def ts(name: str) -> datetime | None:
        value = row[name]
        return None if value is None else db.from_db_time(value)

    return ProposalRecord(
        id=row["id"],
        state=ProposalState(row["state"]),
        tool_name=row["tool_name"],
        tier=Tier(row["tier"]),
        args_json=row["args"],
        digest=row["digest"],
        rationale=row["rationale"],
        round=row["round"],
        run_id=row["run_id"],
        proposed_at=db.from_db_time(row["proposed_at"]),
        approved_by=row["approved_by"],
        approved_at=ts("approved_at"),
        rejected_by=row["rejected_by"],
        rejected_at=ts("rejected_at"),
        reason=row["reason"],
        claimed_by=row["claimed_by"],
        claimed_at=ts("claimed_at"),
        lease_until=ts("lease_until"),
        finished_at=ts("finished_at"),
        batch_json=row["batch"],
        batch_size=row["batch_size"],
        error=row["error"],
        resolved_by=row["resolved_by"],
        resolved_at=ts("resolved_at"),
        note=row["note"],
    )


def transition_of(db: Connection, row: Mapping[str, Any]) -> Transition:
    return Transition(
        proposal_id=row["proposal_id"],
        from_state=None if row["from_state"] is None else ProposalState(row["from_state"]),
        to_state=ProposalState(row["to_state"]),
        actor=row["actor"],
        at=db.from_db_time(row["at"]),
        note=row["note"],
    )


def run_of(db: Connection, row: Mapping[str, Any]) -> RunRecord:
    """A run row as a record; the rounds and usage of a run without a result come from its events."""
    finished = row["outcome"] is not None
    state = RunState.FINISHED if finished else RunState.UNFINISHED if row["ended_at"] is None else RunState.ABORTED
    rounds = row["rounds"] or 0
    usage = Usage(
        requests=row["requests"] or 0, input_tokens=row["input_tokens"] or 0, output_tokens=row["output_tokens"] or 0
    )
    if not finished:
        entries = folded(db, row["id"])
        rounds = max((e.round for e in entries), default=0)
        usage = sum((e.usage for e in entries), Usage())
    return RunRecord(
        id=row["id"],
        state=state,
        agent=row["agent"],
        model=row["model"],
        config=json.loads(row["config"]),
        loop_config=None if row["loop_config"] is None else json.loads(row["loop_config"]),
        started_at=None if row["started_at"] is None else db.from_db_time(row["started_at"]),
        ended_at=None if row["ended_at"] is None else db.from_db_time(row["ended_at"]),
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
        stop_reason=None if row["stop_reason"] is None else StopReason(row["stop_reason"]),
        error=row["error"],
        rounds=rounds,
        usage=usage,
    )


def folded(db: Connection, run_id: str) -> list[RoundEntry]:
    """The run's rounds rebuilt from its event log."""
    rows = db.query("SELECT kind, round, data FROM agentkit_events WHERE run_id = ? ORDER BY id", (run_id,))
    return fold_events(run_id, ((r["kind"], r["round"], json.loads(r["data"])) for r in rows))


def round_of(row: Mapping[str, Any]) -> RoundEntry:
    return RoundEntry(
        run_id=row["run_id"],
        round=row["round"],
        done=bool(row["done"]),
        rationale=row["rationale"],
        tool_name=row["tool_name"],
        tier=None if row["tier"] is None else Tier(row["tier"]),
        args_json=row["args"],
        executed=bool(row["executed"]),
        proposed=bool(row["proposed"]),
        repeated=bool(row["repeated"]),
        batch_size=row["batch_size"],
        observation=row["observation"],
        error=row["error"],
        llm_seconds=float(row["llm_seconds"]),
        tool_seconds=float(row["tool_seconds"]),
        usage=Usage(requests=row["requests"], input_tokens=row["input_tokens"], output_tokens=row["output_tokens"]),
    )
