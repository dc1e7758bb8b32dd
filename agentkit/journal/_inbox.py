"""The inbox: proposals put in, decided by people, listed, with the history of every change.

Every change is one transaction that checks the proposal's state first (`_move`): a change the
state does not allow raises `TransitionRefused` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from agentkit._proposals import ProposedAction
from agentkit.errors import TransitionRefused
from agentkit.journal._amend import amendment_sets
from agentkit.journal._grants import record_proposal
from agentkit.journal._records import ProposalRecord, ProposalState, Transition
from agentkit.journal._sql import (
    VERIFIED_APPROVER,
    log_transition,
    now,
    proposal_of,
    transition_of,
    verification_required,
    vouched,
)
from agentkit.journal._storage import Storage, check_limit, named

__all__ = ["AT", "HINTS", "Inbox"]

HINTS = {
    ProposalState.PENDING: "a human must approve it first",
    ProposalState.APPROVED: "it is approved and waits for a worker to execute it",
    ProposalState.REJECTED: "it was rejected, which is final; propose the call again if it is still wanted",
    ProposalState.EXECUTING: (
        "a worker claimed it; once you confirmed that worker is gone (claimed_by) and its lease ran out (it shows "
        "in stuck()), resolve() it"
    ),
    ProposalState.EXECUTED: "it was executed, which is final",
    ProposalState.FAILED: "its execution failed, which is final; propose the call again to retry",
}

Amended = BaseModel | Mapping[str, Any] | None
"""Amended args for `approve`: a value of the tool's args type, a mapping of the fields to change, or none."""

AT = object()
"""Placeholder in `_move`'s assignments for "the time of this transition"."""


