"""The journal's statements and row conversions, shared by every SQL backend."""

from __future__ import annotations

import functools
import getpass
import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import pydantic
import pydantic_core

from agentkit._cache import value_cache
from agentkit._config import LoopConfig
from agentkit._events import Event, RunAborted, RunFinished, RunStarted
from agentkit._lossless import from_stored, to_stored
from agentkit._outcome import Outcome, StopReason
from agentkit._proposals import Evidence, ProposedAction, canonical_json
from agentkit._results import ToolLoopResult, Usage
from agentkit._state import DecisionEntry, EndEntry, Entry, RoundOutcome, RunCheckpoint, args_schema_digest
from agentkit._state import RoundEntry as StateRound
from agentkit._tiers import Tier
from agentkit._usage import usage_of_counts
from agentkit.errors import DigestMismatch, JournalError, ResumeRefused
from agentkit.journal._amend import type_name
from agentkit.journal._events import fold_events, loop_config_data, said
from agentkit.journal._records import (
    Hold,
    ProposalRecord,
    ProposalState,
    RoundEntry,
    RunRecord,
    RunState,
    RunStatus,
    Transition,
)

__all__ = [
    "CLAIMED_STATES",
    "Busy",
    "OPEN_STATES",
    "Connection",
    "Lossless",
    "Stored",
    "abort_run",
    "append_events",
    "batch_text",
    "claim_left_statement",
    "claim_next_statement",
    "claim_statement",
    "claimed_upstream",
    "event_row",
    "final_state",
    "finish_run",
    "folded",
    "from_stored",
    "config_text",
    "insert_fork",
    "insert_proposal",
    "VERIFIED_APPROVER",
    "verification_required",
    "vouched",
    "insert_run",
    "leave_statement",
    "lineage_proposals",
    "lock_proposal_statement",
    "log_transition",
    "now",
    "proposal_of",
    "recorded_rounds",
    "release_run",
    "round_of",
    "rounds_of",
    "state_of",
    "store_state",
    "run_of",
    "to_stored",
    "transition_of",
]


class Busy(Exception):
    """A transaction asked to start at once could not: the connection is in use, or another connection holds
    the write lock. Nothing was done."""


class Connection(Protocol):
    """What the journal needs from one database connection (used by one thread at a time)."""

    dialect: str
    """`sqlite` or `postgresql`: which side of a `PerDatabase` migration step applies."""
    errors: tuple[type[Exception], ...]
    """The driver's exception classes; the journal turns them into `JournalError`."""
    types: Mapping[str, str]
    """Column types for the schema's `{ts}`, `{serial}`, `{bool}` and `{real}`."""
    serialised: bool
    """`True`: one connection, so the journal runs one transaction at a time on it (SQLite);
    `False`: each transaction takes its own connection from a pool (PostgreSQL)."""

    def begin(self, *, write: bool, synced: bool = True, at_once: bool = False) -> None:
        """Start a transaction; `synced=False`: a run's record, whose commit need not be synced to disk
        (it must still survive the process dying), where the backend makes that cheaper. `at_once`:
        raise `Busy` rather than wait for the write lock (a backend that cannot tell waits as usual)."""
        ...

    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]: ...
    def execute(self, sql: str, params: Sequence[object] = ()) -> int: ...
    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...
    def table_exists(self, name: str) -> bool: ...
    def lock_schema(self) -> None: ...
    def to_db_time(self, at: datetime) -> object: ...
    def from_db_time(self, value: object) -> datetime: ...
    def close(self) -> None: ...


class Lossless:
    """A `Connection` that stores every text parameter with `to_stored` and reads it back with `from_stored`.

    Every text field of the journal goes through here, on every backend, so none of them can lose a
    character or fail a write (and leave a proposal or a run half-recorded) because of what it holds.
    """

    def __init__(self, conn: Connection) -> None:
        self.inner = conn
        """The backend's connection."""
        self.dialect = conn.dialect
        self.errors = conn.errors
        self.types = conn.types
        self.serialised = conn.serialised

    def begin(self, *, write: bool, synced: bool = True, at_once: bool = False) -> None:
        self.inner.begin(write=write, synced=synced, at_once=at_once)

    def commit(self) -> None:
        self.inner.commit()

    def rollback(self) -> None:
        self.inner.rollback()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        rows = self.inner.query(sql, _stored(params))
        return [{name: from_stored(v) if isinstance(v, str) else v for name, v in row.items()} for row in rows]

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self.inner.execute(sql, _stored(params))

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self.inner.execute_many(sql, [_stored(params) for params in rows])

    def table_exists(self, name: str) -> bool:
        return self.inner.table_exists(name)

    def lock_schema(self) -> None:
        self.inner.lock_schema()

    def to_db_time(self, at: datetime) -> object:
        return self.inner.to_db_time(at)

    def from_db_time(self, value: object) -> datetime:
        return self.inner.from_db_time(value)

    def close(self) -> None:
        self.inner.close()


def _stored(params: Sequence[object]) -> Sequence[object]:
    every = "".join([p for p in params if isinstance(p, str)])
    if every.isascii() and "\x00" not in every:  # one look at all of a statement's text (a round's events: ~30 values)
        return params
    return [to_stored(p) if isinstance(p, str) else p for p in params]


_REPR_LIMIT = 2000
"""Longest description kept of a batch item JSON cannot hold."""


