"""What a run shows and gathers: the executor's and the observers' views of the calls so far, the context
window, the repeat window and the items; built from the state's entries and kept up to date as they grow."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agentkit._agent import PriorCall, ToolRoundInfo
from agentkit._cites import DEFAULT_KEY, item_id
from agentkit._codec import Codec, decoded_args, decoded_batch
from agentkit._config import LoopConfig
from agentkit._context import Omitted, SummaryCutOff, Window
from agentkit._copy import owned
from agentkit._outcome import StopReason
from agentkit._proposals import CallSeen, Evidence, ProposedAction, call_digest, task_text, text_digest
from agentkit._session import executor_failed
from agentkit._state import Progress
from agentkit._usage import Usage, counting_runs
from agentkit.errors import ExecutorError

__all__ = ["View", "Views"]


def _own(item: Any) -> Any:
    """A deep copy of one item, or the item itself when it cannot be copied (a live handle, say)."""
    try:
        return copy.deepcopy(item)
    except Exception:  # an uncopyable item is shown as it is; see docs/loops.md
        return item


def _owned(codec: Codec, tool: str, batch: Sequence[Any], kept: str | None) -> tuple[Any, ...]:
    """An audience's own copy of a batch: read back from the state's text of it, as a resumed run reads it.

    That is a fresh value of the tool's item type, made in a few microseconds where a deep copy of
    the same items costs ten times as much. A batch the state does not keep (`kept` is `None`: its
    items are not of a type JSON carries), or whose text does not read back, is deep-copied.
    """
    if kept is not None:
        try:
            return tuple(codec.decode_batch(tool, kept))
        except Exception:  # not read back as it was written (a validator that refuses its own output)
            pass
    return tuple(_own(item) for item in batch)


class View:
    """What one audience (the executor; the observers) is shown of the run so far.

    Its own copies, made once per entry: nothing it does to what it is shown can reach the run
    (the items, the repeat guard, the proposals) or the other audience. What a round's info is made
    of is kept as it grows (the batches of the calls that ran, and where each call's are), so a
    round costs the same however many calls came before it.
    """

    __slots__ = ("calls", "proposals", "ran", "results", "results_before")

    def __init__(self) -> None:
        self.calls: list[PriorCall[Any]] = []
        self.ran: list[bool] = []
        """Whether each call ran (and so has a batch in `prior_results`)."""
        self.results: list[tuple[Any, ...]] = []
        """The batch of each call that ran, in order (`prior_results`)."""
        self.results_before: list[int] = []
        """For each call, how many entries of `results` the calls before it made."""
        self.proposals: list[ProposedAction[Any]] = []

    def add(
        self, call: PriorCall[Any], *, ran: bool, proposal: ProposedAction[Any] | None, batch: tuple[Any, ...]
    ) -> None:
        """Show `call`, with `batch`, this view's own copy of its batch."""
        self.ran.append(ran)
        self.results_before.append(len(self.results))
        if ran:
            self.results.append(batch)
        self.calls.append(
            PriorCall(
                round=call.round,
                tool_name=call.tool_name,
                args=owned(call.args),
                batch=batch,
                observation=call.observation,
                proposed=call.proposed,
                repeats=call.repeats,
                amended=call.amended,
            )
        )
        if proposal is not None:
            self.proposals.append(proposal.model_copy(deep=True))

    def info(
        self,
        round: int,
        max_rounds: int | None,
        start: int,
        omitted: Omitted,
        *,
        closing: bool = False,
        closed_by: StopReason | None = None,
        repeated: PriorCall[Any] | None = None,
    ) -> ToolRoundInfo[Any]:
        """The round's info, showing the calls from `start` on (`LoopConfig.context`); a closing round's says
        why the tools stopped (`closed_by`, and the `repeated` call of a stalemate)."""
        first = self.results_before[start] if start < len(self.calls) else len(self.results)
        return ToolRoundInfo(
            round=round,
            max_rounds=max_rounds,
            is_final_round=closing or round == max_rounds,
            closing_round=closing,
            closed_by=closed_by,
            repeated=repeated,
            prior_results=tuple(self.results[first:]),
            prior_calls=tuple(self.calls[start:]),
            proposals=tuple(self.proposals),
            omitted=omitted,
        )


UNSEEN = View()
"""The view of observers that do not read the calls (`Observer.sees_calls`): always empty."""


class Views:
    """The run's views, items, context window and repeat window: what it has shown and gathered."""

    def __init__(self, config: LoopConfig, codec: Codec, *, observers: bool, watching: bool) -> None:
        self.config = config
        self.codec = codec
        self.items: list[Any] = []
        self.shown = View()
        """The executor's view: what `render` gets."""
        self.watched = View() if watching else None
        """The observers' view: what `RoundStarted` carries (`None`: no observer reads the calls;
        with observers, their `RoundStarted` shows none)."""
        self.observers = observers
        self.window = Window(config.context)
        """What of the views each round shows (`LoopConfig.context`)."""
        self.summarized: tuple[str, int] | None = None
        """A summary the window made this round, for the round's entry (taken by `take_summary`)."""
        self.summary_usage = Usage()
        """What the runs the summarizer made this round spent (taken by `take_summary_usage`)."""
        self.summarizes = config.context is not None and config.context.summarize is not None
        """The window has a summarizer, whose runs are counted (`counting_runs`) while it runs."""
        self.recent: list[tuple[str, BaseModel]] = []
        self.recent_rounds: list[int] = []
        """The round of each entry of `recent`."""
        self.refusals = 0
        self.executed = 0
        """Calls that ran and returned a batch (`LoopConfig.min_calls` counts them)."""
        self.named: list[tuple[str | None, str | None]] = []
        """For each call the executor is shown, its proposal's digest (`None`: not a proposal) and the state's
        text of its args, from which `evidence` takes its `call_digest` (only a proposal's evidence reads it)."""
        self.seen: list[CallSeen] = []
        """The calls of `evidence` so far (each made once, by the first proposal after it)."""
        self.calls_of: Counter[str] = Counter()
        """How many calls of each tool the run has made (run, retried, proposed or refused), its earlier legs'
        included (`ToolCallStarted.count`)."""

    def load(self, progress: Progress) -> None:
        """The views, the items, the repeat window and the context window, from what the state's entries add up to."""
        codec = self.codec
        self.refusals = progress.refusals
        self.window.summary, self.window.summarized = progress.summary, progress.summarized
        for view in progress.calls:
            args = decoded_args(codec, view.tool, view.args)
            batch = () if view.batch is None else tuple(decoded_batch(codec, view.tool, view.batch))
            call = PriorCall(
                round=view.round,
                tool_name=view.tool,
                args=args,
                batch=batch,
                observation=view.observation,
                proposed=view.proposed,
                repeats=view.repeats,
                amended=view.amended,
            )
            self.called(call, ran=view.ran, kept=view.batch, args=view.args)
            if view.counted:
                self.counted(view.tool, args, view.round)

    def evidence(self, round: int, ctx: object) -> Evidence:
        """What the executor had been shown before `round`: the run's task (`ctx`), its rounds and calls, by
        reference."""
        shown = self.shown
        for index in range(len(self.seen), len(shown.calls)):
            call = shown.calls[index]
            item_ids = tuple(i for i in (_item_id(item) for item in call.batch) if i is not None)
            seen = CallSeen(
                round=call.round,
                tool_name=call.tool_name,
                digest=_digest(call.tool_name, call.args, *self.named[index]),
                ran=shown.ran[index],
                item_ids=item_ids,
            )
            self.seen.append(seen)
        return Evidence(rounds=tuple(range(1, round)), calls=tuple(self.seen), task=task_text(ctx))

    def called(
        self,
        call: PriorCall[Any],
        *,
        ran: bool,
        proposal: ProposedAction[Any] | None = None,
        kept: str | None = None,
        args: str | None = None,
    ) -> None:
        """A call joins what the executor and the observers are shown (each their own copy), and the items.

        `kept` is the state's text of the call's batch, which each audience's copy is read back from;
        `args` the state's text of its args, which its digest is taken from where it can be.
        """
        tool, batch = call.tool_name, call.batch
        self.calls_of[tool] += 1
        self.named.append((None if proposal is None else proposal.digest, args))
        self.shown.add(call, ran=ran, proposal=proposal, batch=_owned(self.codec, tool, batch, kept) if batch else ())
        self.window.add(call)
        if self.watched is not None:
            copied = _owned(self.codec, tool, batch, kept) if batch else ()
            self.watched.add(call, ran=ran, proposal=proposal, batch=copied)
        if ran:
            self.executed += 1
            self.items.extend(call.batch)

    def counted(self, tool: str, args: BaseModel, round: int) -> None:
        """A call joins the repeat window."""
        self.recent.append((tool, args))
        self.recent_rounds.append(round)

    def take_summary(self) -> tuple[str, int] | None:
        """The summary the window made this round, once (for the round's entry)."""
        summarized, self.summarized = self.summarized, None
        return summarized

    def take_summary_usage(self) -> Usage:
        """What the summarizer's own model calls spent since last taken, once (for the round's usage)."""
        usage, self.summary_usage = self.summary_usage, Usage()
        return usage

    async def infos(
        self,
        round: int,
        *,
        closing: bool = False,
        deadline: float | None = None,
        closed_by: StopReason | None = None,
        repeated: PriorCall[Any] | None = None,
    ) -> tuple[ToolRoundInfo[Any], ToolRoundInfo[Any] | None] | ExecutorError | SummaryCutOff:
        """The round's info for the executor and for the observers, bounded by `LoopConfig.context`; the
        error of a summarizer that failed, or the `SummaryCutOff` of one the run's `deadline` left behind."""
        before = self.window.summarized
        try:
            if self.summarizes:
                with counting_runs() as spent:
                    try:
                        start, omitted = await self.window.cut(self.shown.calls, self.shown.ran, deadline=deadline)
                    finally:
                        self.summary_usage = sum(spent, self.summary_usage)
            else:
                start, omitted = await self.window.cut(self.shown.calls, self.shown.ran, deadline=deadline)
        except SummaryCutOff as cut:
            return cut
        except ExecutorError as refused:  # every thread for summarizers is held (agentkit._tool_threads)
            return refused
        except Exception as raised:
            return executor_failed("context summarizer (ContextWindow.summarize)", raised)
        if self.window.summarized != before and self.window.summary is not None:
            self.summarized = (self.window.summary, self.window.summarized)
        ceiling = self.config.max_rounds
        watched = None
        if self.watched is not None:
            watched = self.watched.info(round, ceiling, start, omitted, closing=closing, closed_by=closed_by)
        elif self.observers:
            watched = UNSEEN.info(round, ceiling, 0, omitted, closing=closing, closed_by=closed_by)
        if watched is not None and repeated is not None:
            watched = dataclasses.replace(watched, repeated=_own(repeated))  # the observers' own copy
        shown = self.shown.info(round, ceiling, start, omitted, closing=closing, closed_by=closed_by, repeated=repeated)
        return shown, watched


def _digest(tool: str, args: BaseModel, digest: str | None, text: str | None) -> str:
    """`call_digest(tool, args)`: `digest` where the call's proposal has it, else from `text`, the state's
    `json_text` of the args, where that is the digest's own canonical JSON (it differs only in escaping what is
    not ASCII, so text without a `\\u` escape is both)."""
    if digest is not None:
        return digest
    if text is None or "\\u" in text:
        return call_digest(tool, args)
    return text_digest(tool, text)


def _item_id(item: object) -> str | None:
    """An item's reference: its `id`, or the field its type names with `cite_key`."""
    return item_id(item, getattr(type(item), "cite_key", DEFAULT_KEY))
