"""`journal.resume`: continue a recorded run from its latest checkpoint, with the inbox's decisions.

Everything is read and checked before the run is held: a refused resume holds nothing and runs
nothing. Then the run is held with a lease (renewed while it runs, as a proposal's claim is), so
of two processes resuming it one wins; approved calls run through `execute`'s claim, so each
runs once whoever else tries; and a `JournalObserver` of this journal records the continued run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentkit._approval import Amendment, Approval, Rejection
from agentkit._codec import Codec, decoded_args
from agentkit._observe import ObserverArg
from agentkit._proposals import ProposedAction
from agentkit._runner import ToolLoop, pending_proposals
from agentkit._state import RoundEntry, RunCheckpoint
from agentkit._tools import AnyTool, ContextTool, Tool
from agentkit.errors import ResumeRefused, ToolError, TransitionRefused
from agentkit.journal._records import ProposalRecord, ProposalState, RunStatus
from agentkit.journal._runs import held
from agentkit.journal._sql import CLAIMED_STATES
from agentkit.journal.observer import JournalObserver

if TYPE_CHECKING:
    from agentkit._agent import ToolAgent
    from agentkit._options import ResumeOptions
    from agentkit._results import TieredLoopResult
    from agentkit._structured import StructuredCaller
    from agentkit.journal import Journal

__all__ = ["resume"]


async def resume(
    journal: Journal,
    run_id: str,
    caller: StructuredCaller,
    agent: ToolAgent[Any, Any, Any],
    tools: Tool[Any, Any] | ContextTool[Any, Any, Any] | Sequence[Tool[Any, Any] | ContextTool[Any, Any, Any]],
    ctx: object,
    options: ResumeOptions[Any, Any],
    *,
    worker: str,
    lease: timedelta,
) -> TieredLoopResult[Any, Any, Any]:
    """`Journal.resume`'s body (documented there)."""
    record, checkpoint, proposals = await journal._read(journal._resume_state, run_id)
    if record.status is RunStatus.RUNNING:
        raise held(run_id, record.claimed_by, record.lease_until)
    if checkpoint is None:
        raise ResumeRefused(
            f"run {run_id!r} has no state in the journal at {journal.where} ({record.status.value}): it was not a "
            "tool loop, or it was recorded without a JournalObserver; nothing ran"
        )
    decisions, ids = _decisions(run_id, checkpoint, proposals, Codec(_by_name(tools)))
    # The recorder of the resumed leg holds the run, with its own lease mechanism (as it holds a first leg).
    recorder = JournalObserver(journal, lease=lease, holder=worker)

    async def run_approved(approval: Approval[Any], tool: Tool[Any, Any], ctx: Any) -> Sequence[Any] | Rejection[Any]:
        id = ids[approval.id]
        return await _run_approved(
            journal, approval, id, tool, ctx, worker=worker, lease=lease, observer=options.get("observer")
        )

    loop = ToolLoop._wired(caller, agent, tools, None, options, grants=options.get("grants"))
    prepared = loop.prepared(
        checkpoint,
        decisions,
        summarize=options.get("summarize"),
        run_id=run_id,
        run_approved=run_approved,
        observers=(recorder,),
    )
    token = recorder._holds.token
    try:
        await journal._call(journal._claim_run, run_id, checkpoint.digest, worker, token, lease)
        recorder._holds.add(run_id)
        result: TieredLoopResult[Any, Any, Any] = await prepared(ctx)
        return result
    finally:
        # The run's end released the hold; a run left by an exception releases it here (best effort:
        # otherwise its lease runs out).
        with suppress(Exception):  # the database is gone: the lease runs out instead
            await journal._call(journal._release_run, run_id, token)
        await asyncio.to_thread(recorder.close)


def _by_name(tools: AnyTool | Sequence[AnyTool]) -> dict[str, AnyTool]:
    if callable(getattr(tools, "call", None)):
        single: AnyTool = tools  # type: ignore[assignment]  # a Tool, as the check above shows
        return {single.name: single}
    return {t.name: t for t in tools}  # type: ignore[union-attr]  # a sequence; Toolbox refuses anything else