def batch_text(batch: Sequence[object]) -> tuple[str, str | None]:
    """An executed tool's batch as JSON text, and what could not be stored as it is (`None`: nothing).

    Every item JSON can hold is stored exactly, text with NUL or lone surrogates included. An item
    it cannot hold (bytes that are not UTF-8, an object whose serialisation raises) is stored
    described, as `{"unserialisable": <type>, "repr": <repr>}`: the tool ran, so its outcome is
    recorded whatever it returned.
    """
    items = list(batch)
    try:
        return pydantic_core.to_json(items, serialize_unknown=True).decode(), None
    except Exception:  # pydantic refuses some item; find which, and keep the rest exactly
        pass
    data: list[object] = []
    refused: list[str] = []
    for index, item in enumerate(items):
        try:
            data.append(pydantic_core.to_jsonable_python(item, serialize_unknown=True))
        except Exception as error:
            data.append({"unserialisable": type(item).__name__, "repr": _described(item)})
            refused.append(f"item {index} ({type(item).__name__}: {_first_line(error)})")
    text = _json(data)
    if not refused:
        return text, None
    return text, f"{len(refused)} of its {len(items)} items cannot be stored as JSON: {', '.join(refused)}"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""`json.dumps` with these options, made once (the writer thread encodes every event with it)."""


def _json(data: object) -> str:
    # Not ASCII-escaped: json.loads would join an escaped pair of surrogate halves into one character,
    # while raw text comes back as it was (``Lossless`` stores what UTF-8 cannot hold).
    return _ENCODER.encode(data)


def _described(item: object) -> str:
    try:
        text = repr(item)
    except Exception as error:  # a repr that raises still leaves the type to go by
        text = f"<{type(item).__name__} whose repr() raised {type(error).__name__}>"
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 1] + "…"


def _first_line(error: Exception) -> str:
    try:
        lines = str(error).strip().splitlines()
    except Exception:
        lines = []
    return lines[0] if lines else type(error).__name__


def now() -> datetime:
    """The current time, UTC (every timestamp in the journal)."""
    return datetime.now(UTC)


_CLAIM_SET = "state = 'executing', claimed_by = ?, claimed_at = ?, claim = ?, lease_until = ?, left_until = NULL"


def lock_proposal_statement(dialect: str) -> str:
    """Read one proposal by id for a claim, locking its row on PostgreSQL (SQLite's `BEGIN IMMEDIATE` already has).

    The only predicate is the primary key, so the plan is the primary key's index whatever the
    statistics say about states: a state predicate here let a custom plan drive the claim from the
    state index and filter thousands of rows.
    """
    lock = " FOR UPDATE" if dialect == "postgresql" else ""
    return f"SELECT * FROM agentkit_proposals WHERE id = ?{lock}"


def claim_statement() -> str:
    """Claim the proposal read by `lock_proposal_statement` (params: worker, time, token, lease, id)."""
    return f"UPDATE agentkit_proposals SET {_CLAIM_SET} WHERE id = ?"


def claim_next_statement(dialect: str, *, tools: int) -> str:
    """Claim the oldest approved proposal for one of `tools` tool names that no worker left; one statement.

    Params: worker, time, token, lease, then the tool names. It returns the claimed row, or none when
    nothing is approved for these tools. The pick reads the index of approved rows nobody left
    (`agentkit_proposals_claimable`), so rows left behind (`leave_statement`), however many, cost
    it nothing and its text and parameters never grow with them. On PostgreSQL, ``FOR UPDATE SKIP
    LOCKED`` makes concurrent workers take different rows instead of queueing on the same one, and
    the update finds its row by primary key (the subquery's result), never by a scan. On SQLite the
    write lock (`BEGIN IMMEDIATE`) makes the claim single-writer, so the oldest row is free.
    """
    return _claim_pick(dialect, tools, "agentkit_proposals_claimable", "left_until IS NULL", "proposed_at, id")


def claim_left_statement(dialect: str, *, tools: int) -> str:
    """`claim_next_statement` for the left rows whose `left_until` has come (params: the same, then the time
    now): tried again, in the order they fell due, when no other row is approved."""
    return _claim_pick(dialect, tools, "agentkit_proposals_left", "left_until <= ?", "left_until, id")


def _claim_pick(dialect: str, tools: int, index: str, which: str, order: str) -> str:
    if tools < 1:
        raise ValueError("a claim statement needs at least one tool name")
    names = ", ".join("?" * tools)
    # SQLite's planner, without statistics, prefers the state index and filters (and sorts) every approved row,
    # the left ones too; INDEXED BY holds it to the partial index whose order is the claim's.
    lock, table = (
        (" FOR UPDATE SKIP LOCKED", "agentkit_proposals")
        if dialect == "postgresql"
        else ("", f"agentkit_proposals INDEXED BY {index}")
    )
    pick = (
        f"SELECT id FROM {table} WHERE state = 'approved' AND tool_name IN ({names}) AND {which} "
        f"ORDER BY {order} LIMIT 1{lock}"
    )
    return f"UPDATE agentkit_proposals SET {_CLAIM_SET} WHERE id = ({pick}) RETURNING *"


def leave_statement() -> str:
    """Set an approved proposal aside as left (params: worker, first time, until, why, id): no claim takes it
    before `left_until`. `left_at` keeps the first time it was left; `state` is not written, so nothing
    announces an approval."""
    return (
        "UPDATE agentkit_proposals SET left_by = ?, left_at = COALESCE(left_at, ?), left_until = ?, left_note = ? "
        "WHERE id = ? AND state = 'approved'"
    )


def insert_run(
    db: Connection, event: RunStarted, at: datetime, hold: Hold | None = None, state: RunCheckpoint | None = None
) -> Stored | None:
    """Record a run's start; with `hold`, held by that recorder until its lease runs out.

    A run already recorded (a resumed run starts again under its id) keeps its row, and is held
    only if no other holder (its resumer) holds it. A run recorded for the first time with its
    `state` (written in the same transaction as its start) gets it with its row: the state's
    header and how far it goes on the row, its entries appended, without reading the row back.

    Returns:
        How far the stored state goes, when `state` was written here; `None` otherwise.
    """
    config = _json({"tools": list(event.tools), "max_rounds": event.max_rounds})
    loop = None if event.config is None else config_text(event.config)
    holder, token, until = (
        (None, None, None) if hold is None else (hold.holder, hold.token, db.to_db_time(at + hold.lease))
    )
    if state is not None and state.run_id != event.run_id:
        state = None  # another run's state: not taken with the row; it is written (or refused) as any state is
    mark = None if state is None else _advanced(state, _NOTHING_STORED)
    inserted = db.execute(
        "INSERT INTO agentkit_runs (id, agent, model, config, loop_config, started_at, claimed_by, claim, lease_until, "
        "head, state_entries, state_digest, checkpoint_round, resumable) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        (
            event.run_id,
            event.agent,
            event.model,
            config,
            loop,
            db.to_db_time(at),
            holder,
            token,
            until,
            *_progress(state, mark),
        ),
    )
    if inserted:
        if state is not None and mark is not None:
            _append_entries(db, event.run_id, state, 0)
        return mark
    # A fork, resumed for the first time, starts now.
    db.execute(
        "UPDATE agentkit_runs SET started_at = ? WHERE id = ? AND started_at IS NULL",
        (db.to_db_time(at), event.run_id),
    )
    if hold is not None:
        db.execute(hold_runs_statement(1), (hold.holder, hold.token, until, event.run_id, hold.token))
    return None


def _progress(state: RunCheckpoint | None, mark: Stored | None) -> tuple[object, ...]:
    """The run row's state columns (`head`, `state_entries`, `state_digest`, `checkpoint_round`, `resumable`)
    for `state` stored up to `mark`; all `NULL` without a state."""
    if state is None or mark is None:
        return (None, None, None, None, None)
    return (state.model_dump_json(exclude={"entries", "digest"}), *mark.columns)


@value_cache(maxsize=64)
def config_text(config: LoopConfig) -> str:
    """A `LoopConfig` as the journal's JSON; made once per config (a service runs many runs with one)."""
    return _json(loop_config_data(config))


def event_row(event: Event, round: int | None, data: Mapping[str, Any]) -> tuple[str, str, int | None, str]:
    """An event as the run id, kind, round and data of its row in the log (`append_events`)."""
    try:
        text = pydantic_core.to_json(data).decode()  # the writer thread encodes every event: the fast encoder
    except (pydantic_core.PydanticSerializationError, UnicodeDecodeError):  # lone surrogates: kept by ``_json``
        text = _json(data)
    return (event.run_id, event.kind, round, text)


def append_events(db: Connection, rows: Sequence[tuple[str, str, int | None, str]], at: object) -> None:
    """Append events (`event_row`), in order, to their runs' logs (never updated, never deleted), each
    recorded at `at` (as `to_db_time` gives it)."""
    insert_rows(
        db,
        "INSERT INTO agentkit_events (run_id, kind, round, at, data) VALUES",
        [(run_id, kind, round, at, data) for run_id, kind, round, data in rows],
    )


_ROWS_PER_STATEMENT = 64
"""Most rows `insert_rows` puts in one statement."""
_PARAMETERS_PER_STATEMENT = 999
"""Most parameters `insert_rows` puts in one statement: SQLite before 3.32 allows 999 (later 32,766;
PostgreSQL 65,535)."""


def insert_rows(db: Connection, insert: str, rows: Sequence[tuple[object, ...]], tail: str = "") -> None:
    """`insert` (`INSERT INTO t (columns) VALUES`) of `rows`, in order, a few dozen per statement.

    One statement of many rows rather than a statement per row: the writer thread records a round's
    events in one step of the database instead of one per event.
    """
    if not rows:
        return
    per_statement = max(1, min(_ROWS_PER_STATEMENT, _PARAMETERS_PER_STATEMENT // len(rows[0])))
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        db.execute(_insert_text(insert, len(chunk[0]), len(chunk), tail), [value for row in chunk for value in row])


@functools.lru_cache(maxsize=256)
def _insert_text(insert: str, columns: int, rows: int, tail: str) -> str:
    """`insert` of `rows` rows of `columns` values each, then `tail` (a few texts, used over and over)."""
    marks = "(" + ", ".join("?" * columns) + ")"
    return f"{insert} {', '.join([marks] * rows)}{tail}"


def finish_run(db: Connection, event: RunFinished, at: datetime, known: Stored | None = None) -> Stored | None:
    """Record a run's ending and the rest of its state, releasing the run; the first ending recorded wins.

    `known`: what the journal last stored of the run's state, as `store_state` takes it. When the
    final state continues it, the ending, the state's progress and the release are one update of
    the run's row, which applies only while the row still says `known` and no ending is recorded;
    otherwise each is written on its own, as `store_state` would, reading the row.

    Returns:
        How far the stored state goes now (`None`: the run's end holds no state).
    """
    result = event.result
    usage = result.usage
    ending = (
        db.to_db_time(at),
        result.outcome.value,
        result.stop_reason.value,
        said(result.error),
        result.rounds,
        usage.requests,
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    )
    state = final_state(event)
    if state is not None:
        mark = _appended_to_known(db, event.run_id, state, known, _ENDING, ending, " AND ended_at IS NULL")
        if mark is not None:
            return mark
    db.execute(
        "INSERT INTO agentkit_runs (id, ended_at, outcome, stop_reason, error, rounds, requests, input_tokens, "
        "output_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "ended_at = excluded.ended_at, outcome = excluded.outcome, stop_reason = excluded.stop_reason, "
        "error = excluded.error, rounds = excluded.rounds, requests = excluded.requests, "
        "input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, "
        "cached_input_tokens = excluded.cached_input_tokens, cache_write_tokens = excluded.cache_write_tokens, "
        "reasoning_tokens = excluded.reasoning_tokens "
        "WHERE agentkit_runs.ended_at IS NULL",
        (event.run_id, *ending),
    )
    stored = None if state is None else store_state(db, event.run_id, state, known)
    release_run(db, event.run_id)
    return stored


_ENDING = (
    "ended_at = ?, outcome = ?, stop_reason = ?, error = ?, rounds = ?, requests = ?, input_tokens = ?, "
    "output_tokens = ?, cached_input_tokens = ?, cache_write_tokens = ?, reasoning_tokens = ?, claim = NULL, "
    "lease_until = NULL, "
)
"""What a run's end sets on its row besides its state's progress (`finish_run`): the ending, and the release."""


def final_state(event: RunFinished) -> RunCheckpoint | None:
    """The state the run's end holds (a tool loop's), which `finish_run` writes."""
    result = event.result
    if isinstance(result, ToolLoopResult) and result.checkpoint.run_id == event.run_id:
        return result.checkpoint
    return None


OPEN_STATES = (ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING)
"""States in which the same call proposed again is the same inbox entry."""


def insert_fork(db: Connection, row: Mapping[str, Any], fork: RunCheckpoint, config: str | None, at: datetime) -> None:
    """Record a fork of the run of `row` (its state `fork`): a new run that has not started, its
    parent and round recorded.

    The proposals of the rounds the fork keeps get no inbox entry of their own: they are the parent's
    calls, and the fork shares the parent's entries (`lineage_proposals`), so a call is decided once and
    runs at most once, whichever of the parent, the fork or a worker runs it.
    """
    assert fork.parent is not None
    db.execute(
        "INSERT INTO agentkit_runs (id, agent, model, config, loop_config, parent, forked_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            fork.run_id,
            row["agent"],
            row["model"],
            row["config"],
            config or row.get("loop_config"),
            fork.parent,
            fork.forked_at,
        ),
    )
    store_state(db, fork.run_id, fork)
    if fork.stop_reason is StopReason.PROPOSED:
        db.execute(
            "UPDATE agentkit_runs SET ended_at = ?, outcome = ?, stop_reason = ? WHERE id = ?",
            (db.to_db_time(at), Outcome.APPLIED.value, StopReason.PROPOSED.value, fork.run_id),
        )


def lineage_proposals(db: Connection, row: Mapping[str, Any], *, lenient: bool = False) -> list[ProposalRecord]:
    """The inbox entries of the run of `row` and those it shares with the runs it was forked from: of its
    parent, the entries of the rounds the fork kept, and so on up the chain (a round of a fork of a fork
    belongs to the first run that made it). The ancestors' entries come first, each run's by time
    (`lenient`: see `proposal_of`)."""
    own = db.query("SELECT * FROM agentkit_proposals WHERE run_id = ? ORDER BY proposed_at, id", (row["id"],))
    records = [proposal_of(db, r, lenient=lenient) for r in own]
    for parent, upto in _ancestors(db, row):
        rows = db.query(
            "SELECT * FROM agentkit_proposals WHERE run_id = ? AND round <= ? ORDER BY proposed_at, id",
            (parent, upto),
        )
        records = [proposal_of(db, r, lenient=lenient) for r in rows] + records
    return records


def _ancestors(db: Connection, row: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """The runs the run of `row` was forked from, nearest first, each with the last of its rounds the chain
    kept (a fork of a fork keeps no more of the grandparent than its parent did); nothing for a run that
    is no fork. A chain that loops back (a hand-edited row) ends where it would repeat."""
    seen = {_row_id(row)}
    parent, forked_at = row.get("parent"), row.get("forked_at")
    upto: int | None = None
    while parent is not None and forked_at is not None and str(parent) not in seen:
        upto = int(forked_at) if upto is None else min(upto, int(forked_at))
        seen.add(str(parent))
        yield str(parent), upto
        above = db.query("SELECT parent, forked_at FROM agentkit_runs WHERE id = ?", (parent,))
        if not above:
            return
        parent, forked_at = above[0]["parent"], above[0]["forked_at"]


CLAIMED_STATES = (ProposalState.EXECUTING, ProposalState.EXECUTED, ProposalState.FAILED)
"""An entry whose call a worker claimed: it ran, runs, or may have run."""


def claimed_upstream(db: Connection, record: ProposalRecord) -> ProposalRecord | None:
    """Another run's entry for `record`'s call, claimed (`CLAIMED_STATES`), among the runs `record`'s run was forked
    from, for a round the fork kept: the call is that run's and ran (or runs) there. `None`: there is none.

    A fork makes no entry of its own for such a call (`insert_fork`); one made by an earlier agentkit, or proposed
    by hand under the fork, is the same call again. A run that is no fork costs one read of its row.
    """
    digests = tuple({record.digest, record.original_digest or record.digest})
    marks = ", ".join("?" * len(digests))
    own = db.query("SELECT id, parent, forked_at FROM agentkit_runs WHERE id = ?", (record.run_id,))
    for parent, upto in _ancestors(db, own[0]) if own else ():
        if record.round > upto:
            return None
        rows = db.query(
            f"SELECT * FROM agentkit_proposals WHERE run_id = ? AND round = ? AND (digest IN ({marks}) "
            f"OR original_digest IN ({marks})) AND state IN (?, ?, ?) ORDER BY proposed_at, id",
            (parent, record.round, *digests, *digests, *(s.value for s in CLAIMED_STATES)),
        )
        if rows:
            return proposal_of(db, rows[-1], lenient=True)
    return None


def insert_proposal(db: Connection, action: ProposedAction[Any], actor: str, at: datetime) -> str:
    """Put `action` in the inbox as pending; returns its id.

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
    amended = db.query(
        "SELECT id FROM agentkit_proposals WHERE run_id = ? AND round = ? AND original_digest = ? "
        "AND state IN (?, ?, ?)",
        key,
    )
    if amended:
        # Its open entry was amended as it was approved: the call as proposed is decided, not a new request.
        return str(amended[0]["id"])
    # The partial unique index on open entries makes a concurrent insert of the same call do nothing;
    # the loop covers the open entry becoming final between that insert and the lookup.
    for _ in range(3):
        new_id = uuid.uuid4().hex[:16]
        inserted = db.execute(
            "INSERT INTO agentkit_proposals (id, state, tool_name, tier, args, digest, rationale, round, run_id, "
            "proposed_at, args_type, args_schema, evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
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
                type_name(type(action.args)),
                args_schema_digest(type(action.args)),
                None if action.evidence is None else action.evidence.model_dump_json(),
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
    db: Connection,
    id: str,
    before: ProposalState | None,
    after: ProposalState,
    actor: str,
    at: datetime,
    note: str,
    verified: str | None = None,
) -> None:
    db.execute(
        "INSERT INTO agentkit_transitions (proposal_id, from_state, to_state, actor, at, note, verified) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (id, None if before is None else before.value, after.value, actor, db.to_db_time(at), note, verified),
    )


VERIFIED_APPROVER = "require_verified_approver"
"""The setting (`agentkit_settings`) that makes every client refuse unverified decisions."""


def verification_required(db: Connection) -> bool:
    """Whether the journal itself requires a person's name to be the identity it can vouch for."""
    return bool(db.query("SELECT value FROM agentkit_settings WHERE name = ? AND value = 'on'", (VERIFIED_APPROVER,)))


def vouched(db: Connection) -> str:
    """Who the database can vouch is deciding: PostgreSQL's `session_user` (the role that logged in); for
    SQLite, which has no users, the operating-system user of this process."""
    if db.dialect == "postgresql":
        return str(db.query("SELECT session_user AS who", ())[0]["who"])
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return f"uid:{os.getuid()}"


def abort_run(db: Connection, event: RunAborted, at: datetime) -> None:
    """Record that a run was cancelled or raised: it ended, with no outcome."""
    db.execute(
        "INSERT INTO agentkit_runs (id, ended_at, error) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "ended_at = excluded.ended_at, error = excluded.error WHERE agentkit_runs.ended_at IS NULL",
        (event.run_id, db.to_db_time(at), f"aborted: {type(event.error).__name__}: {said(event.error)}"),
    )
    release_run(db, event.run_id)


@dataclass(frozen=True, slots=True)
class Stored:
    """How far a run's stored state goes, as its row says (written by `store_state`)."""

    entries: int
    """The entries stored."""
    digest: str
    """The state's digest with them (its last entry's)."""
    round: int
    """The last round they record."""
    resumable: bool
    """Whether the run can be resumed from them."""

    @property
    def columns(self) -> tuple[int, str, int, bool]:
        """The run row's `state_entries`, `state_digest`, `checkpoint_round` and `resumable` that say it."""
        return (self.entries, self.digest, self.round, self.resumable)


def store_state(db: Connection, run_id: str, state: RunCheckpoint, known: Stored | None = None) -> Stored | None:
    """Append the entries of `state` that the journal does not hold yet, one row each (and, the first
    time, the state's header on the run's row): a round's write costs the round, not the run.

    The run's row says how far the stored state goes, its round and whether it can be resumed; they
    are brought forward from what the row says and the new entries alone, so that no write reads
    the whole state. With `known` (what this journal last stored of the run) the row is not read
    first: the update of the row only applies while the row still says `known`, and the row is read
    (as without it) when it does not.

    A state that does not continue the one stored (another run's, or an older one of this run) is not
    written.

    Returns:
        How far the stored state goes now; `None` when the run's start was never recorded (there is
        nothing to add the entries to).

    Raises:
        JournalError: the state does not continue the one stored.
    """
    mark = _appended_to_known(db, run_id, state, known)
    if mark is not None:
        return mark
    rows = db.query(
        "SELECT head IS NULL AS headless, state_entries, state_digest, checkpoint_round, resumable "
        "FROM agentkit_runs WHERE id = ?",
        (run_id,),
    )
    if not rows:
        return None  # the run's start was never recorded: nothing to add to
    row = rows[0]
    headless = bool(row["headless"])
    stored = 0 if headless else int(row["state_entries"] or 0)
    was = Stored(stored, str(row["state_digest"] or ""), int(row["checkpoint_round"] or 0), bool(row["resumable"]))
    if stored >= len(state.entries) and not headless:
        return was  # an older state than the one stored (or the same): it holds nothing new
    if stored and state.entries[stored - 1].digest != row["state_digest"]:
        raise JournalError(
            f"the state of run {run_id!r} given to the journal does not continue the one it holds (digest "
            f"{str(row['state_digest'])[:12]} at entry {stored - 1}); it was not written"
        )
    mark = _advanced(state, was)
    _append_entries(db, run_id, state, stored)
    db.execute(
        "UPDATE agentkit_runs SET head = COALESCE(head, ?), state_entries = ?, state_digest = ?, checkpoint_round = ?, "
        "resumable = ? WHERE id = ?",
        (state.model_dump_json(exclude={"entries", "digest"}) if headless else None, *mark.columns, run_id),
    )
    return mark


def _appended_to_known(
    db: Connection,
    run_id: str,
    state: RunCheckpoint,
    known: Stored | None,
    also: str = "",
    also_values: tuple[object, ...] = (),
    where: str = "",
) -> Stored | None:
    """Append the entries of `state` after the `known` ones, with one update of the run's row that applies only
    while the row still says `known` (and meets `where`, ` AND ...` conditions): its progress, and `also`
    (`column = ?, ` clauses, with `also_values`). How far the stored state goes then; `None`, with nothing
    written, when `state` does not continue `known` or the row says otherwise (the caller reads it then)."""
    if known is None or not _continues(state, known):
        return None
    mark = _advanced(state, known)
    updated = db.execute(
        f"UPDATE agentkit_runs SET {also}state_entries = ?, state_digest = ?, checkpoint_round = ?, resumable = ? "
        f"WHERE id = ? AND head IS NOT NULL AND state_entries = ? AND state_digest = ?{where}",
        (*also_values, *mark.columns, run_id, known.entries, known.digest),
    )
    if updated != 1:
        return None
    _append_entries(db, run_id, state, known.entries)
    return mark


_NOTHING_STORED = Stored(0, "", 0, True)
"""What a run's row says of its state before any of it is stored."""


def _continues(state: RunCheckpoint, stored: Stored) -> bool:
    """Whether `state` adds entries to the `stored` ones (the last stored one is its entry there)."""
    if stored.entries >= len(state.entries):
        return False
    return not stored.entries or state.entries[stored.entries - 1].digest == stored.digest


def _append_entries(db: Connection, run_id: str, state: RunCheckpoint, stored: int) -> None:
    """Append the entries of `state` after its first `stored`, one row each."""
    insert_rows(
        db,
        "INSERT INTO agentkit_entries (run_id, seq, body) VALUES",
        [(run_id, seq, entry.model_dump_json()) for seq, entry in enumerate(state.entries[stored:], start=stored)],
    )


def _advanced(state: RunCheckpoint, was: Stored) -> Stored:
    """What the run's row says once the entries of `state` after the `was.entries` stored are added."""
    rounds = was.round if was.entries else 0
    for entry in state.entries[was.entries :]:
        if entry.kind == "round" and entry.round > rounds:
            rounds = entry.round
    return Stored(len(state.entries), state.digest, rounds, state.resumable_after(was.entries, was.resumable))


def state_of(db: Connection, row: Mapping[str, Any]) -> RunCheckpoint | None:
    """The run's state, folded from its header and its rows; `None` when the journal holds none.

    Raises:
        ResumeRefused: the state cannot be read back (a damaged row), or the run was recorded by an
            agentkit that kept its checkpoint whole (journal schema 4), which this one cannot go on from.
    """
    run_id = _row_id(row)
    head = row.get("head")
    if head is None:
        if row.get("checkpoint") is not None:
            raise ResumeRefused(
                f"run {run_id!r} was recorded by an earlier agentkit, whose checkpoints this one cannot go on from "
                "(state version 1); finish it with that agentkit, or start it again. Nothing ran"
            )
        return None
    bodies = db.query("SELECT seq, body FROM agentkit_entries WHERE run_id = ? ORDER BY seq", (run_id,))
    try:
        data = json.loads(str(head))
        data["entries"] = [json.loads(str(body["body"])) for body in bodies]
        data["digest"] = row.get("state_digest") or ""
        return RunCheckpoint.model_validate(data)
    except (ValueError, TypeError, RecursionError, pydantic.ValidationError) as invalid:
        raise ResumeRefused(
            f"the state of run {run_id!r} in the journal cannot be read ({type(invalid).__name__}: "
            f"{str(invalid)[:300]}); nothing ran"
        ) from invalid


def readable_state(db: Connection, row: Mapping[str, Any]) -> tuple[RunCheckpoint | None, str | None]:
    """The run's state as far as it can be read, and what cannot be (`None`: all of it reads).

    A damaged state is the header and the entries before the first that does not read (or no state,
    when the header does not), so that an operator sees what the journal holds and where it is damaged.
    """
    try:
        return state_of(db, row), None
    except ResumeRefused as refused:
        whole = str(refused)
    run_id = _row_id(row)
    if row.get("head") is None:  # recorded by an earlier agentkit: its rounds come from the events
        return None, whole
    try:
        header = RunCheckpoint.model_validate({**json.loads(str(row["head"])), "entries": [], "digest": ""})
    except (ValueError, TypeError, RecursionError, pydantic.ValidationError) as invalid:
        return None, (
            f"its header (the run's row, column head) cannot be read: {_why(invalid)}; shown: no entry (none reads "
            "without it), then the rounds the event log records"
        )
    bodies = db.query("SELECT seq, body FROM agentkit_entries WHERE run_id = ? ORDER BY seq", (run_id,))
    entries: list[Any] = []
    for index, body in enumerate(bodies):
        try:
            entries.append(_ENTRY.validate_python(json.loads(str(body["body"]))))
        except (ValueError, TypeError, RecursionError, pydantic.ValidationError) as invalid:
            shown = f"the {index} entries before it" if index else "no entry"
            damage = f"its entry {index} (agentkit_entries row seq {body['seq']}) cannot be read: {_why(invalid)}"
            state = header.model_copy(update={"entries": tuple(entries)})
            return state, f"{damage}; shown: {shown}, then the rounds the event log records after them"
    return header.model_copy(update={"entries": tuple(entries)}), whole


def _why(invalid: BaseException) -> str:
    """An error, named and cut short, for a line about a damaged row."""
    return f"{type(invalid).__name__}: {str(invalid)[:300]}"


_ENTRY: pydantic.TypeAdapter[StateRound | DecisionEntry | EndEntry] = pydantic.TypeAdapter(Entry)


def rounds_of(state: RunCheckpoint) -> list[RoundEntry]:
    """The run's rounds as records, from its state: each proposal with its decision, when it has one."""
    decisions: dict[tuple[int, str | None], DecisionEntry] = {
        (e.round, e.call_digest): e for e in state.entries if isinstance(e, DecisionEntry)
    }
    rounds: list[RoundEntry] = []
    for entry in state.entries:
        if not isinstance(entry, StateRound):
            continue
        outcome = entry.outcome
        decided = decisions.get((entry.round, entry.call_digest)) if outcome is RoundOutcome.PROPOSED else None
        batch = decided.batch if decided is not None else entry.batch if outcome is RoundOutcome.RAN else None
        rounds.append(
            RoundEntry(
                run_id=state.run_id,
                round=entry.round,
                done=outcome is RoundOutcome.DONE,
                rationale=entry.rationale,
                tool_name=entry.tool,
                tier=entry.tier,
                args_json=None if entry.args is None else canonical_args(entry.args),
                executed=batch is not None,
                proposed=outcome is RoundOutcome.PROPOSED,
                repeated=outcome is RoundOutcome.REFUSED or (outcome is RoundOutcome.ENDED and _repeats(entry)),
                batch_size=0 if batch is None else len(json.loads(batch)),
                observation=decided.observation if decided is not None else _observed(entry),
                error=decided.error if decided is not None and decided.error else entry.error,
                llm_seconds=entry.llm_seconds,
                tool_seconds=entry.tool_seconds + (decided.tool_seconds if decided is not None else 0.0),
                usage=usage_of_counts(entry),
                decided_by=None if decided is None else decided.by,
                decision=None if decided is None else "approved" if decided.approved else "rejected",
            )
        )
    return rounds


def recorded_rounds(db: Connection, run_id: str, state: RunCheckpoint | None) -> list[RoundEntry]:
    """The rounds the journal holds for a run whose stored state is `state`: those of the state, then a
    round in flight when the run stopped (what its events say it began: a call it made, say); without a
    state (a run recorded by an earlier agentkit), its rounds rebuilt from its events alone.

    Raises:
        JournalError: an event row does not parse.
    """
    if state is None:
        return folded(db, run_id)
    recorded = rounds_of(state)
    last = max((r.round for r in recorded), default=0)
    return recorded + [e for e in folded(db, run_id) if e.round > last]


def canonical_args(args: str) -> str:
    """A state's args text as the journal shows args: `canonical_json`'s form (UTF-8, not escaped)."""
    return json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _repeats(entry: StateRound) -> bool:
    """An `ENDED` round that repeated a recent call (a stalemate): a call, and no error."""
    return entry.tool is not None and entry.error is None


def _observed(entry: StateRound) -> str | None:
    """What the round's record shows as the call's observation: a `ToolRetry` message or a refusal note."""
    return entry.observation if entry.outcome in (RoundOutcome.RETRIED, RoundOutcome.REFUSED) else None


def release_run(db: Connection, run_id: str) -> None:
    """The run ended: nobody holds it any more."""
    db.execute("UPDATE agentkit_runs SET claim = NULL, lease_until = NULL WHERE id = ?", (run_id,))


def hold_runs_statement(runs: int) -> str:
    """Take or renew the hold on `runs` unfinished runs for one holder (params: holder, token, lease, the ids, token).

    A run another holder holds (a resumer's claim) is left alone.
    """
    ids = ", ".join("?" * runs)
    return (
        "UPDATE agentkit_runs SET claimed_by = ?, claim = ?, lease_until = ? "
        f"WHERE id IN ({ids}) AND ended_at IS NULL AND (claim IS NULL OR claim = ?)"
    )


_EPOCH = datetime.fromtimestamp(0, UTC)


class _Fields:
    """Reads one row's columns, noting each that does not parse instead of failing at the first.

    A row edited by hand or damaged (a tier no `Tier` has, a timestamp that does not parse, a
    number where text belongs) must not take a whole listing down: the listing flags it, and
    anything that would act on it raises a `JournalError` naming it.
    """

    def __init__(self, what: str, row: Mapping[str, Any]) -> None:
        self.what = what
        self.row = row
        self.problems: list[str] = []

    def get(self, name: str, convert: Any, fallback: Any) -> Any:
        value = self.row[name]
        try:
            return convert(value)
        except Exception as error:  # any way a stored value can fail to parse makes the row unreadable
            self.problems.append(f"{name} {value!r} ({_first_line(error)})")
            return fallback

    def text(self, name: str) -> Any:
        return self.get(name, _text, "")

    def optional_text(self, name: str) -> Any:
        return self.get(name, _optional(_text), None)

    def number(self, name: str) -> Any:
        return self.get(name, _integer, 0)

    def time(self, db: Connection, name: str) -> Any:
        return self.get(name, _optional(db.from_db_time), None)

    def verdict(self, *, lenient: bool) -> str | None:
        """`None` for a sound row; else why it cannot be read (raised as `JournalError` unless `lenient`)."""
        if not self.problems:
            return None
        message = (
            f"{self.what} cannot be read: {'; '.join(self.problems)}. The row was edited by hand or damaged; "
            "correct or delete it"
        )
        if not lenient:
            raise JournalError(message)
        return message


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _optional(convert: Any) -> Any:
    return lambda value: None if value is None else convert(value)


def _row_id(row: Mapping[str, Any], key: str = "id") -> str:
    value = row.get(key)
    return value if isinstance(value, str) else repr(value)


def proposal_of(db: Connection, row: Mapping[str, Any], *, lenient: bool = False) -> ProposalRecord:
    """A proposal row as a record.

    Raises:
        JournalError: a column does not parse, naming the row (unless `lenient`: then the record
            is flagged in `unreadable`, its unreadable fields holding placeholders).
    """
    f = _Fields(f"proposal {_row_id(row)!r}", row)
    record = ProposalRecord(
        id=_row_id(row),
        state=f.get("state", ProposalState, ProposalState.PENDING),
        tool_name=f.text("tool_name"),
        # An unknown tier reads as the most dangerous one: a flagged row is never treated as harmless.
        tier=f.get("tier", Tier, Tier.IRREVERSIBLE),
        args_json=f.text("args"),
        digest=f.text("digest"),
        rationale=f.text("rationale"),
        round=f.number("round"),
        run_id=f.text("run_id"),
        proposed_at=f.get("proposed_at", db.from_db_time, _EPOCH),
        approved_by=f.optional_text("approved_by"),
        approved_at=f.time(db, "approved_at"),
        rejected_by=f.optional_text("rejected_by"),
        rejected_at=f.time(db, "rejected_at"),
        reason=f.optional_text("reason"),
        claimed_by=f.optional_text("claimed_by"),
        claimed_at=f.time(db, "claimed_at"),
        lease_until=f.time(db, "lease_until"),
        finished_at=f.time(db, "finished_at"),
        batch_json=f.optional_text("batch"),
        batch_size=f.get("batch_size", _optional(_integer), None),
        error=f.optional_text("error"),
        resolved_by=f.optional_text("resolved_by"),
        resolved_at=f.time(db, "resolved_at"),
        note=f.optional_text("note"),
        args_type=f.optional_text("args_type"),
        args_schema=f.optional_text("args_schema"),
        original_args_json=f.optional_text("original_args"),
        original_digest=f.optional_text("original_digest"),
        amended_by=f.optional_text("amended_by"),
        amended_fields=f.get("amended_fields", _field_names, ()),
        evidence=f.get("evidence", _evidence, None),
        left_by=f.optional_text("left_by"),
        left_at=f.time(db, "left_at"),
        left_until=f.time(db, "left_until"),
        left_note=f.optional_text("left_note"),
    )
    unreadable = f.verdict(lenient=lenient)
    return record if unreadable is None else replace(record, unreadable=unreadable)


def _evidence(value: object) -> Evidence | None:
    """A stored `Evidence` (`NULL`: none recorded)."""
    return None if value is None else Evidence.model_validate_json(_text(value))


def _field_names(value: object) -> tuple[str, ...]:
    """A stored JSON list of field names (`NULL`: none)."""
    if value is None:
        return ()
    names = json.loads(_text(value))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("not a JSON list of field names")
    return tuple(names)


def transition_of(db: Connection, row: Mapping[str, Any]) -> Transition:
    f = _Fields(f"transition {row.get('id')!r} of proposal {_row_id(row, 'proposal_id')!r}", row)
    transition = Transition(
        proposal_id=_row_id(row, "proposal_id"),
        from_state=f.get("from_state", _optional(ProposalState), None),
        to_state=f.get("to_state", ProposalState, ProposalState.PENDING),
        actor=f.text("actor"),
        at=f.get("at", db.from_db_time, _EPOCH),
        note=f.text("note"),
        verified=f.optional_text("verified"),
    )
    f.verdict(lenient=False)
    return transition


def run_of(db: Connection, row: Mapping[str, Any], *, lenient: bool = False) -> RunRecord:
    """A run row as a record; the rounds and usage of a run without a result come from its state and events.

    Raises:
        JournalError: a column (or an event of an unfinished run) does not parse, naming the row
            (unless `lenient`: then the record is flagged in `unreadable`).
    """
    f = _Fields(f"run {_row_id(row)!r}", row)
    outcome = f.get("outcome", _optional(Outcome), None)
    ended_at = f.time(db, "ended_at")
    finished = row["outcome"] is not None
    state = RunState.FINISHED if finished else RunState.UNFINISHED if row["ended_at"] is None else RunState.ABORTED
    rounds = f.get("rounds", _optional(_integer), None) or 0
    usage = Usage(
        requests=f.get("requests", _optional(_integer), None) or 0,
        input_tokens=f.get("input_tokens", _optional(_integer), None) or 0,
        output_tokens=f.get("output_tokens", _optional(_integer), None) or 0,
        # NULL in a run that ended before the journal kept them (schema version 11)
        cached_input_tokens=f.get("cached_input_tokens", _optional(_integer), None) or 0,
        cache_write_tokens=f.get("cache_write_tokens", _optional(_integer), None) or 0,
        reasoning_tokens=f.get("reasoning_tokens", _optional(_integer), None) or 0,
    )
    if not finished:
        try:
            # A run whose row holds no state header (an earlier agentkit's) is read from its events, never refused.
            entries = recorded_rounds(db, _row_id(row), state_of(db, row) if row.get("head") is not None else None)
        except (JournalError, ResumeRefused) as error:
            f.problems.append(f"its rounds ({error})")
            entries = []
        rounds = max((e.round for e in entries), default=0)
        usage = sum((e.usage for e in entries), Usage())
    resumable = bool(row.get("resumable"))
    lease_until = f.time(db, "lease_until") if "lease_until" in row else None
    parent = f.optional_text("parent") if "parent" in row else None
    status = _status(db, row, state, resumable=resumable, lease_until=lease_until)
    record = RunRecord(
        id=_row_id(row),
        state=state,
        status=status,
        resumable=resumable,
        checkpoint_round=f.get("checkpoint_round", _optional(_integer), None) if "checkpoint_round" in row else None,
        claimed_by=f.optional_text("claimed_by") if "claimed_by" in row else None,
        lease_until=lease_until,
        agent=f.text("agent"),
        model=f.text("model"),
        config=f.get("config", _json_object, {}),
        loop_config=f.get("loop_config", _optional(_json_object), None),
        started_at=f.time(db, "started_at"),
        ended_at=ended_at,
        outcome=outcome,
        stop_reason=f.get("stop_reason", _optional(StopReason), None),
        error=f.optional_text("error"),
        rounds=rounds,
        usage=usage,
        parent=parent,
        forked_at=f.get("forked_at", _optional(_integer), None) if "forked_at" in row else None,
    )
    unreadable = f.verdict(lenient=lenient)
    return record if unreadable is None else replace(record, unreadable=unreadable)


def _status(
    db: Connection, row: Mapping[str, Any], state: RunState, *, resumable: bool, lease_until: datetime | None
) -> RunStatus:
    """Where a run stands for resuming, from its row, its hold and (for a stop at a proposal) its inbox."""
    if state is RunState.UNFINISHED:
        held = row.get("claim") is not None and lease_until is not None and lease_until > now()
        if not held and row.get("parent") is not None and row.get("started_at") is None:
            return RunStatus.READY  # a fork not resumed yet
        return RunStatus.RUNNING if held else RunStatus.CRASHED
    if state is RunState.ABORTED:
        return RunStatus.ABORTED
    if not resumable or row.get("stop_reason") != StopReason.PROPOSED.value:
        return RunStatus.FINISHED
    # A fork waits on the entries it shares with the runs it was forked from too (`lineage_proposals`).
    chain = [(_row_id(row), None), *_ancestors(db, row)]
    return RunStatus.WAITING if any(_pending(db, run_id, upto) for run_id, upto in chain) else RunStatus.READY


def _pending(db: Connection, run_id: str, upto: int | None) -> bool:
    """Whether the run has a pending inbox entry (of its rounds up to `upto`, if given)."""
    bound, params = ("", ()) if upto is None else (" AND round <= ?", (upto,))
    rows = db.query(
        f"SELECT 1 FROM agentkit_proposals WHERE run_id = ? AND state = ?{bound} LIMIT 1",
        (run_id, ProposalState.PENDING.value, *params),
    )
    return bool(rows)


def _json_object(value: object) -> dict[str, Any]:
    data = json.loads(_text(value))
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    return data


def folded(db: Connection, run_id: str) -> list[RoundEntry]:
    """The run's rounds rebuilt from its event log.

    Raises:
        JournalError: an event row does not parse, naming it.
    """
    rows = db.query("SELECT id, kind, round, data FROM agentkit_events WHERE run_id = ? ORDER BY id", (run_id,))
    events = []
    for r in rows:
        f = _Fields(f"event {r.get('id')!r} of run {run_id!r}", r)
        event = (f.text("kind"), f.get("round", _optional(_integer), None), f.get("data", _json_object, {}))
        f.verdict(lenient=False)
        events.append(event)
    try:
        return fold_events(run_id, events)
    except Exception as error:  # an event whose data lacks what its kind carries
        raise JournalError(
            f"the event log of run {run_id!r} cannot be read ({type(error).__name__}: {error}); an event row was "
            "edited by hand or damaged"
        ) from error


def round_of(row: Mapping[str, Any]) -> RoundEntry:
    f = _Fields(f"round {row.get('round')!r} of run {_row_id(row, 'run_id')!r}", row)
    entry = RoundEntry(
        run_id=_row_id(row, "run_id"),
        round=f.number("round"),
        done=bool(row["done"]),
        rationale=f.text("rationale"),
        tool_name=f.optional_text("tool_name"),
        tier=f.get("tier", _optional(Tier), None),
        args_json=f.optional_text("args"),
        executed=bool(row["executed"]),
        proposed=bool(row["proposed"]),
        repeated=bool(row["repeated"]),
        batch_size=f.number("batch_size"),
        observation=f.optional_text("observation"),
        error=f.optional_text("error"),
        llm_seconds=f.get("llm_seconds", float, 0.0),
        tool_seconds=f.get("tool_seconds", float, 0.0),
        usage=Usage(
            requests=f.number("requests"),
            input_tokens=f.number("input_tokens"),
            output_tokens=f.number("output_tokens"),
        ),
    )
    f.verdict(lenient=False)
    return entry
