"""The journal's tables, one DDL text for both databases, and the forward migrations.

Each migration is a list of statements; `{ts}`, `{serial}`, `{bool}` and `{real}` are filled
per database, and a `PerDatabase` statement says a change only one database can make its own way.
The version lives in a one-row table; a journal is migrated forward on open, inside one
transaction, so a half-applied migration never exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MIGRATIONS", "NOT_A_JOURNAL_FIX", "SCHEMA_VERSION", "VERSION_TABLE", "PerDatabase", "render"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PerDatabase:
    """One step written for each database (`None`: that database has nothing to do)."""

    sqlite: str | None
    postgresql: str | None


Statement = str | PerDatabase

VERSION_TABLE = "agentkit_schema"

NOT_A_JOURNAL_FIX = (
    "point --db (or $AGENTKIT_JOURNAL) at the journal your runs are recorded in: a program creates one as it "
    "records its first run (open_journal(path)), and from a shell `agentkit demo --db PATH` does"
)
"""The fix for a missing journal, told to a shell user (most meet it through --db) and to a program alike."""

# The proposals table's columns: version 1 adds UNIQUE (run_id, round, digest); version 2 rebuilds the
# table without it (below), so both versions' tables are written from the one list.
_PROPOSAL_COLUMNS = """
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL
            CHECK (state IN ('pending', 'approved', 'rejected', 'executing', 'executed', 'failed')),
        tool_name TEXT NOT NULL,
        tier INTEGER NOT NULL,
        args TEXT NOT NULL,
        digest TEXT NOT NULL,
        rationale TEXT NOT NULL,
        round INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        proposed_at {ts} NOT NULL,
        approved_by TEXT,
        approved_at {ts},
        rejected_by TEXT,
        rejected_at {ts},
        reason TEXT,
        claimed_by TEXT,
        claimed_at {ts},
        claim TEXT,
        finished_at {ts},
        batch TEXT,
        batch_size INTEGER,
        error TEXT,
        resolved_by TEXT,
        resolved_at {ts},
        note TEXT"""


def _proposals_table(name: str, *, unique: bool) -> str:
    """The proposals table's DDL (``{ts}`` left for the backend): version 1 with its UNIQUE, version 2 without."""
    constraint = ",\n        UNIQUE (run_id, round, digest)" if unique else ""
    return f"CREATE TABLE {name} ({_PROPOSAL_COLUMNS}{constraint}\n    )"


def _transitions_table(name: str, proposals: str) -> str:
    """The transitions table's DDL, referencing the proposals table `proposals`."""
    return f"""CREATE TABLE {name} (
        id {{serial}},
        proposal_id TEXT NOT NULL REFERENCES {proposals} (id),
        from_state TEXT,
        to_state TEXT NOT NULL,
        actor TEXT NOT NULL,
        at {{ts}} NOT NULL,
        note TEXT NOT NULL
    )"""


_V1 = (
    f"CREATE TABLE {VERSION_TABLE} (version INTEGER NOT NULL)",
    """CREATE TABLE agentkit_runs (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL DEFAULT '',
        config TEXT NOT NULL DEFAULT '{{}}',
        started_at {ts},
        ended_at {ts},
        outcome TEXT,
        stop_reason TEXT,
        error TEXT,
        rounds INTEGER,
        requests INTEGER,
        input_tokens INTEGER,
        output_tokens INTEGER
    )""",
    "CREATE INDEX agentkit_runs_started ON agentkit_runs (started_at)",
    """CREATE TABLE agentkit_events (
        id {serial},
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        round INTEGER,
        at {ts} NOT NULL,
        data TEXT NOT NULL
    )""",
    "CREATE INDEX agentkit_events_run ON agentkit_events (run_id, id)",
    """CREATE TABLE agentkit_rounds (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        done {bool} NOT NULL,
        rationale TEXT NOT NULL,
        tool_name TEXT,
        tier INTEGER,
        args TEXT,
        executed {bool} NOT NULL,
        proposed {bool} NOT NULL,
        repeated {bool} NOT NULL,
        batch_size INTEGER NOT NULL,
        observation TEXT,
        error TEXT,
        llm_seconds {real} NOT NULL,
        tool_seconds {real} NOT NULL,
        requests INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        PRIMARY KEY (run_id, round)
    )""",
    _proposals_table("agentkit_proposals", unique=True),
    "CREATE INDEX agentkit_proposals_state ON agentkit_proposals (state, proposed_at)",
    _transitions_table("agentkit_transitions", "agentkit_proposals"),
    "CREATE INDEX agentkit_transitions_proposal ON agentkit_transitions (proposal_id, id)",
)

