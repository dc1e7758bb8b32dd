"""`RunFeed`: each run's events in their JSON form, kept as they happen, for readers that come and go."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator

from agentkit._events import Event, RunAborted, RunFinished
from agentkit._observe import Observer
from agentkit.errors import UsageError

__all__ = ["RunFeed"]


class _Log:
    """One run's events (their JSON text), and a way to wait for the next one."""

    __slots__ = ("ended", "grown", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.ended = False
        self.grown = asyncio.Event()
        """Set when the log grew or ended; replaced by a fresh one each time, so a waiter sees each change."""

    def add(self, text: str, *, ends: bool) -> None:
        self.texts.append(text)
        self.ended = ends
        grown, self.grown = self.grown, asyncio.Event()
        grown.set()


class RunFeed(Observer):
    """An observer that keeps every event of the runs it observes in its JSON form (`event.to_json()`), so
    that any number of readers can read a run's events from any point, while it runs and after it ended.

    Give it to a run as its observer (or one of them), and to `agentkit.web.create_app` to serve.
    A run's events are numbered from 0 in the order the feed got them (a resumed run observed by the
    same feed goes on numbering after its earlier legs). Readers run on the event loop of the runs.

    Args:
        max_runs: How many runs it keeps; past that, the oldest ended run is forgotten first.
    """

    def __init__(self, *, max_runs: int = 100) -> None:
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise UsageError(f"RunFeed(max_runs={max_runs!r}): give a whole number of runs, at least 1")
        self.max_runs = max_runs
        self._logs: OrderedDict[str, _Log] = OrderedDict()

    def on_event(self, event: Event) -> None:
        """Keep `event`'s JSON form in its run's log and wake that run's readers."""
        log = self._logs.get(event.run_id)
        if log is None:
            log = self._logs[event.run_id] = _Log()
            self._forget()
        log.add(event.to_json(), ends=isinstance(event, RunFinished | RunAborted))

    def _forget(self) -> None:
        while len(self._logs) > self.max_runs:
            ended = next((run_id for run_id, log in self._logs.items() if log.ended), None)
            if ended is None:  # every run kept is still going: none is dropped mid-run
                return
            del self._logs[ended]

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._logs

    def ended(self, run_id: str) -> bool:
        """Whether the run's last event so far ends it (`RunFinished`, `RunAborted`)."""
        return self._log(run_id).ended

    def count(self, run_id: str) -> int:
        """How many of the run's events the feed holds."""
        return len(self._log(run_id).texts)

    async def events(self, run_id: str, *, after: int = -1) -> AsyncIterator[tuple[int, str]]:
        """The run's events numbered past `after` (`-1`: from its first), as `(number, JSON text)`; it waits
        for each next one while the run goes on, and stops once the run's ending event was given.

        Raises:
            UsageError: the feed holds no run `run_id`.
        """
        log = self._log(run_id)
        position = max(after + 1, 0)
        while True:
            while position < len(log.texts):
                yield position, log.texts[position]
                position += 1
            if log.ended:
                return
            await log.grown.wait()

    def _log(self, run_id: str) -> _Log:
        log = self._logs.get(run_id)
        if log is None:
            raise UsageError(f"the feed holds no run {run_id!r}: give the feed to the run as its observer first")
        return log
