"""`RunStream`: a run as a stream of its events, for UIs and streaming APIs (`iter_tool_loop`,
`iter_tool_loop_tiered` and `ToolLoop.stream` make one).

The run is the ordinary loop running as a task, with one more observer that feeds a queue; the
stream reads that queue. So the stream sees exactly the events the hooks see, in the same order,
and there is no second loop body:

```python
async with iter_tool_loop(caller, agent, search, ctx) as run:
    async for event in run:
        ...  # match event.kind
result = run.result
```
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._events import Event
from agentkit._observe import Observer
from agentkit._results import ToolLoopResult
from agentkit.errors import UsageError

if TYPE_CHECKING:
    from typing import Self

__all__ = ["RunStream"]

Ctx = TypeVar("Ctx")
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=None)
ResultT = TypeVar("ResultT", bound=ToolLoopResult[Any, Any])


class _End:
    """Queued once the run's task is done: nothing follows it."""


_END = _End()


class _Feed(Observer):
    def __init__(self, queue: asyncio.Queue[Event | _End]) -> None:
        self.queue = queue

    def on_event(self, event: Event) -> None:
        # Unbounded on purpose: a hook cannot wait, and a run emits a handful of events per round.
        self.queue.put_nowait(event)


class RunStream(Generic[ResultT]):
    """One run as an async context manager and an async iterator of its events.

    Entering starts the run as a task; iterating yields each event as it happens (the last is
    `RunFinished`) and then stops; `result` holds what the loop returned. Leaving the block
    before the run has finished (`break`, an exception, cancellation) cancels the run and waits
    for it to unwind. An exception the run raises (`UsageError`, `ScriptExhausted`) is raised
    to the consumer, after the events that preceded it.
    """

    def __init__(self, start: Callable[[Observer], Coroutine[Any, Any, ResultT]]) -> None:
        self._start = start
        self._queue: asyncio.Queue[Event | _End] | None = None
        self._task: asyncio.Task[ResultT] | None = None
        self._exhausted = False
        self._raised = False

    async def __aenter__(self) -> Self:
        if self._task is not None:
            raise UsageError("this stream has already run; call iter_tool_loop(...) again for a new run")
        queue: asyncio.Queue[Event | _End] = asyncio.Queue()
        self._queue = queue
        self._task = asyncio.create_task(self._start(_Feed(queue)), name="agentkit-run")
        self._task.add_done_callback(lambda _: queue.put_nowait(_END))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        task = self._task
        assert task is not None
        if not task.done():
            task.cancel()
        await asyncio.wait([task])
        if task.cancelled():
            return
        error = task.exception()
        # A failure the consumer has not seen yet must not vanish with the block.
        if error is not None and exc is None and not self._raised:
            self._raised = True
            raise error

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        queue = self._require_started()[1]
        if self._exhausted:
            raise StopAsyncIteration
        item = await queue.get()
        if not isinstance(item, _End):
            return item
        self._exhausted = True
        task = self._require_started()[0]
        if not task.cancelled() and (error := task.exception()) is not None:
            self._raised = True
            raise error
        raise StopAsyncIteration

    @property
    def done(self) -> bool:
        """Whether the run has ended (with a result, an exception or a cancellation)."""
        return self._task is not None and self._task.done()

    @property
    def result(self) -> ResultT:
        """What the loop returned.

        Raises:
            UsageError: the run has not finished yet (iterate to the end or `await wait()`
                first), was cancelled, or raised instead of returning.
        """
        task = self._task
        if task is None or not task.done():
            raise UsageError("the run has not finished; iterate its events to the end or await run.wait() first")
        if task.cancelled():
            raise UsageError("the run was cancelled before it finished, so it has no result")
        error = task.exception()
        if error is not None:
            raise UsageError(f"the run raised {type(error).__name__} instead of returning a result") from error
        return task.result()

    async def wait(self) -> ResultT:
        """Wait for the run to finish (events not yet read stay queued) and return its result."""
        task = self._require_started()[0]
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._raised = True
            raise

    def _require_started(self) -> tuple[asyncio.Task[ResultT], asyncio.Queue[Event | _End]]:
        if self._task is None or self._queue is None:
            raise UsageError("enter the stream first: `async with iter_tool_loop(...) as run: async for event in run`")
        return self._task, self._queue
