"""`journal.work`: a worker that claims approved proposals for its tools and runs each exactly once.

The loop claims the next approved proposal in one statement, starts its execution as a task, and
claims again until `concurrency` calls run; with nothing to claim it waits for a wake-up (a
PostgreSQL notification, or the SQLite poll), a finished call, or `stop`.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from agentkit._invoke import check_ctx
from agentkit._observe import Observer
from agentkit._tiers import tier_choices
from agentkit._tools import AnyTool, declared_tier
from agentkit.errors import JournalError, NothingRan, UsageError
from agentkit.journal._executions import Claim
from agentkit.journal._records import Execution

if TYPE_CHECKING:
    from agentkit.journal import Journal

__all__ = ["Polling", "Wakeups", "WorkOutcome", "WorkReport", "Worked", "work"]

_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 5.0
"""Back-off between claims while the database fails (doubling)."""


class WorkOutcome(enum.StrEnum):
    """What happened to one proposal a worker touched."""

    EXECUTED = "executed"
    """The tool ran and returned a batch; recorded `executed`."""
    FAILED = "failed"
    """The tool ran and failed; recorded `failed` with its error."""
    NOT_RECORDED = "not_recorded"
    """The tool ran but this worker could not record its outcome: the database failed (`OutcomeNotRecorded`; it
    stays executing), or a human resolved the call while it ran (the human's decision stands); `error` says which."""
    LEFT = "left"
    """Not run: the stored call does not check out against this worker's tool (digest, tier, args, or a row that
    does not read); it stays approved, set aside until its `left_until` (see `ProposalRecord.left_until`)."""
    NOTHING_RAN = "nothing_ran"
    """A claim failed in the database (`NothingRan`); the worker tries again after a back-off."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Worked:
    """One thing a worker did, passed to `work(report=...)` as it happens."""

    outcome: WorkOutcome
    """What happened."""
    proposal_id: str
    """The proposal (`""` for a failed claim, which had not picked one yet)."""
    tool_name: str = ""
    """Its tool."""
    error: str | None = None
    """The tool's error, or why nothing ran or nothing was recorded."""
    execution: Execution[Any] | None = None
    """The recorded execution (`EXECUTED` and `FAILED`)."""


@dataclass(kw_only=True, slots=True)
class WorkReport:
    """What `work` did, returned when it stops."""

    executed: int = 0
    """Calls that ran and were recorded `executed`."""
    failed: int = 0
    """Calls that ran and were recorded `failed`."""
    not_recorded: list[str] = field(default_factory=list)
    """Proposals whose tool ran but whose outcome this worker did not record: resolve those still executing,
    never re-run them."""
    left: list[str] = field(default_factory=list)
    """Approved proposals this worker would not run (their stored call did not check out); they stay approved,
    set aside for a while, each listed once."""
    claim_attempts: int = 0
    """Claim statements run."""
    empty_claims: int = 0
    """Claim statements that found nothing approved for these tools."""
    claim_failures: int = 0
    """Claim statements that failed in the database (`NothingRan`)."""

    @property
    def claimed(self) -> int:
        """Proposals claimed (and so run): executed, failed or not recorded."""
        return self.executed + self.failed + len(self.not_recorded)


class Wakeups(Protocol):
    """How a worker waits for something to claim."""

    how: str
    """For progress output: `LISTEN/NOTIFY` or the poll interval."""

    def clear(self) -> None:
        """Forget wake-ups so far (called before each claim, so none that comes after it is lost)."""

    async def wait(self) -> None:
        """Return at the next wake-up, or after the poll interval at most."""


class Polling:
    """SQLite's wake-up: a look every `interval` seconds (SQLite has no notifications across processes)."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self.how = f"polling every {interval:g}s"

    def clear(self) -> None:
        """Nothing to forget."""

    async def wait(self) -> None:
        await asyncio.sleep(self._interval)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        return None


def _tools_by_name(tools: Sequence[AnyTool], ctx: object) -> dict[str, AnyTool]:
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence) or not tools:
        raise UsageError(f"work needs a non-empty sequence of tools; got {tools!r}")
    by_name: dict[str, AnyTool] = {}
    for tool in tools:
        if tool.name in by_name:
            raise UsageError(f"two tools are named {tool.name!r}; a worker matches proposals by tool name")
        if declared_tier(tool) is None:
            raise UsageError(f"tool {tool.name!r} declares no tier; choose one of {tier_choices()}")
        check_ctx(tool, ctx)
        by_name[tool.name] = tool
    return by_name


def _check_options(limit: int | None, concurrency: int, lease: timedelta, poll: float | None) -> None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise UsageError(f"limit must be an integer >= 1, or None for no limit; got {limit!r}")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UsageError(f"concurrency must be an integer >= 1; got {concurrency!r}")
    if not isinstance(lease, timedelta) or lease <= timedelta(0):
        raise UsageError(f"lease must be a positive timedelta; got {lease!r}")
    if poll is not None and (isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < math.inf):
        raise UsageError(f"poll must be a positive number of seconds; got {poll!r}")


async def _first(stop: asyncio.Event, running: set[asyncio.Task[None]], *extra: Awaitable[None]) -> None:
    """Wait until `stop` is set, a running call finishes, or one of `extra` returns."""
    helpers = [asyncio.ensure_future(stop.wait()), *(asyncio.ensure_future(e) for e in extra)]
    try:
        await asyncio.wait([*helpers, *running], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for helper in helpers:
            helper.cancel()
        for helper in helpers:
            with suppress(asyncio.CancelledError):
                await helper


class _Worker:
    def __init__(
        self,
        journal: Journal,
        tools: Mapping[str, AnyTool],
        *,
        ctx: object,
        worker: str,
        lease: timedelta,
        report: Callable[[Worked], object] | None,
        observers: tuple[Observer, ...] = (),
    ) -> None:
        self.journal = journal
        self.observers = observers
        self.tools = tools
        self.ctx = ctx
        self.worker = worker
        self.lease = lease
        self.on_worked = report
        self.result = WorkReport()
        self.reported: set[str] = set()
        self.running: set[asyncio.Task[None]] = set()

    def tell(self, worked: Worked) -> None:
        # Progress output must never change what the worker does: a failing reporter is ignored.
        if self.on_worked is not None:
            with suppress(Exception):
                self.on_worked(worked)

    async def claim(self) -> Claim[Any] | None:
        """Claim the next call; `None` when there is none. A database failure propagates as `NothingRan`."""
        self.result.claim_attempts += 1
        while True:
            claim, left = await asyncio.to_thread(self.journal._claim_next, self.tools, self.worker, self.lease)
            for row in left:
                # Reported once however often this worker meets it again (each time its ``left_until`` comes).
                if row.id not in self.reported:
                    self.reported.add(row.id)
                    self.result.left.append(row.id)
                    self.tell(
                        Worked(outcome=WorkOutcome.LEFT, proposal_id=row.id, tool_name=row.tool_name, error=row.why)
                    )
            if claim is not None or not left:
                break
        if claim is None:
            self.result.empty_claims += 1
        return claim

    def start(self, claim: Claim[Any]) -> None:
        task = asyncio.create_task(self.execute(claim))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def execute(self, claim: Claim[Any]) -> None:
        tool = self.tools[claim.record.tool_name]
        try:
            execution = await self.journal._run_claimed(claim, tool, self.ctx, self.observers)
        except Exception as lost:
            # Nothing else collects this task's exception: anything that ends the call unrecorded (the database
            # failed, a human resolved the call while it ran, or a bug) is reported here, never left in the task.
            why = str(lost) if isinstance(lost, JournalError) else f"{type(lost).__name__}: {lost}"
            self.result.not_recorded.append(claim.record.id)
            self.tell(
                Worked(outcome=WorkOutcome.NOT_RECORDED, proposal_id=claim.record.id, tool_name=tool.name, error=why)
            )
            return
        failed = execution.error is not None
        if failed:
            self.result.failed += 1
        else:
            self.result.executed += 1
        self.tell(
            Worked(
                outcome=WorkOutcome.FAILED if failed else WorkOutcome.EXECUTED,
                proposal_id=claim.record.id,
                tool_name=tool.name,
                error=None if execution.error is None else str(execution.error),
                execution=execution,
            )
        )

    async def loop(
        self, wakeups: Wakeups, stop: asyncio.Event, *, limit: int | None, concurrency: int, until_empty: bool
    ) -> None:
        retry = _RETRY_FIRST_S
        while not stop.is_set() and (limit is None or self.result.claimed + len(self.running) < limit):
            if len(self.running) >= concurrency:
                await _first(stop, self.running)
                continue
            wakeups.clear()
            try:
                claim = await self.claim()
            except NothingRan as failed:
                self.result.claim_failures += 1
                self.tell(Worked(outcome=WorkOutcome.NOTHING_RAN, proposal_id="", error=str(failed)))
                await _first(stop, self.running, asyncio.sleep(retry))
                retry = min(retry * 2, _RETRY_MAX_S)
                continue
            retry = _RETRY_FIRST_S
            if claim is not None:
                self.start(claim)
            elif until_empty and not self.running:
                return
            else:
                await _first(stop, self.running, wakeups.wait())

    async def drain(self) -> None:
        """Let the running calls finish and be recorded."""
        while self.running:
            await asyncio.wait(set(self.running))

    async def cancel(self) -> None:
        """Cancel the running calls: each claim stays `executing` and shows in `stuck()` once its lease runs out."""
        for task in self.running:
            task.cancel()
        if self.running:
            await asyncio.wait(set(self.running))


async def work(
    journal: Journal,
    tools: Sequence[AnyTool],
    *,
    ctx: object,
    limit: int | None,
    stop: asyncio.Event | None,
    concurrency: int,
    until_empty: bool,
    worker: str,
    lease: timedelta,
    poll: float | None,
    report: Callable[[Worked], object] | None,
    observers: tuple[Observer, ...] = (),
) -> WorkReport:
    """`Journal.work`'s body (documented there)."""
    by_name = _tools_by_name(tools, ctx)
    _check_options(limit, concurrency, lease, poll)
    running = _Worker(journal, by_name, ctx=ctx, worker=worker, lease=lease, report=report, observers=observers)
    async with journal._wakeups(poll) as wakeups:
        try:
            await running.loop(
                wakeups, stop or asyncio.Event(), limit=limit, concurrency=concurrency, until_empty=until_empty
            )
            await running.drain()
        except BaseException:
            await running.cancel()
            raise
    return running.result
