"""`Journal`: the journal over SQL, one implementation shared by SQLite and PostgreSQL.

It is its jobs put together, each in its own module over the one storage (`_storage`): the inbox
(`_inbox`: propose and decide), its executions (`_executions`: claim, run once, record), the
runs (`_runs`: record, list, read back), the workers (`_worker`) and the resumer (`_resume`).
`SQLiteJournal` and `PostgresJournal` give it a connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar
from typing_extensions import Unpack

from agentkit._observe import observers_of
from agentkit._options import ResumeOptions  # at run time too: the docs' signature check reads **options' keys
from agentkit._tools import NO_CTX, ContextTool, NoCtx, Tool
from agentkit.journal._executions import DEFAULT_STUCK_AFTER, OUTCOME_ATTEMPTS, Executions
from agentkit.journal._grants import GrantBook
from agentkit.journal._lease import DEFAULT_LEASE, check_lease
from agentkit.journal._resume import resume
from agentkit.journal._runs import Runs
from agentkit.journal._storage import worker_name
from agentkit.journal._worker import Polling, Wakeups, Worked, WorkReport, work

if TYPE_CHECKING:
    from agentkit._agent import ToolAgent
    from agentkit._observe import ObserverArg
    from agentkit._results import TieredLoopResult
    from agentkit._structured import StructuredCaller

__all__ = ["DEFAULT_LEASE", "DEFAULT_STUCK_AFTER", "OUTCOME_ATTEMPTS", "Journal"]

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")
Answer = DefaultedTypeVar("Answer", default=None)
R = TypeVar("R")


class Journal(Executions, Runs, GrantBook):
    """A durable record of runs and an inbox of proposals, over a SQL connection: the base of
    `SQLiteJournal` and `PostgresJournal`, and the type to annotate a journal with (`open_journal`
    returns one).

    Every method but the recorder's (`record`, `record_checkpoint`, `record_all`, `hold_runs`) is
    async. Ids are strings; records are frozen. An unknown id raises `UnknownId` and a change the
    current state does not allow raises `TransitionRefused`; in both cases nothing is written. Both
    are `JournalError`\\s.
    """

    async def work(
        self,
        tools: Sequence[Tool[Any, Any] | ContextTool[Any, Any, Ctx]],
        *,
        ctx: Ctx | NoCtx = NO_CTX,
        limit: int | None = None,
        stop: asyncio.Event | None = None,
        concurrency: int = 1,
        until_empty: bool = False,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        poll: float | None = None,
        report: Callable[[Worked], object] | None = None,
        observer: ObserverArg = None,
    ) -> WorkReport:
        """Run approved proposals for `tools` as they come, each exactly once; see `docs/journal.md`.

        Each claim takes the oldest approved proposal whose tool name is in `tools` in one
        statement (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so workers never queue on one row;
        SQLite: under the write lock). Proposals for other tools are left for other workers. Up to
        `concurrency` calls run at once. With nothing to claim, the worker waits: on PostgreSQL
        for a notification that a proposal was approved (`LISTEN`; `poll` seconds at most, a
        safety net, default 30), on SQLite for `poll` seconds (default 0.5).

        Args:
            tools: The tools this worker runs, matched to proposals by name.
            ctx: What the tools that take the run's ctx are called with (every call gets this one
                object: the worker's clients, say). Required when one of `tools` takes a ctx.
            limit: Return after this many claims (`None`: no limit).
            stop: Set it to stop: no new claims; running calls finish and are recorded.
            concurrency: Calls run at once, at least 1.
            until_empty: Return once nothing is approved for these tools and nothing runs.
            worker: The name recorded as `claimed_by` (default `host:pid`).
            lease: Each claim's lease (see `DEFAULT_LEASE`).
            poll: Seconds between looks when no notification comes (see above).
            report: Called with each `Worked` as it happens (progress output).
            observer: Observers whose `around` wraps each call (an `OTelObserver`'s `execute_tool`
                span, saying who approved it).

        Returns:
            What was executed, failed, left unrecorded or left for a human.

        Raises:
            UsageError: no tools, two tools with one name, a tool with no tier, a tool that takes the
                run's ctx without `ctx`, or a bad option. Raised before anything is claimed.
        """
        return await work(
            self,
            tools,
            ctx=ctx,
            limit=limit,
            stop=stop,
            concurrency=concurrency,
            until_empty=until_empty,
            worker=worker or worker_name(),
            lease=check_lease(lease),
            poll=poll,
            report=report,
            observers=observers_of(observer),
        )

    def _wakeups(self, poll: float | None) -> AbstractAsyncContextManager[Wakeups]:
        """How `work` waits for approvals: a short poll here; PostgreSQL listens for notifications."""
        return Polling(0.5 if poll is None else poll)

    @overload
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Args, R],
        tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
        ctx: Ctx,
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        **options: Unpack[ResumeOptions[Args, Answer]],
    ) -> TieredLoopResult[Args, R, Answer]: ...
    @overload
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, BaseModel, R],
        tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        ctx: Ctx,
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        **options: Unpack[ResumeOptions[BaseModel, Answer]],
    ) -> TieredLoopResult[BaseModel, R, Answer]: ...
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Any, R],
        tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        ctx: Ctx,
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        **options: Unpack[ResumeOptions[Any, Any]],
    ) -> TieredLoopResult[Any, R, Any]:
        """Continue a run from its latest checkpoint, with the decisions recorded in the inbox; see `docs/journal.md`.

        A run that stopped at a proposal goes on once each of its proposals is decided (approved,
        rejected, or already executed by a worker); a run whose process died (`RunStatus.CRASHED`)
        goes on from its last completed round. The run is held with a lease, renewed every third of
        `lease` while it runs, so exactly one process resumes it. Approved calls run through
        `execute`'s claim, so each runs once whoever else tries. The continued run is recorded in
        this journal under the same run id (do not pass a `JournalObserver` of this journal too);
        its ending replaces the one recorded.

        Args:
            run_id: The run (from `runs()` or `agentkit journal runs`).
            caller: The structured-call seam.
            agent: The executor.
            tools: The run's tool set: the same names, in the same order, at the same tiers.
            ctx: The caller's data for `agent.render`, and for the tools that take the run's ctx.
            worker: The name the hold and the approved calls' claims record (default `host:pid`).
            lease: How long the hold stays valid unless renewed.
            **options: As `resume_tool_loop` takes them (`ResumeOptions`): `observer=` (more observers
                of the continued run), `same=`, `summarize=` and `answer=` given again, and `grants=`
                (standing grants in process: a later proposal a live grant matches is approved by it
                and runs in its round, its use counted by the `Grants` object; the journal's own grants
                (`grant`) apply either way).

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the run is finished, has no checkpoint, waits on a decision (naming the
                proposal), has an approved call still executing, or cannot resume with these tools
                (or without its `same=` or `summarize=`, or with others); nothing ran.
            RunClaimed: a live process holds the run, or another resumed it first; nothing ran.
        """
        return await resume(
            self,
            run_id,
            caller,
            agent,
            tools,
            ctx,
            options,
            worker=worker or worker_name(),
            lease=check_lease(lease),
        )
