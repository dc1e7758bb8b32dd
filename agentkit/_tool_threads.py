"""Threads for blocking user code: tools (`@tool(in_thread=True)`) and sync context summarizers
under a deadline, each in a bounded set of their own.

A blocking tool runs in one of `TOOL_THREADS` daemon threads that belong to agentkit, never in
the event loop's default executor; a sync `ContextWindow.summarize` of a run with a deadline runs
in one of `SUMMARY_THREADS` others. Python cannot stop a thread: a call whose caller gave up (its
`tool_timeout` fired, the run's deadline passed, or it was cancelled) keeps its thread until the
function returns. Kept apart, such threads cannot starve the journal or anything else that uses
`asyncio.to_thread`, nor each other's set, and `asyncio.run` does not wait for them when it
closes its loop.

When every thread of a set is busy, a new call waits for one to free up. When every thread is held
by a call whose caller gave up, nothing can free one up, so a new call fails at once with an error
that says so (a `ToolError` for tools, an `ExecutorError` for summarizers), instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from agentkit.errors import AgentkitError, ExecutorError, ToolError

__all__ = ["SUMMARY_THREADS", "TOOL_THREADS", "ToolThreads", "run_in_summary_thread", "run_in_tool_thread"]

A = TypeVar("A")
T = TypeVar("T")

TOOL_THREADS = 32
"""How many blocking tool calls run at once in a process; further calls wait for a thread."""
SUMMARY_THREADS = 16
"""How many sync summarizers (of runs with a deadline) run at once in a process."""


def _tools_exhausted(name: str, size: int) -> AgentkitError:
    return ToolError(
        f"tool {name!r} did not run: all {size} threads for blocking tools (in_thread=True) are "
        "held by calls whose callers gave up (timed out or cancelled) and that never returned. Make "
        "those tools return (give their I/O a timeout of its own), or restart the process",
        tool_name=name,
    )


def _summaries_exhausted(name: str, size: int) -> AgentkitError:
    return ExecutorError(
        f"the context summarizer {name!r} did not run: all {size} threads for sync summarizers are held by "
        "summarizers that outlived their run's deadline and never returned. Make the summarizer return (give "
        "its I/O a timeout of its own), make it async so the deadline can cancel it, or restart the process"
    )


@dataclass(slots=True)
class _Call:
    finished: bool = False
    abandoned: bool = False


class ToolThreads:
    """At most `size` blocking calls at once, each in a daemon thread started for it; `exhausted`
    makes the error of a call refused because every thread is held by an abandoned call."""

    def __init__(
        self, size: int = TOOL_THREADS, *, exhausted: Callable[[str, int], AgentkitError] = _tools_exhausted
    ) -> None:
        self.size = size
        self._exhausted = exhausted
        self._lock = threading.Lock()
        self._busy = 0
        self._abandoned = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def run(self, fn: Callable[[A], T], arg: A, *, name: str) -> T:
        """`fn(arg)` in a thread of the set, waiting for one when all are busy.

        Raises:
            AgentkitError: every thread is held by a call whose caller gave up; nothing ran (a
                `ToolError` from the tools' set, an `ExecutorError` from the summarizers').
        """
        loop = asyncio.get_running_loop()
        await self._acquire(loop, name)
        call = _Call()
        done: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=self._work, args=(loop, done, call, context, fn, arg), name=f"agentkit-tool-{name}", daemon=True
        )
        try:
            thread.start()
        except BaseException:
            self._release(call)
            raise
        try:
            return await done
        except asyncio.CancelledError:
            self._abandon(call)
            raise

    async def _acquire(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        while True:
            with self._lock:
                if self._busy < self.size:
                    self._busy += 1
                    return
                if self._abandoned >= self.size:
                    raise self._exhausted(name, self.size)
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            try:
                await waiter
            except asyncio.CancelledError:
                with self._lock:
                    if (loop, waiter) in self._waiters:
                        self._waiters.remove((loop, waiter))
                    woken = waiter.done() and not waiter.cancelled()
                if woken:  # the thread it was woken for goes to the next waiter
                    self._wake(everyone=False)
                raise

    def _work(
        self,
        loop: asyncio.AbstractEventLoop,
        done: asyncio.Future[T],
        call: _Call,
        context: contextvars.Context,
        fn: Callable[[A], T],
        arg: A,
    ) -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, context.run(fn, arg))
        except BaseException as raised:  # delivered to the caller, whatever it is
            outcome = (False, raised)
        finally:
            self._release(call)
        # A closed loop (RuntimeError) means nobody waits for this result any more.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(_deliver, done, outcome)

    def _release(self, call: _Call) -> None:
        with self._lock:
            call.finished = True
            self._busy -= 1
            if call.abandoned:
                self._abandoned -= 1
        self._wake(everyone=False)

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            if call.finished:
                return
            call.abandoned = True
            self._abandoned += 1
        # Waiters re-check: if every thread is now held by an abandoned call, they fail instead of waiting.
        self._wake(everyone=True)

    def _wake(self, *, everyone: bool) -> None:
        while True:
            with self._lock:
                if not self._waiters:
                    return
                woken, self._waiters = (self._waiters, []) if everyone else (self._waiters[:1], self._waiters[1:])
            for loop, waiter in woken:
                try:
                    loop.call_soon_threadsafe(_resolve, waiter)
                except RuntimeError:  # that waiter's loop is closed; wake the next one instead
                    continue
                if not everyone:
                    return
            if everyone:
                return


def _deliver(done: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if done.done():
        return
    ok, value = outcome
    if ok:
        done.set_result(value)
    else:
        done.set_exception(value)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_threads = ToolThreads()
"""The process's threads for blocking tools."""
_summary_threads = ToolThreads(SUMMARY_THREADS, exhausted=_summaries_exhausted)
"""The process's threads for sync summarizers of runs with a deadline."""


async def run_in_tool_thread(fn: Callable[[A], T], arg: A, *, name: str) -> T:
    """`fn(arg)` in one of the process's `TOOL_THREADS` threads for blocking tools (see the module docstring)."""
    return await _threads.run(fn, arg, name=name)


async def run_in_summary_thread(fn: Callable[[A], T], arg: A, *, name: str) -> T:
    """`fn(arg)` in one of the process's `SUMMARY_THREADS` threads for sync summarizers."""
    return await _summary_threads.run(fn, arg, name=name)