def _decisions(
    run_id: str, checkpoint: RunCheckpoint, proposals: list[ProposalRecord], codec: Codec
) -> tuple[list[Approval[Any] | Rejection[Any]], dict[str, str]]:
    """Each pending proposal's decision as recorded in the inbox, and each approval's inbox id."""
    decisions: list[Approval[Any] | Rejection[Any]] = []
    ids: dict[str, str] = {}
    for wanted, action in pending_proposals(checkpoint, codec):
        record = _entry(run_id, wanted, proposals)
        match record.state:
            case ProposalState.PENDING:
                raise ResumeRefused(
                    f"run {run_id!r} waits on a decision: proposal {record.id} ({record.tool_name} "
                    f"{record.args_json}, round {record.round}{_shared(run_id, record)}) is pending. Decide it with "
                    "`agentkit proposals "
                    f"approve {record.id} --by NAME` or `agentkit proposals reject {record.id} --by NAME --reason "
                    "TEXT`, then resume; nothing ran"
                )
            case ProposalState.EXECUTING:
                raise ResumeRefused(
                    f"run {run_id!r}: its approved proposal {record.id} ({record.tool_name}"
                    f"{_shared(run_id, record)}) is executing, claimed by "
                    f"{record.claimed_by}; resume once it finished, or, if that process is gone, resolve it "
                    f"(`agentkit proposals resolve {record.id} ...`); nothing ran"
                )
            case ProposalState.REJECTED:
                decisions.append(
                    Rejection(
                        proposal=action,
                        rejected_by=record.rejected_by or "",
                        digest=record.digest,
                        reason=record.reason or "",
                    )
                )
            case ProposalState.APPROVED | ProposalState.EXECUTED | ProposalState.FAILED:
                # Approved: it runs through the journal's claim; executed or failed: a worker (or a resumer
                # that died after) ran it, and its recorded outcome is the call's result.
                approval = _approval_of(record, action, codec)
                ids[approval.id] = record.id
                decisions.append(approval)
    return decisions, ids


def _shared(run_id: str, record: ProposalRecord) -> str:
    """How a refusal names an entry a fork shares with the run it was forked from (nothing for the run's own)."""
    return "" if record.run_id == run_id else f", shared with run {record.run_id!r} it was forked from"


def _approval_of(record: ProposalRecord, action: ProposedAction[Any], codec: Codec) -> Approval[Any]:
    """The inbox's approval of `action`: of the amended call, with its lineage, when the approver amended it."""
    by = record.approved_by or ""
    if record.original_digest is None:
        return Approval(proposal=action, approved_by=by, digest=record.digest)
    args = decoded_args(codec, record.tool_name, record.args_json)
    call = action.model_copy(update={"args": args, "digest": record.digest})
    amendment = Amendment(original=action, amended_by=record.amended_by or by, fields=record.amended_fields)
    return Approval(proposal=call, approved_by=by, digest=record.digest, amendment=amendment)


def _entry(run_id: str, wanted: RoundEntry, proposals: list[ProposalRecord]) -> ProposalRecord:
    """The inbox entry of a checkpoint's proposal: the open one, else the latest."""
    # An amended entry holds the amended call; the call the run proposed is its original.
    same = [p for p in proposals if p.round == wanted.round and wanted.call_digest in (p.digest, p.original_digest)]
    if not same:
        raise ResumeRefused(
            f"run {run_id!r}: its proposed call to {wanted.tool}!r in round {wanted.round} (digest "
            f"{(wanted.call_digest or '')[:12]}) is not in the inbox, so it cannot have been decided; record it with "
            "journal.propose(...) and decide it; nothing ran"
        )
    open_ones = [p for p in same if p.state in (ProposalState.PENDING, ProposalState.APPROVED, ProposalState.EXECUTING)]
    chosen = (open_ones or same)[-1]
    # The entries are the run's and, for a fork, those it shares with the runs it was forked from. A fork made by
    # an earlier agentkit has an entry of its own for a call it shares: should that call have been claimed or
    # run under another run's entry, that is the call's outcome, and the fork's own entry never runs it again.
    ran = [p for p in same if p.run_id != chosen.run_id and p.state in CLAIMED_STATES]
    return ran[-1] if ran and chosen.state not in CLAIMED_STATES else chosen