_OPEN_STATES = "'pending', 'approved', 'executing'"

# Version 2: a proposal is deduplicated only while it is open, so the same call proposed again after
# a rejection or a failure is a new inbox entry; and a run records its whole LoopConfig.
# SQLite cannot drop a table's UNIQUE constraint, so it rebuilds the proposals table (and the
# transitions that reference it) without one; PostgreSQL drops the constraint by name.
_PROPOSALS_V2 = _proposals_table("agentkit_proposals_v2", unique=False)
_TRANSITIONS_V2 = _transitions_table("agentkit_transitions_v2", "agentkit_proposals_v2")


def _sqlite_only(statement: str) -> PerDatabase:
    return PerDatabase(sqlite=statement, postgresql=None)


_V2: tuple[Statement, ...] = (
    _sqlite_only(_PROPOSALS_V2),
    _sqlite_only("INSERT INTO agentkit_proposals_v2 SELECT * FROM agentkit_proposals"),
    _sqlite_only(_TRANSITIONS_V2),
    _sqlite_only("INSERT INTO agentkit_transitions_v2 SELECT * FROM agentkit_transitions"),
    _sqlite_only("DROP TABLE agentkit_transitions"),
    _sqlite_only("DROP TABLE agentkit_proposals"),
    # Renaming also rewrites the transitions' REFERENCES clause to the new name.
    _sqlite_only("ALTER TABLE agentkit_proposals_v2 RENAME TO agentkit_proposals"),
    _sqlite_only("ALTER TABLE agentkit_transitions_v2 RENAME TO agentkit_transitions"),
    _sqlite_only("CREATE INDEX agentkit_proposals_state ON agentkit_proposals (state, proposed_at)"),
    _sqlite_only("CREATE INDEX agentkit_transitions_proposal ON agentkit_transitions (proposal_id, id)"),
    PerDatabase(
        sqlite=None,
        postgresql="ALTER TABLE agentkit_proposals DROP CONSTRAINT agentkit_proposals_run_id_round_digest_key",
    ),
    f"CREATE UNIQUE INDEX agentkit_proposals_open ON agentkit_proposals (run_id, round, digest) "
    f"WHERE state IN ({_OPEN_STATES})",
    "ALTER TABLE agentkit_runs ADD COLUMN loop_config TEXT",
)

# Version 3: a claim carries a lease its worker renews while the tool runs, so a dead worker's claim
# shows in stuck() once the lease runs out; and on PostgreSQL every proposal that becomes approved
# notifies the workers LISTENing on the channel, so they wake without polling.
_NOTIFY_APPROVED = """CREATE OR REPLACE FUNCTION agentkit_notify_approved() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('agentkit_approved', NEW.tool_name);
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql"""

_V3: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_proposals ADD COLUMN lease_until {ts}",
    PerDatabase(sqlite=None, postgresql=_NOTIFY_APPROVED),
    PerDatabase(
        sqlite=None,
        postgresql="CREATE TRIGGER agentkit_proposals_approved AFTER INSERT OR UPDATE OF state ON agentkit_proposals "
        "FOR EACH ROW WHEN (NEW.state = 'approved') EXECUTE FUNCTION agentkit_notify_approved()",
    ),
)

# Version 4: a run keeps its latest checkpoint (written at each round's end, and with its result), so a
# run that stopped at a proposal or died mid-way can be resumed; and a run is held, like a proposal's
# claim, by a lease its recorder (or its resumer) renews, so a dead process's run shows as crashed
# and exactly one process resumes it.
_V4: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_runs ADD COLUMN checkpoint TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN checkpoint_round INTEGER",
    "ALTER TABLE agentkit_runs ADD COLUMN checkpoint_digest TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN resumable {bool}",
    "ALTER TABLE agentkit_runs ADD COLUMN claimed_by TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN claim TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN lease_until {ts}",
)

