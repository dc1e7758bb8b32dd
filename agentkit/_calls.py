"""The calls of one step, when a step may carry several (`LoopConfig.max_calls_per_step` above 1).

Each call is checked on its own, in the step's order, as a one-call step's call is: the repeat guard
(a call that repeats an earlier call of the same step counts as a repeat), then its tier. A call above
the autonomy ceiling becomes a proposal (a standing grant may approve it, and it runs once, as then); a
call that runs live joins the calls run together. Those run concurrently, at most
`LoopConfig.max_parallel_calls` at once, each under its own `tool_timeout`; a `ToolRetry` is that
call's observation, as ever. Each call's entry is appended to the state, and the state handed to the
observers that keep it (the journal), as soon as the call is through, so a run that dies mid-step
resumes without running a finished call again; the entries carry their place in the step
(`RoundEntry.position`), and the calls join the views (what the executor, the observers and the
items see) in the step's order once the step is through, as a resumed run reads them (`fold`).

A call that ends the run (a stalemate under `RepeatPolicy.STOP`, a call not allowed live, a tool that
fails) ends it: the calls checked before it that run live still run when nothing in the check ended the
run; a failure while they run cancels the calls still running, and keeps the batches of those that
finished. A proposal under `AfterProposal.STOP` ends the run after the live calls of its step ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agentkit._outcome import Ending, StopReason
from agentkit._toolbox import gate
from agentkit._tools import Tool

if TYPE_CHECKING:
    from agentkit._loop import _Round, _Run
    from agentkit._tiers import Tier

__all__ = ["run_calls", "take_calls"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Live:
    """A call of the step that runs live."""

    this: _Round
    tool: Tool[Any, Any]
    tier: Tier
    args: BaseModel


async def take_calls(run: _Run, this: _Round, calls: Sequence[BaseModel]) -> Ending | None:
    """The step's calls: one, as a one-call step's is taken (check for a repeat, gate by tier, dispatch), or
    several (`run_calls`); the ending of the run, if they end it."""
    if run.box.max_calls > 1:
        return await run_calls(run, this, calls)
    tool, args = run.box.resolve(calls[0])
    # A repeat refused under RepeatPolicy.REFUSE is neither None nor an Ending: the run goes on.
    ending = run.repeat(this, tool, args)
    if ending is None:
        match gate(tool, run.config, run.provenance):
            case "run", tier:
                ending = await run.dispatch(this, tool, tier, args)
            case "propose", tier:
                ending = await run.propose(this, tool, tier, args)
            case _:
                ending = run.refuse(this, tool, args)
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
    """The place in the step of the call whose args are `args` (the very object the step holds)."""
    for place, call in enumerate(calls):
        if getattr(call, "args", call) is args:
            return place
    return len(calls)


async def _checked_and_run(run: _Run, this: _Round, calls: Sequence[BaseModel]) -> Ending | None:
    live: list[_Live] = []
    stop: Ending | None = None
    for place, call in enumerate(calls):
        one = dataclasses.replace(this, position=place)
        tool, args = run.box.resolve(call)
        checked = run.repeat(one, tool, args)
        if isinstance(checked, Ending):
            return checked
        if checked is not None:  # a repeat refused (RepeatPolicy.REFUSE): the step goes on
            continue
        match gate(tool, run.config, run.provenance):
            case "run", tier:
                live.append(_Live(one, tool, tier, args))
            case "propose", tier:
                ending = await run.propose(one, tool, tier, args)
                if ending is not None and ending.reason is StopReason.PROPOSED:
                    stop = stop or ending
                elif ending is not None:
                    return ending
            case _:
                return run.refuse(one, tool, args)
    ending = await _run_live(run, live)
    return ending if ending is not None else stop


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
