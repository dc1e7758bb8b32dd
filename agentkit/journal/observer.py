"""`JournalObserver`: writes every run, round and proposal to a journal as the run happens."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from contextlib import suppress
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Self

from agentkit._events import Event, ProposalCaptured, RunAborted, RunFinished, RunStarted
from agentkit._observe import Observer, is_delta
from agentkit.errors import JournalError, UsageError
from agentkit.journal._lease import DEFAULT_LEASE, Holds, check_lease
from agentkit.journal._records import Checkpointed

if TYPE_CHECKING:
    from agentkit._state import RunCheckpoint
    from agentkit.journal._contract import Journal

__all__ = ["JournalObserver"]

logger = logging.getLogger("agentkit.journal")

_BATCH = 500
"""Most queued entries the writer thread writes in one transaction."""

LINGER = 0.2
"""Default longest time, in seconds, an event waits in the queue for its round's end before it is written."""


class JournalObserver(Observer):
    """An observer that records each event of a run in a journal, in order, never waiting for a busy database.

    Hooks put the event (a frozen value) on a bounded queue. What queued up is written in one
    transaction (a failed transaction is retried an event at a time, so one bad event fails alone)
    when a round ends (its checkpoint is queued), a run ends or aborts, a proposal is captured, or
    `flush` is called, so a round's events and its checkpoint go in one transaction; anything else
    waits at most `linger` seconds. With a SQLite journal (`records_at_once`) the hook that makes
    a batch due writes it itself, on the run's thread, when the write lock is free at once, so a
    round's checkpoint is committed before the next round begins; when another process holds the
    lock (approving a proposal, claiming one), or with PostgreSQL, the observer's writer thread writes
    it, so a busy database never stalls the event loop. When a run ends or aborts, the run awaits
    `settle`, which waits (at most `flush_timeout` seconds, without blocking the event loop) until
    every event queued so far is written, so the run's record is complete when the run returns.
    Called outside an event loop, the end hooks wait the same way, blocking. A crash loses at most
    the events still queued.

    A failed write, or an event dropped because the queue is full, never changes the run: it is
    logged (logger `agentkit.journal`) and counted in `failures`. `close()` (or leaving a
    `with` block) writes what is queued and stops the thread.

    A tiered run's checkpoint is written at each round's end (one statement on the run's row), so
    `journal.resume` can continue a run whose process died from its last completed round. The
    observer also holds each run it records with a lease, renewed by a thread of its own every third
    of `lease` while the run goes on (never from the event loop: a sync tool that blocks the loop
    does not lose the hold), so a run whose process died shows as crashed once its lease
    runs out.

    Args:
        journal: Where the events go.
        capacity: Most events waiting to be written; an event beyond it is dropped and counted.
        flush_timeout: Longest wait, in seconds, at a run's end for its events to be written; past
            it the run returns and the rest is written when the database frees up.
        lease: How long the hold on a run stays valid unless renewed (see `DEFAULT_LEASE`): a
            `timedelta` or a number of seconds.
        linger: Longest wait, in seconds, of an event for its round's end before it is written.
        holder: The name the runs' holds record (`claimed_by`; default `host:pid`).

    Example:
        >>> with JournalObserver(SQLiteJournal("agentkit-journal.db")) as observer:
        ...     result = await run_tool_loop_tiered(caller, agent, tools, ctx, observer=observer)
    """

    def __init__(
        self,
        journal: Journal,
        *,
        capacity: int = 10_000,
        flush_timeout: float = 10.0,
        lease: timedelta | float = DEFAULT_LEASE,
        linger: float = LINGER,
        holder: str | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise UsageError(f"capacity must be an integer >= 1 (events that may wait to be written); got {capacity!r}")
        if flush_timeout < 0:
            raise UsageError(f"flush_timeout must be >= 0 seconds; got {flush_timeout!r}")
        if isinstance(linger, bool) or not isinstance(linger, int | float) or not linger >= 0:
            raise UsageError(f"linger must be >= 0 seconds; got {linger!r}")
        self.journal = journal
        """Where the events go."""
        self.capacity = capacity
        """Most events waiting to be written."""
        self.flush_timeout = flush_timeout
        """Longest wait at a run's end for its events to be written."""
        self.failures = 0
        """Events that could not be written (the write failed, or the queue was full)."""
        self.last_error: Exception | None = None
        """The most recent failure."""
        self._cond = threading.Condition()
        self.lease = check_lease(lease)
        """How long the hold on a run stays valid unless renewed."""
        self.linger = float(linger)
        """Longest time an event waits for its round's end before it is written."""
        self._queue: deque[Event | Checkpointed] = deque()
        self._due = False
        """Something queued should be written now: a round's checkpoint, a run's end, a proposal, a flush."""
        self._writing = False
        """A batch taken from the queue is being written (by the writer thread, or at once by a hook)."""
        self._sleepers = 0
        """Threads in `flush`, waiting for a batch to be written."""
        self._at_once = bool(getattr(journal, "records_at_once", False))
        """Due batches are written by the hook that made them due, when the journal can start at once."""
        self._since = 0.0
        """When the oldest entry still queued was queued (`time.monotonic`)."""
        self._idle = False
        """The writer sleeps until woken: nothing was queued for `linger` (or `linger` is 0)."""
        self._holds = Holds(
            journal, self.lease, holder=holder or f"{socket.gethostname()}:{os.getpid()}", token=uuid.uuid4().hex
        )
        """The runs started and not yet ended, held with a lease its own thread renews."""
        self._accepted = 0
        self._settled = 0
        """Accepted events that were written or failed; `flush` waits for it to catch up."""
        self._closed = False
        self._writer: threading.Thread | None = None
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        """Coroutines in `settle`: the count of settled events each waits for, its loop and its future."""

    sees_calls = False
    """The journal records a round's number and ceiling only, so the run keeps no copies of its calls for it."""

    # -- hooks ----------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Queue the event for the writer thread (every kind: start, rounds, calls, proposals, the end), but a
        streamed reply's deltas: the journal records the complete step, as in a run that does not stream."""
        if is_delta(event):
            return
        self._put(event)

    def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
        """Queue the run's checkpoint for the writer thread (the latest one is kept)."""
        # Its text is made here, once: the write (here or in the writer thread) only stores it.
        self._put(Checkpointed(run_id, checkpoint))

    def _put(self, event: Event | Checkpointed) -> None:
        now: list[Event | Checkpointed] | None = None
        with self._cond:
            if self._closed:
                refused = f"the observer is closed, so the {event.kind} event was not written; use a new one"
            elif len(self._queue) >= self.capacity:
                refused = (
                    f"{self.capacity} events already wait to be written (the database is slow or locked), so the "
                    f"{event.kind} event was dropped; raise capacity or free the database"
                )
            else:
                self._queue.append(event)
                self._accepted += 1
                if self._writer is None:
                    self._start_writer()
                if len(self._queue) == 1:
                    self._since = time.monotonic()
                    if self._idle:
                        # Asleep with nothing queued: it must now look again within linger.
                        self._cond.notify_all()
                if not self._due and (_is_due(event) or len(self._queue) >= _BATCH):
                    # A round's events wait for its end (its checkpoint), so they go in one transaction with
                    # it; the run's end and a proposal (which a person waits for) are written at once too.
                    # Anything else is written within linger.
                    if self._at_once and not self._writing:
                        now = self._take()
                    else:
                        self._due = True
                        self._cond.notify_all()
                if now is None:
                    return
        if now is not None:
            self._write_at_once(now)
            return
        self._failed(event, JournalError(refused))

    def on_run_end(self, event: RunFinished) -> None:
        """Outside an event loop, wait (bounded) until the run's events are written; in one, `settle` waits."""
        if not _in_event_loop():
            self._flush_run(event.run_id)

    def on_run_abort(self, event: RunAborted) -> None:
        """Outside an event loop, wait (bounded) until the aborted run's events are written."""
        if not _in_event_loop():
            self._flush_run(event.run_id)

    async def settle(self, run_id: str) -> None:
        """Wait (at most `flush_timeout`) until the ended run's events are written, without blocking the loop."""
        try:
            async with asyncio.timeout(self.flush_timeout):
                await self.wait_flushed()
        except TimeoutError:
            self._incomplete(run_id)

    # -- control --------------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event queued so far is written (or has failed).

        Args:
            timeout: Longest wait in seconds; `None` waits as long as it takes.

        Returns:
            Whether everything queued before the call was settled in time.
        """
        with self._cond:
            target = self._accepted
            if self._settled < target:
                self._hurry()
            self._sleepers += 1
            try:
                return self._cond.wait_for(lambda: self._settled >= target, timeout)
            finally:
                self._sleepers -= 1

    async def wait_flushed(self) -> None:
        """`flush` for coroutines: wait until every event queued so far is written, the event loop free meanwhile.

        Bound the wait with `asyncio.timeout`; cancelling it leaves the writer writing.
        """
        loop = asyncio.get_running_loop()
        with self._cond:
            target = self._accepted
            if self._settled >= target:
                return
            self._hurry()
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (target, loop, waiter)
            self._waiters.append(entry)
        try:
            await waiter
        finally:
            with self._cond:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued, then stop the writer thread; events after this are counted as failures.

        Returns:
            Whether the thread stopped within `timeout` (it keeps writing in the background otherwise).
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            writer = self._writer
        self._holds.stop()
        if writer is None:
            return True
        writer.join(timeout)
        return not writer.is_alive()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- machinery ------------------------------------------------------------------------------

    def _hurry(self) -> None:
        """Have the writer write what is queued now (the caller holds `_cond`)."""
        if not self._due:
            self._due = True
            self._cond.notify_all()

    def _take(self) -> list[Event | Checkpointed]:
        """Take what is queued (at most `_BATCH`) to write it; the caller holds `_cond` and writes it next."""
        batch = [self._queue.popleft() for _ in range(min(len(self._queue), _BATCH))]
        self._writing = bool(batch)
        self._due = bool(self._queue)
        self._since = time.monotonic()
        if self._due:
            self._cond.notify_all()
        return batch

    def _write_at_once(self, batch: list[Event | Checkpointed]) -> None:
        """Write a due batch on the run's thread when the journal can start at once, else hand it to the writer.

        A round's checkpoint is then committed before the next round begins. A journal whose write lock
        another process holds (a person approving a proposal, a worker claiming one) is not waited for:
        the batch goes back to the front of the queue for the writer thread.
        """
        written = False
        try:
            written = self.journal.try_record_all(batch, hold=self._holds.hold())
        except Exception:  # the writer thread writes it again, entry by entry if it must, and reports what fails
            pass
        finally:  # an interrupt too: the batch goes back, so nothing is lost and the writer is not left waiting
            if not written:
                with self._cond:
                    self._queue.extendleft(reversed(batch))
                    self._writing = False
                    self._due = True
                    self._cond.notify_all()
        if written:
            self._done(batch)

    def _done(self, batch: list[Event | Checkpointed]) -> None:
        """The batch was written (or its failures reported): count it, and wake whoever waits for it."""
        with self._cond:
            for entry in batch:
                if isinstance(entry, RunStarted):
                    self._holds.add(entry.run_id)
                elif isinstance(entry, RunFinished | RunAborted):
                    self._holds.discard(entry.run_id)
            self._writing = False
            self._settled += len(batch)
            if self._sleepers or self._due or self._closed or not self.linger:
                # A `flush` waits, or the writer has something to do now (with linger 0, whatever comes next).
                # Otherwise it is left asleep (a batch a round is written at once): it looks again within linger.
                self._cond.notify_all()
            due = [w for w in self._waiters if w[0] <= self._settled]
            self._waiters = [w for w in self._waiters if w[0] > self._settled]
        for _, loop, waiter in due:
            # A closed loop (RuntimeError) has nobody left waiting.
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, waiter)

    def _start_writer(self) -> None:
        if self._writer is None:
            # A daemon: a process that exits without close() must not hang on a locked database; what is
            # still queued then is lost, as it would be in a crash.
            self._writer = threading.Thread(target=self._write_all, name="agentkit-journal-writer", daemon=True)
            self._writer.start()

    def _write_all(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._writing:  # a batch is being written at once; its end wakes this thread if it must
                        self._cond.wait(self.linger or None)
                        continue
                    if self._due or self._closed:
                        break
                    wait: float | None
                    if self._queue:
                        wait = self._since + self.linger - time.monotonic()
                        if wait <= 0:
                            break
                    elif self.linger and time.monotonic() - self._since < self.linger:
                        # Entries came lately (rounds whose records their hooks write at once, as a run goes on):
                        # look again within linger by itself, so that the next entry waits no longer without its
                        # hook waking this thread (a switch of threads every round). Once nothing came for
                        # linger, it sleeps until the next entry wakes it.
                        wait = self.linger
                    else:
                        wait = None
                    self._idle = wait is None
                    self._cond.wait(wait)
                self._idle = False
                if not self._queue and self._closed:
                    return
                # Everything queued meanwhile goes in one transaction: one commit for it all.
                batch = self._take()
            if not batch:
                continue
            self._write(batch)
            self._done(batch)

    def _write(self, batch: list[Event | Checkpointed]) -> None:
        """Write the batch in one transaction; if that fails, each entry on its own, so one bad entry fails alone."""
        hold = self._holds.hold()
        try:
            self.journal.record_all(batch, hold=hold)
        except Exception as error:
            if len(batch) == 1:
                self._failed(batch[0], error)
            else:
                for entry in batch:
                    try:
                        self.journal.record_all((entry,), hold=hold)
                    except Exception as alone:
                        self._failed(entry, alone)

    def _failed(self, event: Event | Checkpointed, error: Exception) -> None:
        with self._cond:
            self.failures += 1
            self.last_error = error
            failures = self.failures
        logger.warning(
            "journal %s: could not record the %s event of run %s (%d failed so far): %s",
            self.journal.where,
            event.kind,
            event.run_id,
            failures,
            error,
        )

    def _flush_run(self, run_id: str) -> None:
        if not self.flush(self.flush_timeout):
            self._incomplete(run_id)

    def _incomplete(self, run_id: str) -> None:
        with self._cond:
            waiting = len(self._queue)
        logger.warning(
            "journal %s: run %s ended but its record is not complete after %gs (%d events still wait for the "
            "database); they are written when it frees up",
            self.journal.where,
            run_id,
            self.flush_timeout,
            waiting,
        )


_DUE = (Checkpointed, ProposalCaptured, RunFinished, RunAborted)
"""Entries the writer writes as soon as they are queued (with everything queued before them)."""


def _is_due(entry: Event | Checkpointed) -> bool:
    """Whether the writer writes `entry` at once: a checkpoint holding calls, a proposal, a run's end.

    A checkpoint of a run before any call (its first, taken before round 1) records no work that a
    crash could make run twice, so it waits, like the run's start, for the first round's end or
    `linger`, and goes in one transaction with them.
    """
    if isinstance(entry, Checkpointed):
        return bool(entry.checkpoint.entries)
    return isinstance(entry, _DUE)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