async def _run_approved(
    journal: Journal,
    approval: Approval[Any],
    id: str,
    tool: Tool[Any, Any],
    ctx: Any,
    *,
    worker: str,
    lease: timedelta,
    observer: ObserverArg,
) -> Sequence[Any] | Rejection[Any]:
    """What became of the approved call: its batch (run now through the claim, or as recorded when it already
    ran), or the rejection it got instead.

    The run read the inbox before it was held; since then a worker may have claimed the call (its outcome is
    awaited while the worker's claim is live, then read as recorded) or a human rejected it (the run settles
    the rejection). Either way the run goes on with what was decided.
    """
    refused: TransitionRefused | None = None
    for pause in _polls():
        record = await journal.get(id)
        match record.state:
            case ProposalState.APPROVED if refused is None:
                try:
                    execution = await journal.execute(id, tool, ctx=ctx, worker=worker, lease=lease, observer=observer)
                except TransitionRefused as moved:  # claimed or decided between the read and the claim
                    refused = moved
                    continue
                if execution.error is not None:
                    raise execution.error
                return execution.batch
            case ProposalState.EXECUTING:
                _check_live(record, tool)
                await asyncio.sleep(pause)
            case ProposalState.EXECUTED:
                return _recorded_batch(record, tool)
            case ProposalState.FAILED:
                raise ToolError(
                    f"the approved call to {tool.name!r} (proposal {id}) failed: {record.error}", tool_name=tool.name
                )
            case ProposalState.REJECTED:
                return Rejection(
                    proposal=approval.proposal,
                    rejected_by=record.rejected_by or "",
                    digest=record.digest,
                    reason=record.reason or "",
                )
            case _:  # pending (never, once approved), or approved again after the claim was refused
                raise refused or TransitionRefused(
                    f"proposal {id!r} is {record.state.value} now; it was decided otherwise while the run resumed",
                    id=id,
                    state=record.state.value,
                )
    raise AssertionError("unreachable: _polls never ends")


def _polls() -> Iterator[float]:
    """Pauses between reads of a call another worker runs: 50 ms at first, doubling, at most 1 s."""
    pause = 0.05
    while True:
        yield pause
        pause = min(pause * 2, 1.0)


def _check_live(record: ProposalRecord, tool: Tool[Any, Any]) -> None:
    """A call another worker runs is awaited while that worker's claim is live; once its lease ran out, the
    worker is gone and the call's outcome unknown: the run ends on it (resolve the proposal)."""
    if record.lease_until is not None and record.lease_until < datetime.now(UTC):
        raise ToolError(
            f"the approved call to {tool.name!r} (proposal {record.id}) was claimed by {record.claimed_by}, whose "
            f"lease ran out at {record.lease_until.isoformat()} before it recorded an outcome: whether it ran is "
            f"unknown; check, then `agentkit proposals resolve {record.id} ...`",
            tool_name=tool.name,
        )


def _recorded_batch(record: ProposalRecord, tool: Tool[Any, Any]) -> Sequence[Any]:
    try:
        return Codec({tool.name: tool}).decode_batch(tool.name, record.batch_json or "[]")
    except (ValueError, ValidationError) as invalid:
        raise ToolError(
            f"proposal {record.id!r} was executed, but its recorded batch does not read back as {tool.name!r}'s "
            f"items: {invalid}",
            tool_name=tool.name,
        ) from invalid
