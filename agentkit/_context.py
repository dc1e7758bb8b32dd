"""`ContextWindow`: a bound on how much of the earlier calls the executor is shown each round.

Without one, every round's `ToolRoundInfo` carries every earlier call with its whole batch, so a
long run re-sends everything it has gathered each round and its requests grow without bound. With
`LoopConfig(context=ContextWindow(...))` the executor is shown only the most recent calls:

- `last=N`: at most the last N calls;
- `max_chars=C`: the most recent calls whose measured size (`call_chars`) fits in C characters;
- `max_tokens=T`: the same with `T * chars_per_token` characters. This is an **estimate**, not a
  tokenizer count: no tokenizer is loaded; `chars_per_token` (default 4, the usual figure for
  English text with OpenAI's tokenizers) converts it. Code, JSON and other languages often run at
  2 to 3 characters a token, so lower it, or use `max_chars`, where that matters.

Bounds combine: the strictest one decides. The latest call is always shown, even when it alone is
over a character budget, so the executor always sees what its last call returned. `summarize`
adds a compaction step: each time calls drop out of the window, it folds them into a running
summary that the executor is shown in their place (`Omitted.summary`).

What is left out is counted on `ToolRoundInfo.omitted` (an `Omitted`); `reflective_prompt`
says so in the prompt. `result.items`, the trace and the checkpoint keep everything: only what
the executor (and the observers' `RoundStarted`) is shown is bounded.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from agentkit.errors import UsageError

if TYPE_CHECKING:
    from agentkit._agent import PriorCall

__all__ = ["ContextWindow", "Omitted", "SummaryCutOff", "Summarizer", "call_chars", "summarized"]


class Summarizer(Protocol):
    """Folds calls that left the window into a running summary: `(summary so far, calls) -> summary`.

    `summary` is `None` the first time; `calls` are the calls that have just left the window,
    oldest first (each is folded in exactly once). Sync or async; a summarizer that raises ends the
    run `ERROR` with `StopReason.EXECUTOR_ERROR`. The run's deadline bounds it: one still running
    then ends the run `DEADLINE` (an async one is cancelled; a sync one, run in a thread of
    agentkit's under a deadline, runs on until it returns, and its summary is dropped).
    """

    def __call__(self, summary: str | None, calls: tuple[PriorCall[Any], ...], /) -> str | Awaitable[str]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextWindow:
    """How much of the earlier calls the executor is shown: the last N, a character or token budget.

    Give at least one of `last`, `max_chars` and `max_tokens`; the strictest decides. Each is
    checked when the window is built: anything but a whole number >= 1 (or `None`) is a
    `UsageError`.

    Example:
        `LoopConfig(context=ContextWindow(last=3))` shows the executor the three latest calls.
    """

    last: int | None = None
    """Show at most this many of the latest calls (each with its batch or observation)."""
    max_chars: int | None = None
    """Show the latest calls whose `call_chars` sizes sum to at most this many characters."""
    max_tokens: int | None = None
    """Like `max_chars`, in estimated tokens: `max_tokens * chars_per_token` characters."""
    chars_per_token: float = 4.0
    """The estimate's characters per token (no tokenizer is used; see the module docstring)."""
    summarize: Summarizer | None = None
    """Folds the calls that leave the window into a running summary the executor is shown instead
    (on top of the bounds: the summary is not counted in `max_chars` or `max_tokens`).
    A function cannot be stored in a checkpoint: a run resumed from one that had a summarizer must
    be given it again (`resume_tool_loop(..., summarize=...)`)."""

    def __post_init__(self) -> None:
        _whole_or_none("last", self.last, "calls")
        _whole_or_none("max_chars", self.max_chars, "characters")
        _whole_or_none("max_tokens", self.max_tokens, "estimated tokens")
        ratio = self.chars_per_token
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not math.isfinite(ratio) or ratio <= 0:
            raise UsageError(f"ContextWindow.chars_per_token must be a finite number > 0; got {ratio!r}")
        if self.last is None and self.max_chars is None and self.max_tokens is None:
            raise UsageError(
                "ContextWindow needs a bound: give last= (calls), max_chars= or max_tokens=; "
                "for no bound, leave LoopConfig.context as None"
            )
        if self.summarize is not None and not callable(self.summarize):
            raise UsageError(f"ContextWindow.summarize must be a function or None; got {self.summarize!r}")

    @property
    def char_limit(self) -> float | None:
        """The character budget the window applies: the smaller of `max_chars` and `max_tokens`'s."""
        limits = [float(self.max_chars)] if self.max_chars is not None else []
        if self.max_tokens is not None:
            limits.append(self.max_tokens * self.chars_per_token)
        return min(limits, default=None)

    def start(self, sizes: Sequence[int]) -> int:
        """The index of the first call shown, given every call's size in characters, oldest first.

        It never moves back as calls are added (a call that left the window stays out).
        """
        count = len(sizes)
        first = max(0, count - self.last) if self.last is not None else 0
        limit = self.char_limit
        if limit is None:
            return first
        total, index = 0, count
        while index > first:
            size = sizes[index - 1]
            if index < count and total + size > limit:
                break  # the latest call is shown whatever its size
            total += size
            index -= 1
        return index


@dataclass(frozen=True, kw_only=True, slots=True)
class Omitted:
    """How much of the earlier calls a round's executor was not shown (all zero: nothing left out)."""

    calls: int = 0
    """Earlier calls left out (the oldest ones)."""
    batches: int = 0
    """Of those, the calls that ran and returned a batch (proposals and refusals have none)."""
    items: int = 0
    """Items in the left-out batches."""
    chars: int = 0
    """The left-out calls' size, as `call_chars` measures it."""
    summary: str | None = None
    """The `ContextWindow.summarize` summary of the left-out calls, when there is a summarizer."""

    def __bool__(self) -> bool:
        return self.calls > 0


def call_chars(call: PriorCall[Any]) -> int:
    """One call's size in characters, as the window measures it.

    The tool name and the JSON args, each item (a pydantic item as compact JSON, anything else as
    `str`) and the observation: about what `reflective_prompt` shows of the call with its default
    `render_item`, without its fixed framing (a custom `render_item` may show more or less).
    """
    size = len(call.tool_name) + 1 + len(call.args.model_dump_json())
    size += sum(len(item.model_dump_json() if isinstance(item, BaseModel) else str(item)) for item in call.batch)
    return size + len(call.observation or "")


class Window:
    """The window's state in one run: where it starts and the running summary (machinery of the loop)."""

    __slots__ = ("policy", "sizes", "summarized", "summary")

    def __init__(self, policy: ContextWindow | None, *, summary: str | None = None, summarized: int = 0) -> None:
        self.policy = policy
        self.sizes: list[int] = []
        """Each call's `call_chars`, measured once, when it joins the view."""
        self.summary = summary
        """The running summary (`None` until a summarizer first ran)."""
        self.summarized = summarized
        """How many of the oldest calls the summary covers."""

    def add(self, call: PriorCall[Any]) -> None:
        if self.policy is not None:
            self.sizes.append(call_chars(call))

    async def cut(
        self, calls: Sequence[PriorCall[Any]], ran: Sequence[bool], *, deadline: float | None = None
    ) -> tuple[int, Omitted]:
        """The index of the first call shown and what is left out; folds newly left-out calls into the summary,
        within `deadline` seconds when given (see `summarized`).

        Raises:
            SummaryCutOff: the deadline passed before the summarizer returned (the summary is unchanged).
            Exception: whatever the summarizer raised (the loop ends the run on it).
        """
        if self.policy is None:
            return 0, Omitted()
        start = max(self.policy.start(self.sizes), self.summarized if self.policy.summarize is not None else 0)
        summarize = self.policy.summarize
        if summarize is not None and start > self.summarized:
            summary = await summarized(summarize, self.summary, tuple(calls[self.summarized : start]), deadline)
            if not isinstance(summary, str):
                raise TypeError(f"ContextWindow.summarize must return a str; it returned {type(summary).__name__}")
            self.summary, self.summarized = summary, start
        left = calls[:start]
        omitted = Omitted(
            calls=start,
            batches=sum(ran[:start]),
            items=sum(len(call.batch) for call in left),
            chars=sum(self.sizes[:start]),
            summary=self.summary if start else None,
        )
        return start, omitted


class SummaryCutOff(Exception):
    """The run's deadline passed while `ContextWindow.summarize` ran (machinery: the run ends `DEADLINE`)."""


async def summarized(
    summarize: Summarizer, summary: str | None, calls: tuple[PriorCall[Any], ...], deadline: float | None
) -> object:
    """What `summarize(summary, calls)` returns, awaited if it is awaitable, within `deadline` seconds.

    Without a deadline a sync summarizer runs on the event loop, as a sync tool does. With one, an
    async summarizer is cancelled when the deadline passes, and a sync one runs in one of agentkit's
    threads for summarizers (`agentkit._tool_threads`) so that the run need not wait for it: Python
    cannot stop a thread, so one still running at the deadline runs on until it returns, and what it
    returns then is dropped.

    Raises:
        SummaryCutOff: the deadline passed first.
    """
    if deadline is None:
        folded = summarize(summary, calls)
        return await folded if inspect.isawaitable(folded) else folded
    # Imported here: `import agentkit` does not load asyncio (see agentkit._timing).
    from agentkit._timing import timeout_scope
    from agentkit._tool_threads import run_in_summary_thread

    scope = timeout_scope(deadline)
    try:
        async with scope:
            if inspect.iscoroutinefunction(summarize) or inspect.iscoroutinefunction(type(summarize).__call__):
                folded = summarize(summary, calls)
            else:
                name = getattr(summarize, "__qualname__", None) or type(summarize).__qualname__
                folded = await run_in_summary_thread(lambda held: summarize(*held), (summary, calls), name=name)
            return await folded if inspect.isawaitable(folded) else folded
    except TimeoutError:
        if scope.expired():
            raise SummaryCutOff from None
        raise  # the summarizer's own timeout: its failure, not the run's deadline


def _whole_or_none(name: str, value: object, unit: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"ContextWindow.{name} must be an int >= 1 ({unit}), or None; got {value!r}")