# Version 5: a run's state is kept as rows appended to ``agentkit_entries`` (one per round, decision and
# end) under its header (``head``) on the run's row, so a round's write costs the round, not the whole
# state so far; ``state_entries`` and ``state_digest`` say how far the stored state goes; a fork records
# its ``parent`` and the round it was ``forked_at``. The checkpoint
# column of version 4 stays for the runs recorded then (they cannot be resumed by this agentkit).
_V5: tuple[Statement, ...] = (
    """CREATE TABLE agentkit_entries (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    "ALTER TABLE agentkit_runs ADD COLUMN head TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN state_entries INTEGER",
    "ALTER TABLE agentkit_runs ADD COLUMN state_digest TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN parent TEXT",
    "ALTER TABLE agentkit_runs ADD COLUMN forked_at INTEGER",
)

# Version 6: an approved proposal whose stored call does not check out against a worker's tool (another digest,
# a tier that changed or does not read, args that do not validate) is left: who left it, when first, why, and
# until when no worker claims it (``left_until``, pushed further each time it is left again). Claims read the
# approved rows nobody left, in order, from an index of their own, so rows left behind cost a claim nothing; the
# left rows whose time has come are retried from a second index.
_V6: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_proposals ADD COLUMN left_by TEXT",
    "ALTER TABLE agentkit_proposals ADD COLUMN left_at {ts}",
    "ALTER TABLE agentkit_proposals ADD COLUMN left_until {ts}",
    "ALTER TABLE agentkit_proposals ADD COLUMN left_note TEXT",
    "CREATE INDEX agentkit_proposals_claimable ON agentkit_proposals (proposed_at, id) "
    "WHERE state = 'approved' AND left_until IS NULL",
    "CREATE INDEX agentkit_proposals_left ON agentkit_proposals (left_until, id) "
    "WHERE state = 'approved' AND left_until IS NOT NULL",
)

# Version 7: an approver may amend a proposal's args as they approve it. The row then holds the
# amended call (its args and digest, which a worker checks and runs) and its lineage: the args and
# digest as proposed, who amended them and which fields changed. ``args_type`` names the args
# type (``module:qualname``) the proposing process validated the call as, so that an amendment made
# where only the journal is at hand (the CLI, the inbox) is validated as the same type.
_V7: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_proposals ADD COLUMN args_type TEXT",
    "ALTER TABLE agentkit_proposals ADD COLUMN original_args TEXT",
    "ALTER TABLE agentkit_proposals ADD COLUMN original_digest TEXT",
    "ALTER TABLE agentkit_proposals ADD COLUMN amended_by TEXT",
    "ALTER TABLE agentkit_proposals ADD COLUMN amended_fields TEXT",
)

# Version 8: standing grants; ``body`` is the grant as JSON, ``uses`` is counted by the update that uses it.
_V8: tuple[Statement, ...] = (
    """CREATE TABLE agentkit_grants (
        id TEXT PRIMARY KEY,
        tool_name TEXT NOT NULL,
        body TEXT NOT NULL,
        max_uses INTEGER,
        uses INTEGER NOT NULL,
        granted_at {ts} NOT NULL,
        revoked_by TEXT,
        revoked_at {ts},
        revoked_because TEXT
    )""",
    "CREATE INDEX agentkit_grants_tool ON agentkit_grants (tool_name, granted_at)",
)

# Version 9: what the executor had seen when it proposed a call (``Evidence`` as JSON: references, not
# copies); who the journal could vouch made a person's decision (``session_user``, the OS user), beside
# the name given; and settings every client of the journal honours (``require_verified_approver``).
_V9: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_proposals ADD COLUMN evidence TEXT",
    "ALTER TABLE agentkit_transitions ADD COLUMN verified TEXT",
    "CREATE TABLE agentkit_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)

# Version 10: the digest of the args' JSON schema the proposing process validated the call as (the type's
# own, made at run time or not): an amendment is validated only as a type whose schema has that digest.
_V10: tuple[Statement, ...] = ("ALTER TABLE agentkit_proposals ADD COLUMN args_schema TEXT",)

# Version 11: a finished run's usage keeps its detail counts beside its totals: the input tokens read from
# and written to the provider's prompt cache, and the output tokens spent reasoning. A run that ended before
# reads them as 0 (NULL: not recorded then).
_V11: tuple[Statement, ...] = (
    "ALTER TABLE agentkit_runs ADD COLUMN cached_input_tokens INTEGER",
    "ALTER TABLE agentkit_runs ADD COLUMN cache_write_tokens INTEGER",
    "ALTER TABLE agentkit_runs ADD COLUMN reasoning_tokens INTEGER",
)

MIGRATIONS: tuple[tuple[Statement, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11)
"""`MIGRATIONS[i]` takes a journal from version `i` to `i + 1`; append, never edit."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The version this code writes and reads."""


def render(statement: Statement, dialect: str, types: Mapping[str, str]) -> str | None:
    """The statement for one database (`sqlite` or `postgresql`), its column types filled; `None`: skip it."""
    if isinstance(statement, PerDatabase):
        chosen: str | None = getattr(statement, dialect)
        return None if chosen is None else chosen.format_map(types)
    return statement.format_map(types)
