"""The `Journal` protocol both backends implement, and `open_journal` which picks one."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._events import Event
from agentkit._grants import Grant
from agentkit._proposals import ProposedAction
from agentkit._tools import NO_CTX, AnyTool, ContextTool, NoCtx, Tool
from agentkit.errors import UsageError
from agentkit.journal._executions import DEFAULT_STUCK_AFTER
from agentkit.journal._grants import GrantRecord
from agentkit.journal._lease import DEFAULT_LEASE
from agentkit.journal._records import (
    Checkpointed,
    Execution,
    Hold,
    ProposalRecord,
    ProposalState,
    RoundEntry,
    RunRecord,
    Transition,
)

__all__ = ["Journal", "open_journal"]

if TYPE_CHECKING:
    from agentkit._agent import ToolAgent
    from agentkit._config import LoopConfig
    from agentkit._context import Summarizer
    from agentkit._observe import ObserverArg
    from agentkit._results import TieredLoopResult
    from agentkit._state import RunCheckpoint
    from agentkit._structured import StructuredCaller
    from agentkit.journal._worker import Worked, WorkReport

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")
Answer = DefaultedTypeVar("Answer", default=None)
R = TypeVar("R")

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Journal(Protocol):
    """A durable record of runs and an inbox of proposals; `SQLiteJournal` and `PostgresJournal`.

    Every method but `record` is async. Ids are strings; records are frozen. An unknown id raises
    `UnknownId` and a change the current state does not allow raises `TransitionRefused`; in
    both cases nothing is written. Both are `JournalError`\\s.
    """

    @property
    def where(self) -> str:
        """The database, for messages (a path, or a URL without its password)."""
        ...

    def record(self, event: Event) -> None:
        """Write one run event before returning (`JournalObserver` calls this from its writer thread)."""
        ...

    def record_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        """Keep a run's latest checkpoint (`JournalObserver` calls this at each round's end)."""
        ...

    def record_all(self, entries: Sequence[Event | Checkpointed], *, hold: Hold | None = None) -> None:
        """Write events and checkpoints in order in one transaction; with `hold`, hold the runs started there."""
        ...

    def hold_runs(self, run_ids: Sequence[str], *, holder: str, token: str, lease: timedelta) -> None:
        """Take or renew the lease on the unfinished runs one recorder holds (`JournalObserver`'s heartbeat)."""
        ...

    async def propose(self, action: ProposedAction[Any], *, proposed_by: str = "") -> ProposalRecord:
        """Put a proposal in the inbox as pending; the same call proposed again while its entry is open returns it."""
        ...

    async def get(self, id: str) -> ProposalRecord:
        """The proposal with that id."""
        ...

    async def pending(self) -> list[ProposalRecord]:
        """Proposals waiting for a human, oldest first."""
        ...

    async def proposals(self, *, state: ProposalState | None = None, limit: int | None = None) -> list[ProposalRecord]:
        """Proposals, in one state if given, oldest first."""
        ...

    async def history(self, id: str) -> list[Transition]:
        """Every state change of a proposal, with who and when."""
        ...

    async def approve(
        self,
        id: str,
        approved_by: str,
        *,
        args: BaseModel | Mapping[str, Any] | None = None,
        args_type: type[BaseModel] | None = None,
        verified_as: str | None = None,
    ) -> ProposalRecord:
        """pending -> approved; with `args`, the call amended (its own digest, its lineage kept)."""
        ...

    async def reject(self, id: str, rejected_by: str, reason: str, *, verified_as: str | None = None) -> ProposalRecord:
        """pending or approved -> rejected."""
        ...

    require_verified_approver: bool
    """This client refuses a person's decision whose name is not the identity the journal can vouch for."""

    async def require_verified_approvers(self, required: bool = True) -> None:
        """Make every client of this journal refuse unverified decisions (kept in the journal)."""
        ...

    async def verified_approvers_required(self) -> bool:
        """Whether the journal itself requires verified decisions (`require_verified_approvers`)."""
        ...

    async def grant(self, grant: Grant, *, tool: AnyTool) -> GrantRecord:
        """Keep a standing grant: proposals recorded from now on that match it are approved by `grant:<id>`."""
        ...

    async def grants(self) -> list[GrantRecord]:
        """Every grant, oldest first, with its uses and state."""
        ...

    async def revoke_grant(self, id: str, revoked_by: str, reason: str) -> GrantRecord:
        """Stop a grant approving anything."""
        ...

    @overload
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: object = ...,
        observer: ObserverArg = None,
    ) -> Execution[R]: ...
    @overload
    async def execute(
        self,
        id: str,
        tool: ContextTool[Args, R, Ctx],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: Ctx,
        observer: ObserverArg = None,
    ) -> Execution[R]: ...
    async def execute(
        self,
        id: str,
        tool: Tool[Args, R] | ContextTool[Args, R, Any],
        *,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        ctx: object = NO_CTX,
        observer: ObserverArg = None,
    ) -> Execution[R]:
        """Run an approved proposal exactly once: approved -> executing -> executed or failed.

        A tool that takes the run's ctx needs `ctx=`; without it nothing is claimed or run.
        """
        ...

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
        """Claim approved proposals for `tools` one statement at a time and run each exactly once, until stopped."""
        ...

    async def stuck(self, *, older_than: timedelta = DEFAULT_STUCK_AFTER) -> list[ProposalRecord]:
        """Unfinished executions whose lease ran out, or claimed longer ago than `older_than`."""
        ...

    async def resolve(self, id: str, resolved_by: str, state: ProposalState, note: str) -> ProposalRecord:
        """A human's decision on an abandoned execution: executing -> executed, failed or approved."""
        ...

    async def runs(self, *, limit: int = 20) -> list[RunRecord]:
        """The most recent runs, newest first, each with its `status` (waiting, ready, crashed, ...)."""
        ...

    @overload
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Args, R],
        tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
        ctx: Ctx,
        *,
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Answer] | None = None,
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
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Answer] | None = None,
    ) -> TieredLoopResult[BaseModel, R, Answer]: ...
    async def resume(
        self,
        run_id: str,
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Any, R],
        tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        ctx: Ctx,
        *,
        observer: ObserverArg = None,
        worker: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        summarize: Summarizer | None = None,
        answer: type[Any] | None = None,
    ) -> TieredLoopResult[Any, R, Any]:
        """Continue a run from its latest checkpoint with the inbox's decisions, holding it so one process does."""
        ...

    async def run(self, run_id: str) -> RunRecord:
        """One run."""
        ...

    async def state(self, run_id: str) -> RunCheckpoint:
        """The run's state as the journal holds it (verified; `ResumeRefused` if it cannot be read)."""
        ...

    async def fork(self, run_id: str, *, at_round: int, config: LoopConfig | None = None) -> str:
        """A new run whose state is `run_id`'s up to round `at_round`; its id."""
        ...

    async def rounds(self, run_id: str) -> list[RoundEntry]:
        """A run's rounds, in order (`UnknownId` if the journal never saw the run)."""
        ...

    async def close(self) -> None:
        """Close the connection."""
        ...

    async def __aenter__(self) -> Self:
        """`async with open_journal(...) as journal:` closes it on the way out."""
        ...

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the journal."""
        ...


def open_journal(
    url: str | os.PathLike[str],
    *,
    create: bool = True,
    in_memory: bool = False,
    require_verified_approver: bool = False,
) -> Journal:
    """Open the journal at `url`: a `postgresql://` URL, or else the path of a SQLite file.

    Args:
        url: Where the journal lives. An empty path is refused, and so is `":memory:"` unless
            `in_memory=True` says that a journal lost on close is what you want.
        create: Create the database's schema (and a SQLite file) when missing; `False` refuses
            instead, as the command line does.
        in_memory: Open SQLite's `":memory:"` database (`url` must be `":memory:"`).
        require_verified_approver: This client refuses a person's decision whose name is not the
            identity the journal can vouch for (PostgreSQL's `session_user`, the OS user with SQLite);
            `journal.require_verified_approvers()` makes every client do so.

    Raises:
        UsageError: an empty path, or `":memory:"` without `in_memory=True`.
        JournalUnavailable: see `SQLiteJournal` and `PostgresJournal`.
    """
    target = os.fspath(url)
    if isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES):
        if in_memory:
            raise UsageError("in_memory=True is for SQLite's ':memory:' database, not a PostgreSQL URL")
        from agentkit.journal._postgres import PostgresJournal

        opened: Journal = PostgresJournal(target, create=create)
    else:
        from agentkit.journal._sqlite import SQLiteJournal

        opened = SQLiteJournal(target, create=create, in_memory=in_memory)
    if require_verified_approver:
        opened.require_verified_approver = True
    return opened