class Inbox(Storage):
    """Proposals and the decisions people make on them."""

    require_verified_approver: bool = False
    """Refuse a person's decision (approve, reject, resolve) whose name is not the identity the journal
    can vouch for (`vouched`, or `verified_as`); nothing changes."""

    def _get(self, id: str) -> ProposalRecord:
        with self._tx(write=False) as db:
            return self._fetch(db, id)

    def _proposals(self, *, state: ProposalState | None = None, limit: int | None = None) -> list[ProposalRecord]:
        if limit is not None:
            check_limit(limit)
        sql = "SELECT * FROM agentkit_proposals"
        params: list[object] = []
        if state is not None:
            sql += " WHERE state = ?"
            params.append(ProposalState(state).value)
        sql += " ORDER BY proposed_at, id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._tx(write=False) as db:
            return [proposal_of(db, row, lenient=True) for row in db.query(sql, params)]

    def _inbox_stamp(self) -> str:
        """Text that changes whenever a proposal is put in or changes state, however many the journal holds:
        the count of transitions (each change logs one, none is ever deleted; a count, not the newest id,
        which PostgreSQL may commit out of order)."""
        with self._tx(write=False) as db:
            [row] = db.query("SELECT COUNT(*) AS changes FROM agentkit_transitions")
        return str(row["changes"])

    def _decided(self, limit: int) -> list[ProposalRecord]:
        """The `limit` proposals no longer pending that were proposed last, newest first."""
        check_limit(limit)
        with self._tx(write=False) as db:
            rows = db.query(
                "SELECT * FROM agentkit_proposals WHERE state <> ? ORDER BY proposed_at DESC, id DESC LIMIT ?",
                (ProposalState.PENDING.value, limit),
            )
            return [proposal_of(db, row, lenient=True) for row in rows]

    def _history(self, id: str) -> list[Transition]:
        with self._tx(write=False) as db:
            self._fetch(db, id)
            rows = db.query("SELECT * FROM agentkit_transitions WHERE proposal_id = ? ORDER BY id", (id,))
            return [transition_of(db, row) for row in rows]

    def _move(
        self,
        id: str,
        verb: str,
        allowed: tuple[ProposalState, ...],
        after: ProposalState,
        actor: str,
        note: str,
        sets: Mapping[str, object],
        verified_as: str | None = None,
        guard: Callable[[ProposalRecord], None] | None = None,
    ) -> ProposalRecord:
        """One change of state, checked and written in one transaction.

        `guard` refuses the change (by raising) on more than the state; the row is then read locked,
        so on PostgreSQL nothing changes it between the guard's check and the write.
        """
        at = now()
        with self._tx(write=True) as db:
            verified = verified_as or vouched(db)
            if verified != actor and (self.require_verified_approver or verification_required(db)):
                raise TransitionRefused(
                    f"cannot {verb} proposal {id!r} as {actor!r}: this journal requires the name given to be the "
                    f"identity it can verify, {verified!r} (require_verified_approver); nothing changed",
                    id=id,
                    state="",
                )
            record = self._fetch(db, id, lock=guard is not None)
            before = record.state
            if before not in allowed:
                states = " or ".join(s.value for s in allowed)
                raise TransitionRefused(
                    f"cannot {verb} proposal {id!r}: it is {before.value}, and only a {states} proposal can be "
                    f"{verb.removesuffix('e')}ed; {HINTS[before]}",
                    id=id,
                    state=before.value,
                )
            if guard is not None:
                guard(record)
            values = {name: db.to_db_time(at) if value is AT else value for name, value in sets.items()}
            assignments = "".join(f", {name} = ?" for name in values)
            changed = db.execute(
                f"UPDATE agentkit_proposals SET state = ?{assignments} WHERE id = ? AND state = ?",
                (after.value, *values.values(), id, before.value),
            )
            if changed != 1:
                raise TransitionRefused(
                    f"cannot {verb} proposal {id!r}: it changed meanwhile; look again", id=id, state=""
                )
            log_transition(db, id, before, after, actor, at, note, verified)
            return self._fetch(db, id)

    def _approve(
        self, id: str, approved_by: str, args: Amended, args_type: type[BaseModel] | None, verified_as: str | None
    ) -> ProposalRecord:
        by = named(approved_by, "approved_by")
        sets: dict[str, object] = {"approved_by": by, "approved_at": AT}
        note = ""
        if args is not None:
            record = self._get(id)
            if record.state is ProposalState.PENDING:
                # Validated before the transaction; the move then checks it is still pending, and only
                # leaving pending changes a proposal's args, so they are the args amended here.
                amendment, fields = amendment_sets(record, args, args_type, by)
                sets |= amendment
                note = f"amended: {', '.join(fields)}" if fields else ""
        return self._move(id, "approve", (ProposalState.PENDING,), ProposalState.APPROVED, by, note, sets, verified_as)

    def _reject(self, id: str, rejected_by: str, reason: str, verified_as: str | None = None) -> ProposalRecord:
        by, why = named(rejected_by, "rejected_by"), named(reason, "reason")
        sets = {"rejected_by": by, "rejected_at": AT, "reason": why}
        allowed = (ProposalState.PENDING, ProposalState.APPROVED)
        return self._move(id, "reject", allowed, ProposalState.REJECTED, by, why, sets, verified_as)

    def _propose(self, action: ProposedAction[Any], *, proposed_by: str = "") -> ProposalRecord:
        actor = proposed_by or (f"run:{action.run_id}" if action.run_id else "api")
        with self._tx(write=True) as db:
            return self._fetch(db, record_proposal(db, action, actor, now()))

    def _set_required(self, required: bool) -> None:
        with self._tx(write=True) as db:
            db.execute("DELETE FROM agentkit_settings WHERE name = ?", (VERIFIED_APPROVER,))
            if required:
                db.execute("INSERT INTO agentkit_settings (name, value) VALUES (?, 'on')", (VERIFIED_APPROVER,))

    async def require_verified_approvers(self, required: bool = True) -> None:
        """Make every client of this journal refuse a person's decision whose name is not the identity the
        journal can vouch for (`Transition.verified`); kept in the journal, so a client cannot skip it
        by leaving `require_verified_approver` off. `False` lifts it."""
        await self._call(self._set_required, required)

    def _required(self) -> bool:
        with self._tx(write=False) as db:
            return verification_required(db)

    async def verified_approvers_required(self) -> bool:
        """Whether the journal itself requires a person's decision to name the identity it can vouch for
        (`require_verified_approvers`; `agentkit journal settings` shows it). A client's own
        `require_verified_approver` is not counted."""
        return await self._call(self._required)

    async def propose(self, action: ProposedAction[Any], *, proposed_by: str = "") -> ProposalRecord:
        """Put a proposal in the inbox as `pending`.

        The same call (run, round, digest) proposed while its entry is still open (pending, approved
        or executing) gives that entry back; after it was rejected, executed or failed it is a new
        pending entry that needs its own approval.
        """
        return await self._call(self._propose, action, proposed_by=proposed_by)

    async def get(self, id: str) -> ProposalRecord:
        """The proposal with that id; `UnknownId` if there is none."""
        return await self._read(self._get, id)

    async def pending(self) -> list[ProposalRecord]:
        """Proposals waiting for a human, oldest first."""
        return await self._read(self._proposals, state=ProposalState.PENDING)

    async def proposals(self, *, state: ProposalState | None = None, limit: int | None = None) -> list[ProposalRecord]:
        """Proposals (in one state, if given), oldest first."""
        return await self._read(self._proposals, state=state, limit=limit)

    async def history(self, id: str) -> list[Transition]:
        """Every state change of the proposal, in order, with who and when."""
        return await self._read(self._history, id)

    async def approve(
        self,
        id: str,
        approved_by: str,
        *,
        args: BaseModel | Mapping[str, Any] | None = None,
        args_type: type[BaseModel] | None = None,
        verified_as: str | None = None,
    ) -> ProposalRecord:
        """pending -> approved; any other state raises `TransitionRefused` and changes nothing.

        Args:
            id: The proposal.
            approved_by: Who approves.
            args: Amended args: a value of the tool's args type, or a mapping of the fields to change
                (merged over the proposed args). The entry then holds the amended call, with its own
                digest (the one a worker checks and runs), and its lineage: `original_args_json`,
                `original_digest`, `amended_by` and `amended_fields`. Args equal to the proposed
                ones approve the call as proposed.
            args_type: The tool's args type, to validate a mapping as; by default the type the call was
                proposed as (`ProposalRecord.args_type`), imported.
            verified_as: Who an authenticating front end (the web inbox, by its reviewer's token) vouches is
                deciding; by default the journal's own (`session_user`, or the OS user with SQLite). The
                transition records it beside `approved_by` (`Transition.verified`).

        Raises:
            TransitionRefused: the proposal is not pending (amending a decided proposal included), or the
                journal requires a verified approver and `approved_by` is not the verified identity.
            ApprovalError: the amended args name a field the args type lacks, do not validate as it, or
                the args type cannot be imported or is not the call's. Nothing changed.
        """
        return await self._call(self._approve, id, approved_by, args, args_type, verified_as)

    async def reject(self, id: str, rejected_by: str, reason: str, *, verified_as: str | None = None) -> ProposalRecord:
        """pending or approved -> rejected (final); `verified_as` as for `approve`."""
        return await self._call(self._reject, id, rejected_by, reason, verified_as)
