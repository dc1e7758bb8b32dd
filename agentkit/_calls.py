"""The calls of one step, when a step may carry several (`LoopConfig.max_calls_per_step` above 1).

Each call is checked on its own, in the step's order, as a one-call step's call is: the repeat guard
(a call that repeats an earlier call of the same step counts as a repeat), then its tier. A call above
the autonomy ceiling becomes a proposal; a call that runs live joins the calls run together. The step
holds one proposal per distinct gated call: the same gated call again (same tool and args, so the same
key, `ProposedAction.digest`; a repeat-exempt tool's, say, which the guard lets through) is its
duplicate, recorded as a refused repeat and not run, and the executor is told which call answers it.

Once every call is checked and none ended the run, the gated calls are settled in the step's order: each
is asked of the standing grants just before it would run (a grant's use is counted only for a call that
runs), a granted call runs once, and the others wait as proposals. Then the live calls run concurrently,
at most `LoopConfig.max_parallel_calls` at once, each under its own `tool_timeout`; a `ToolRetry` is that
call's observation, as ever. Each call's entry is appended to the state, and the state handed to the
observers that keep it (the journal), as soon as the call is through, so a run that dies mid-step
resumes without running a finished call again; the entries carry their place in the step
(`RoundEntry.position`), and the calls join the views (what the executor, the observers and the
items see) in the step's order once the step is through, as a resumed run reads them (`fold`).

A call that ends the run (a stalemate under `RepeatPolicy.STOP`, a call not allowed live, a tool that
fails) ends it. One that ends it as it is checked ends it before anything of the step runs: the gated
calls checked before it are left proposals, no grant asked. A granted call that fails leaves the gated
calls after it proposals, and no live call runs; a failure while the live calls run cancels the calls
still running, and keeps the batches of those that finished. A proposal under `AfterProposal.STOP` ends
the run after the granted and live calls of its step ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from agentkit._agent import PriorCall
from agentkit._config import AfterProposal, RepeatPolicy
from agentkit._copy import owned
from agentkit._degeneration import repeat_of
from agentkit._events import DegenerationDetected, ProposalCaptured
from agentkit._invoke import missing_tier
from agentkit._outcome import Ending, Outcome, StopReason
from agentkit._proposals import ProposedAction, call_digest, finite
from agentkit._provenance import with_provenance
from agentkit._session import executor_failed
from agentkit._state import RoundOutcome
from agentkit._toolbox import gate
from agentkit._tools import Tool, declared_tier
from agentkit.errors import ToolError

if TYPE_CHECKING:
    from agentkit._loop import _Round, _Run
    from agentkit._tiers import Tier

__all__ = ["PROPOSED_NOTE", "check_repeat", "propose", "refuse", "run_calls", "take_calls"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Live:
    """A call of the step that runs live."""

    this: _Round
    tool: Tool[Any, Any]
    tier: Tier
    args: BaseModel


@dataclasses.dataclass(frozen=True, slots=True)
class _Gated:
    """A call of the step above the autonomy ceiling, with its proposal (made as the call was checked)."""

    this: _Round
    tool: Tool[Any, Any]
    tier: Tier
    args: BaseModel
    proposal: ProposedAction[Any]


async def take_calls(run: _Run, this: _Round, calls: Sequence[BaseModel]) -> Ending | None:
    """The step's calls: one, as a one-call step's is taken (check for a repeat, gate by tier, dispatch), or
    several (`run_calls`); the ending of the run, if they end it."""
    if run.box.max_calls > 1:
        return await run_calls(run, this, calls)
    tool, args = run.box.resolve(calls[0])
    # A repeat refused under RepeatPolicy.REFUSE is neither None nor an Ending: the run goes on.
    ending = check_repeat(run, this, tool, args)
    if ending is None:
        match gate(tool, run.config, run.provenance):
            case "run", tier:
                ending = await run.dispatch(this, tool, tier, args)
            case "propose", tier:
                ending = await propose(run, this, tool, tier, args)
            case _:
                ending = refuse(run, this, tool, args)
    return ending if isinstance(ending, Ending) else None


async def run_calls(run: _Run, this: _Round, calls: Sequence[BaseModel]) -> Ending | None:
    """Check, propose and run the calls of one step; the ending of the run, if one of them ends it.

    `None`: the run goes on (each call recorded, and joined the views in the step's order).
    """
    traced = len(run.trace)
    run.deferred = []
    try:
        ending = await _checked_and_run(run, this, calls)
    finally:
        shown, run.deferred = sorted(run.deferred, key=lambda joined: joined[0]), None
        for _, call, how in shown:
            run.views.called(call, **how)
        # The trace too, in the step's order (its records were appended as each call was through).
        records = run.trace[traced:]
        records.sort(key=lambda record: _place(record.call, calls))
        run.trace[traced:] = records
    return ending


def _place(args: BaseModel | None, calls: Sequence[BaseModel]) -> int:
    """The place in the step of the call whose args are `args`: the very object the step holds, else (a
    granted call's record carries its proposal's copy) the first call whose args equal them."""
    for place, call in enumerate(calls):
        if getattr(call, "args", call) is args:
            return place
    for place, call in enumerate(calls):
        if args is not None and getattr(call, "args", call) == args:
            return place
    return len(calls)


async def _checked_and_run(run: _Run, this: _Round, calls: Sequence[BaseModel]) -> Ending | None:
    live: list[_Live] = []
    gated: dict[str, _Gated] = {}
    """The step's gated calls by digest, in the step's order: one proposal (one key) per distinct call."""
    for place, call in enumerate(calls):
        one = dataclasses.replace(this, position=place)
        tool, args = run.box.resolve(call)
        if (ending := _checked(run, one, tool, args, live, gated)) is not None:
            # Nothing ran, and no grant was asked: the gated calls checked before are left proposals.
            for left in gated.values():
                _pending(run, left)
            return ending
    ending, stop = await _settled(run, list(gated.values()))
    if ending is not None:
        return ending
    ending = await _run_live(run, live)
    return ending if ending is not None else stop


def _checked(
    run: _Run, this: _Round, tool: Tool[Any, Any], args: BaseModel, live: list[_Live], gated: dict[str, _Gated]
) -> Ending | None:
    """Check one call of the step: a live call joins `live`, a gated one `gated` (the same gated call again is its
    duplicate, `_duplicate`); the ending of the run, if the call ends it."""
    checked = check_repeat(run, this, tool, args, counts=False)
    if isinstance(checked, Ending):
        return checked
    if checked is not None:  # a repeat refused (RepeatPolicy.REFUSE): the step goes on
        return None
    match gate(tool, run.config, run.provenance):
        case "run", tier:
            live.append(_Live(this, tool, tier, args))
        case "propose", tier:
            if (held := _not_allowed(run, this, tool, tier, args) or _unfit(run, this, tool, tier, args)) is not None:
                return held
            first = gated.get(call_digest(tool.name, args))
            if first is not None:
                _duplicate(run, this, tool, tier, args, first)
                return None
            proposal = _proposal(run, this, tool, tier, args)
            gated[proposal.digest] = _Gated(this, tool, tier, args, proposal)
        case _:
            return refuse(run, this, tool, args)
    run.views.counted(tool.name, args, this.round)
    return None


def _duplicate(run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel, first: _Gated) -> None:
    """A gated call the step already holds (same tool, same args: the same key, `ProposedAction.digest`): not
    proposed again, nor granted, nor run; recorded as a refused repeat of its round, and the executor told which
    call of the step answers it. One approval so runs the call once, and no decision is left without a proposal."""
    position = (first.this.position or 0) + 1
    note = f"not run: it repeats call {position} of this step, which was proposed for approval; that call answers it"
    _refused(run, this, tool, tier, args, note, repeats=this.round)


def _refused(
    run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier | None, args: BaseModel, note: str, *, repeats: int
) -> None:
    """Record a call refused as a repeat of round `repeats` (not run; the executor is told `note`), and count it
    as the state reads a refused entry back (`fold`)."""
    run.views.refusals += 1
    told: PriorCall[Any] = PriorCall(
        round=this.round, tool_name=tool.name, args=args, observation=note, repeats=repeats
    )
    entry = run.record(
        this, RoundOutcome.REFUSED, tool=tool.name, args=args, tier=tier, observation=note, repeats=repeats
    )
    run.show(this, told, ran=False, args=entry.args)


async def _settled(run: _Run, gated: Sequence[_Gated]) -> tuple[Ending | None, Ending | None]:
    """The step's gated calls, once every call is checked and none ended the run, in the step's order: each is
    asked of the standing grants only now, just before it would run, so a grant's use is counted for a call that
    runs. A granted call runs at once (before the live calls); one that ends the run leaves the gated calls after
    it proposals, no grant asked. The ending of the run, if a granted call ends it, and the stop under
    `AfterProposal.STOP`, if a call is proposed."""
    stop: Ending | None = None
    for index, call in enumerate(gated):
        grant = await run.bound.grant_for(call.proposal)
        if grant is None:
            stop = _pending(run, call) or stop
            continue
        if (ending := await run.granted(call.this, call.proposal, grant)) is not None:
            for left in gated[index + 1 :]:
                _pending(run, left)
            return ending, stop
        run.kept()  # the journal keeps the granted call's result now
    return None, stop


async def _run_live(run: _Run, live: Sequence[_Live]) -> Ending | None:
    """Run the live calls concurrently (at most `max_parallel_calls` at once); the first ending, in the step's
    order among those through together, cancels the calls still running."""
    if not live:
        return None
    import asyncio  # here: `import agentkit` stays light (tests/package)

    limit = asyncio.Semaphore(run.config.max_parallel_calls or len(live))

    async def one(call: _Live) -> Ending | None:
        async with limit:
            ending = await run.dispatch(call.this, call.tool, call.tier, call.args)
        if ending is None:
            run.kept()  # the journal keeps the call now: a crash later in the step does not run it again
        return ending

    tasks = [asyncio.create_task(one(call)) for call in live]
    waiting: set[asyncio.Task[Ending | None]] = set(tasks)
    try:
        while waiting:
            through, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            endings = [ending for task in tasks if task in through and (ending := task.result()) is not None]
            if endings:
                return endings[0]
        return None
    finally:
        # In the step's order, not the set's: on Temporal each cancellation is a command of the workflow's history.
        still = [task for task in tasks if task in waiting]
        for task in still:
            task.cancel()
        if still:
            await asyncio.gather(*still, return_exceptions=True)


PROPOSED_NOTE = "proposed for human approval; not executed"


def check_repeat(
    run: _Run, this: _Round, tool: Tool[Any, Any], args: BaseModel, *, counts: bool = True
) -> Ending | Literal["refused"] | None:
    """The repeat guard on one call: `None` (it counts, and may run), `"refused"` (not run, under
    `RepeatPolicy.REFUSE`: the executor is told which round answers it) or the ending of the run (a stalemate,
    or the comparator that raised). `counts=False`: a call it lets through does not join the repeat window here
    (the caller adds it, once it knows the call is not a duplicate)."""
    if tool.name in run.config.repeat_exempt:
        if counts:
            run.views.counted(tool.name, args, this.round)
        return None
    try:
        index = repeat_of(tool.name, args, run.views.recent, run.bound.same, run.config.degeneration_window)
    except Exception as raised:
        error = executor_failed("repeat comparator (same=)", raised)
        run.record(this, RoundOutcome.ENDED, tool=tool.name, args=args, tier=declared_tier(tool), error=str(error))
        return Ending(Outcome.ERROR, StopReason.EXECUTOR_ERROR, error)
    if index is not None:
        refuse = run.config.on_repeat is RepeatPolicy.REFUSE and run.views.refusals < run.config.repeat_refusals
        if run.session.observers:
            copied = owned(args)
            event = DegenerationDetected(
                run_id=run.session.run_id, round=this.round, tool_name=tool.name, args=copied, refused=refuse
            )
            run.session.emit(event)
        if refuse:
            # Not run; the executor is told which earlier round's results answer it.
            earlier = run.views.recent_rounds[index]
            note = f"not run: it repeats the call of round {earlier}; that round's results answer it"
            _refused(run, this, tool, declared_tier(tool), args, note, repeats=earlier)
            return "refused"
        run.record(this, RoundOutcome.ENDED, tool=tool.name, args=args, tier=declared_tier(tool))
        earlier = run.views.recent_rounds[index]
        run.repeated = PriorCall(round=this.round, tool_name=tool.name, args=args, repeats=earlier)
        return Ending(Outcome.STALEMATE, StopReason.DEGENERATION)
    if counts:
        run.views.counted(tool.name, args, this.round)
    return None


def refuse(run: _Run, this: _Round, tool: Tool[Any, Any], args: BaseModel) -> Ending:
    """A call of a tool that declares no tier: never run; the run ends in an error."""
    error = missing_tier(tool.name)
    run.record(this, RoundOutcome.ENDED, tool=tool.name, args=args, error=str(error))
    return Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, error)


async def propose(run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
    """A call above the autonomy ceiling (or held by the provenance policy): a proposal, never run here (a
    standing grant may approve it: it then runs once); the ending of the run, if it stops there."""
    if (held := _not_allowed(run, this, tool, tier, args) or _unfit(run, this, tool, tier, args)) is not None:
        return held
    proposal = _proposal(run, this, tool, tier, args)
    grant = await run.bound.grant_for(proposal)
    if grant is not None:
        return await run.granted(this, proposal, grant)
    return _pending(run, _Gated(this, tool, tier, args, proposal))


def _not_allowed(run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
    """A gated call in a loop that cannot propose (`run_tool_loop`): the run ends in an error; else `None`."""
    if run.bound.may_propose:
        return None
    why = f"under autonomy Tier.{run.config.autonomy.name}"
    if run.provenance.held(tool, tier):
        why = "once untrusted content has entered the run (LoopConfig.provenance)"
    error = ToolError(
        f"tool {tool.name!r} (Tier.{tier.name}) cannot run live {why}; use run_tool_loop_tiered for tools "
        "that need approval",
        tool_name=tool.name,
    )
    run.record(this, RoundOutcome.ENDED, tool=tool.name, args=args, tier=tier, error=str(error))
    return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)


def _unfit(run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
    """A gated call whose args hold NaN or Infinity (a model's JSON may): no proposal can carry it (it is stored,
    shown and approved as JSON, which has no such number), so the run ends in an error, never proposed nor run,
    with what it gathered; else `None`."""
    if finite(args.model_dump(mode="json")):
        return None
    error = ToolError(
        f"the call to {tool.name!r} (Tier.{tier.name}) was not proposed: its args hold NaN or Infinity, which a "
        "proposal cannot carry (JSON has no such number)",
        tool_name=tool.name,
    )
    run.record(this, RoundOutcome.ENDED, tool=tool.name, args=args, tier=tier, error=str(error))
    return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)


def _proposal(run: _Run, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> ProposedAction[Any]:
    """The call's proposal, with what the executor had seen (its evidence); nothing recorded yet."""
    # The proposal gets its own copy: the executor's view of the call (prior calls, trace) must
    # not be able to change what a human approves.
    evidence = with_provenance(run.views.evidence(this.round, run.ctx), run.provenance, tool, tier, args)
    return ProposedAction[Any].create(
        tool_name=tool.name,
        tier=tier,
        args=owned(args),
        rationale=this.rationale,
        round=this.round,
        run_id=run.session.run_id,
        evidence=evidence,
    )


def _pending(run: _Run, call: _Gated) -> Ending | None:
    """Record `call`'s proposal as waiting for a person (the executor is told, observers get it); the stop under
    `AfterProposal.STOP`."""
    this, tool, args, proposal = call.this, call.tool, call.args, call.proposal
    run.proposals.append(proposal)
    run.record(
        this,
        RoundOutcome.PROPOSED,
        tool=tool.name,
        args=args,
        tier=call.tier,
        observation=PROPOSED_NOTE,
        proposed_at=proposal.created_at.isoformat(),
        call_digest=proposal.digest,
    )
    note: PriorCall[Any] = PriorCall(
        round=this.round, tool_name=tool.name, args=args, observation=PROPOSED_NOTE, proposed=True
    )
    run.show(this, note, ran=False, proposal=proposal)
    if run.session.observers:
        run.session.emit(ProposalCaptured(run_id=run.session.run_id, proposal=proposal.model_copy(deep=True)))
    if run.config.after_proposal is AfterProposal.STOP:
        return Ending(Outcome.APPLIED, StopReason.PROPOSED)
    return None
