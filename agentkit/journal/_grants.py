"""Standing grants kept in the journal: given, listed, revoked, and used as proposals are recorded.

A grant is used in the transaction that records a proposal (`apply_grants`, from
`insert_proposal`): the first live grant that matches the call counts one use with an update
that only succeeds below its `max_uses` (PostgreSQL re-checks the condition on the row it locks;
SQLite holds the write lock), and the proposal is recorded approved by `grant:<id>`. However many
processes record matching proposals at once, a grant never approves more calls than its uses.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from agentkit._grants import Grant, grant_actor
from agentkit._proposals import ProposedAction
from agentkit._tools import AnyTool
from agentkit.errors import JournalError, TransitionRefused, UnknownId
from agentkit.journal._records import ProposalState
from agentkit.journal._sql import insert_proposal, log_transition, now, verification_required, vouched
from agentkit.journal._storage import Storage, named

__all__ = ["GrantBook", "GrantRecord", "GrantState", "apply_grants", "record_proposal"]


class GrantState(enum.StrEnum):
    """Whether a journal's grant still approves anything."""

    LIVE = "live"
    SPENT = "spent"
    """It approved `max_uses` calls."""
    EXPIRED = "expired"
    REVOKED = "revoked"
    UNREADABLE = "unreadable"
    """Its row does not read as a grant of this version of agentkit (a constraint kind it does not know, say,
    or a damaged row): it approves nothing here. A revoked one reads as `REVOKED`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GrantRecord:
    """A grant as the journal holds it: the grant, its uses so far, and its revocation."""

    grant: Grant
    uses: int
    """Calls it approved."""
    state: GrantState
    """As of when it was read."""
    revoked_by: str | None = None
    revoked_at: datetime | None = None
    revoked_because: str | None = None
    unreadable: str | None = None
    """Set on a row that does not read as a grant: why, naming the row. It approves nothing, and `grant` is
    a stand-in that approves nothing either (its id and tool, who gave it and why where the row says, no
    constraints, expired at the epoch): what the row allows is not known, so it is never shown nor used as
    if it allowed more, or less. `revoke_grant` revokes it."""

    @property
    def id(self) -> str:
        return self.grant.id


_EPOCH = datetime.fromtimestamp(0, UTC)


def _read_grant(row: Mapping[str, Any]) -> Grant:
    """The grant a row holds.

    Raises:
        ValueError: its body does not read as a grant of this version (pydantic's `ValidationError` is
            one), or names another id than the row's.
    """
    grant = Grant.model_validate_json(row["body"])
    if grant.id != row["id"]:
        raise ValueError(f"its body is grant {grant.id!r}'s")
    return grant


def _why(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in error.errors())
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _record(db: Any, row: Any, at: datetime, *, lenient: bool = True) -> GrantRecord:
    """A grant row as a record; one that does not read is flagged `unreadable` (unless not `lenient`: then
    `JournalError`)."""
    try:
        grant, uses = _read_grant(row), int(row["uses"])
        revoked_at = None if row["revoked_at"] is None else db.from_db_time(row["revoked_at"])
    except Exception as error:  # any way a stored row can fail to read makes it unreadable, never wider
        why = (
            f"grant {row['id']!r} cannot be read: {_why(error)}. This version of agentkit does not apply it; a "
            "newer agentkit wrote it, or it was edited by hand or damaged: revoke it (agentkit grants revoke ID) "
            "or restore the row"
        )
        if not lenient:
            raise JournalError(why) from None
        return _unreadable(db, row, why)
    if revoked_at is not None:
        state = GrantState.REVOKED
    elif grant.expires_at is not None and at >= grant.expires_at:
        state = GrantState.EXPIRED
    elif grant.max_uses is not None and uses >= grant.max_uses:
        state = GrantState.SPENT
    else:
        state = GrantState.LIVE
    return GrantRecord(
        grant=grant,
        uses=uses,
        state=state,
        revoked_by=row["revoked_by"],
        revoked_at=revoked_at,
        revoked_because=row["revoked_because"],
    )


def _unreadable(db: Any, row: Any, why: str) -> GrantRecord:
    """The record of a row that does not read: what can be read of it, and a stand-in grant that approves nothing."""
    try:
        body = json.loads(row["body"])
    except Exception:
        body = None
    said = body if isinstance(body, dict) else {}

    def text(value: object) -> str:
        return value if isinstance(value, str) and value.strip() else "?"

    max_uses, uses = row["max_uses"], row["uses"]
    try:
        revoked_at = None if row["revoked_at"] is None else db.from_db_time(row["revoked_at"])
    except Exception:
        revoked_at = None
    stand_in = Grant(
        id=text(row["id"]),
        tool_name=text(row["tool_name"]),
        max_uses=max_uses if isinstance(max_uses, int) and not isinstance(max_uses, bool) and max_uses >= 1 else 1,
        expires_at=_EPOCH,
        granted_by=text(said.get("granted_by")),
        reason=text(said.get("reason")),
    )
    return GrantRecord(
        grant=stand_in,
        uses=uses if isinstance(uses, int) and not isinstance(uses, bool) else 0,
        # Revoked is known from its own column, and holds whatever the body says.
        state=GrantState.UNREADABLE if row["revoked_at"] is None else GrantState.REVOKED,
        revoked_by=row["revoked_by"],
        revoked_at=revoked_at,
        revoked_because=row["revoked_because"],
        unreadable=why,
    )


def apply_grants(db: Any, proposal_id: str, action: ProposedAction[Any], at: datetime) -> str | None:
    """Approve the just-recorded pending `proposal_id` by the first live grant that matches it; its actor, or
    `None` (no grant: it waits for a human). A grant row that does not read back approves nothing."""
    rows = db.query(
        "SELECT * FROM agentkit_grants WHERE tool_name = ? AND revoked_at IS NULL ORDER BY granted_at, id",
        (action.tool_name,),
    )
    for row in rows:
        try:
            grant = _read_grant(row)
        except ValueError:
            continue  # fail closed: a damaged grant approves nothing
        if not (grant.matches(action) and grant.live(at, int(row["uses"]))):
            continue
        used = db.execute(
            "UPDATE agentkit_grants SET uses = uses + 1 WHERE id = ? AND revoked_at IS NULL "
            "AND (max_uses IS NULL OR uses < max_uses)",
            (grant.id,),
        )
        if used != 1:
            continue  # another process used its last use meanwhile
        actor = grant_actor(grant.id)
        approved = db.execute(
            "UPDATE agentkit_proposals SET state = ?, approved_by = ?, approved_at = ? WHERE id = ? AND state = ?",
            (ProposalState.APPROVED.value, actor, db.to_db_time(at), proposal_id, ProposalState.PENDING.value),
        )
        if approved != 1:
            # A person decided it meanwhile (or it was not pending): the use is handed back, in this transaction.
            db.execute("UPDATE agentkit_grants SET uses = uses - 1 WHERE id = ?", (grant.id,))
            return None
        log_transition(db, proposal_id, ProposalState.PENDING, ProposalState.APPROVED, actor, at, grant.reason)
        return actor
    return None


def record_proposal(db: Any, action: ProposedAction[Any], actor: str, at: datetime) -> str:
    """`insert_proposal`, then, while the entry is pending, the first live grant that matches it approves it."""
    id = insert_proposal(db, action, actor, at)
    apply_grants(db, id, action, at)
    return id


class GrantBook(Storage):
    """The journal's grants: `grant`, `grants`, `revoke_grant`."""

    require_verified_approver: bool = False

    def _grant(self, grant: Grant) -> GrantRecord:
        at = now()
        with self._tx(write=True) as db:
            verified = vouched(db)
            if verified != grant.granted_by and (self.require_verified_approver or verification_required(db)):
                raise TransitionRefused(
                    f"cannot keep grant {grant.id!r} from {grant.granted_by!r}: this journal requires the granter to "
                    f"be the identity it can verify, {verified!r}; nothing was stored",
                    id=grant.id,
                    state="",
                )
            if db.query("SELECT id FROM agentkit_grants WHERE id = ?", (grant.id,)):
                raise JournalError(f"the journal at {self.where} already holds a grant {grant.id!r}; give a new id")
            db.execute(
                "INSERT INTO agentkit_grants (id, tool_name, body, max_uses, uses, granted_at) "
                "VALUES (?, ?, ?, ?, 0, ?)",
                (grant.id, grant.tool_name, grant.model_dump_json(), grant.max_uses, db.to_db_time(at)),
            )
            kept = _record(
                db, db.query("SELECT * FROM agentkit_grants WHERE id = ?", (grant.id,))[0], at, lenient=False
            )
            if kept.grant != grant:
                # Kept, it would approve what it reads back as, not what was given; the insert is rolled back.
                raise JournalError(
                    f"grant {grant.id!r} does not read back from the journal as given ({kept.grant!r}); nothing was "
                    "stored"
                )
            return kept

    def _grants(self) -> list[GrantRecord]:
        at = now()
        with self._tx(write=False) as db:
            rows = db.query("SELECT * FROM agentkit_grants ORDER BY granted_at, id", ())
            return [_record(db, row, at) for row in rows]

    def _revoke_grant(self, id: str, revoked_by: str, reason: str) -> GrantRecord:
        by, why, at = named(revoked_by, "revoked_by"), named(reason, "reason"), now()
        with self._tx(write=True) as db:
            rows = db.query("SELECT * FROM agentkit_grants WHERE id = ?", (id,))
            if not rows:
                raise UnknownId(
                    f"no grant {id!r} in the journal at {self.where}; list them with `agentkit grants list`", id=id
                )
            if rows[0]["revoked_at"] is not None:
                raise TransitionRefused(
                    f"grant {id!r} was already revoked by {rows[0]['revoked_by']}", id=id, state="revoked"
                )
            db.execute(
                "UPDATE agentkit_grants SET revoked_by = ?, revoked_at = ?, revoked_because = ? WHERE id = ?",
                (by, db.to_db_time(at), why, id),
            )
            return _record(db, db.query("SELECT * FROM agentkit_grants WHERE id = ?", (id,))[0], at)

    async def grant(self, grant: Grant, *, tool: AnyTool) -> GrantRecord:
        """Keep a standing grant: proposals recorded from now on that match it are approved by `grant:<id>`.

        Args:
            grant: The grant.
            tool: The tool it is for: the grant is checked against it (`Grant.check`) before it is kept.

        Raises:
            UsageError: the grant does not fit `tool` (another tool, a field its args type lacks, an
                irreversible tool without `allow_irreversible`); nothing is stored.
            JournalError: the journal already holds a grant of that id.
        """
        grant.check(tool)
        return await self._call(self._grant, grant)

    async def grants(self) -> list[GrantRecord]:
        """Every grant, oldest first, with its uses and state; a row that does not read as a grant is listed
        with state `UNREADABLE` (or `REVOKED`) and why in `unreadable`, and approves nothing."""
        return await self._read(self._grants)

    async def revoke_grant(self, id: str, revoked_by: str, reason: str) -> GrantRecord:
        """Stop a grant approving anything (proposals it already approved stay approved).

        Raises:
            UnknownId: no such grant. TransitionRefused: it was already revoked; nothing changed.
        """
        return await self._call(self._revoke_grant, id, revoked_by, reason)
