"""`JournalFeed`: a journaled run's events, derived from the state the journal holds, for any process to serve.

A run's state (`RunCheckpoint`) is an append-only log of entries; its events are derived from those entries
in order, by one pure function (`derived_events`), so the events of a longer log begin with the events of any
shorter one: an event's number (`seq`) is its place in that list, the same in every read, in every process,
across every leg of a resumed run. That is what makes `Last-Event-ID` mean the same event after the serving
process restarted, or when the run went on in another process.

What the entries give, event by event:

- the run's start (`RunStarted`, from the journal's record of the run), and each later leg's, once an
  ended leg has an entry after it, with the round it goes on from and the decisions it settled;
- per round: its rationale (one `RationaleDelta` carrying the whole of it), then its call: started and
  returned (`ToolCallStarted`, `ToolResultReturned`), a proposal (`ProposalCaptured`), or a repeat
  (`DegenerationDetected`);
- an approved call that ran (a decision, or a standing grant's): its call started and returned;
- each leg's end (`RunFinished`, with the outcome, usage and rounds the entries add up to).

The journal records a round when it is over, so a follower sees a round's events together, once the round
ended: a `tool_call` comes with its `tool_result`; the deltas of a streamed step and each model attempt are
the in-process feed's (`RunFeed`), not the journal's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from agentkit._events import (
    Continued,
    Decided,
    DegenerationDetected,
    Event,
    ProposalCaptured,
    RationaleDelta,
    RunFinished,
    RunStarted,
    ToolCallStarted,
    ToolResultReturned,
    status_label,
)
from agentkit._jsonform import EventArgs
from agentkit._proposals import ProposedAction
from agentkit._results import RunEnding
from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome, RunCheckpoint, fold
from agentkit._tiers import Tier
from agentkit.errors import ReportedError, ResumeRefused, UsageError
from agentkit.journal._records import RunRecord, RunState

if TYPE_CHECKING:
    from agentkit.journal import Journal

__all__ = ["FeedRead", "JournalFeed", "derived_events"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FeedRead:
    """What one read of the journal gives of a run: its events so far (their JSON form), and whether it ended."""

    texts: tuple[str, ...]
    """The run's events derived so far, in order: the one at index `n` has `seq` `n`."""
    ended: bool
    """The journal records the run as over (finished, stopped at a proposal, or aborted): no event follows
    unless it is resumed."""


class JournalFeed:
    """A journaled run's events, read from its journal: what `create_app(journal=...)` serves.

    A run recorded by a `JournalObserver`, in this process or any other (a worker, a resumed run, a run
    started before this process), is followed from its state in the journal: its events are derived from
    the state's entries in order (see the module docstring), numbered by their place in that order, the
    same in every read and across the run's legs; while the run goes on, the journal is read again every
    `poll` seconds for its new entries.

    Args:
        journal: The journal the runs are recorded in (it stays the caller's to close).
        poll: Seconds between reads of the journal while a followed run goes on.
    """

    def __init__(self, journal: Journal, *, poll: float = 0.5) -> None:
        if isinstance(poll, bool) or not poll > 0:
            raise UsageError(f"JournalFeed(poll={poll!r}): give the seconds between reads, more than 0")
        self.journal = journal
        self.poll = float(poll)

    async def read(self, run_id: str) -> FeedRead:
        """The run's events so far, and whether it ended.

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the journal's state of the run cannot be read, or does not verify.
        """
        events, ended = await self._derived(run_id)
        return FeedRead(texts=tuple(event.to_json() for event in events), ended=ended)

    async def _derived(self, run_id: str) -> tuple[list[Event], bool]:
        """The run's events as the journal holds them now, and whether the run is over."""
        # The record first: a run it shows over has every entry of its end stored already, so the state read
        # after it holds them (read the other way round, an end recorded in between would be missed).
        record = await self.journal.run(run_id)
        state = await _state(self.journal, run_id)
        return derived_events(record, state), record.state is not RunState.UNFINISHED

    async def events(self, run_id: str, *, after: int = -1) -> AsyncIterator[tuple[int, str]]:
        """The run's events numbered past `after` (`-1`: from its first), as `(number, JSON text)`; it reads
        the journal again every `poll` seconds while the run goes on, and stops once it is over.

        Raises:
            UnknownId: the journal never saw the run.
            ResumeRefused: the journal's state of the run cannot be read, or does not verify.
        """
        position = max(after + 1, 0)
        while True:
            events, ended = await self._derived(run_id)  # only the events not sent yet are written as JSON
            for number in range(position, len(events)):
                yield number, events[number].to_json()
            position = max(position, len(events))
            if ended:
                return
            await asyncio.sleep(self.poll)


async def _state(journal: Journal, run_id: str) -> RunCheckpoint | None:
    """The run's state; `None` while the journal holds none (a run whose first checkpoint is not stored yet)."""
    try:
        return await journal.state(run_id)
    except ResumeRefused:
        # `state` refuses both a state that does not read and a run with none: tell them apart by the record.
        record = await journal.run(run_id)
        if record.checkpoint_round is not None:
            raise
        return None


def derived_events(record: RunRecord, state: RunCheckpoint | None) -> list[Event]:
    """The run's events, derived from the journal's record of it and its state's entries, in order, each
    numbered (`seq`) by its place. The events of a state are the first events of any state it grows into."""
    return [dataclasses.replace(event, seq=seq) for seq, event in enumerate(_Derivation(record, state).run())]


class _Derivation:
    """One pass over a state's entries, in order (what it needs to know of the entries before each)."""

    def __init__(self, record: RunRecord, state: RunCheckpoint | None) -> None:
        self.record = record
        self.run_id = record.id
        self.entries: Sequence[RoundEntry | DecisionEntry | EndEntry] = () if state is None else state.entries
        self.stateless = state is None
        """The journal holds no state of the run: it is not a tool loop (a finished tool loop's state holds its end)."""
        self.proposals: dict[tuple[int, str], RoundEntry] = {}
        self.calls: dict[str, int] = {}
        """How many calls of each tool the events so far started (`ToolCallStarted.count`)."""
        self.rationale_of = 0
        """The last round whose rationale was given (a step of several calls records one entry per call)."""
        self.last_round = 0
        self.last_trace: str | None = None

    def run(self) -> Iterator[Event]:
        tools: object = self.record.config.get("tools")
        ceiling: object = self.record.config.get("max_rounds")
        start = RunStarted(
            run_id=self.run_id,
            agent=self.record.agent,
            model=self.record.model,
            tools=tuple(str(name) for name in cast("list[object]", tools)) if isinstance(tools, list) else (),
            max_rounds=ceiling if isinstance(ceiling, int) else None,
        )
        yield start
        if self.stateless and self.record.state is RunState.FINISHED and self.record.outcome is not None:
            yield self.recorded_end()  # a run with no state (not a tool loop): its end, as the journal recorded it
            return
        leg_ended = False
        for index, entry in enumerate(self.entries):
            if leg_ended:
                # A later leg: it shows once its first entry is stored. The decisions it settles come first, and
                # are stored together (one checkpoint), so the ones after the end are all of them.
                yield dataclasses.replace(start, continues=self.continued(index))
                leg_ended = False
            if isinstance(entry, RoundEntry):
                yield from self.round(entry, index)
            elif isinstance(entry, DecisionEntry):
                yield from self.decision(entry)
            else:
                yield self.finished(entry, index)
                leg_ended = True

    def continued(self, index: int) -> Continued:
        decisions: list[Decided] = []
        for entry in self.entries[index:]:
            if not isinstance(entry, DecisionEntry):
                break
            proposal = self.proposals.get((entry.round, entry.call_digest))
            decisions.append(
                Decided(
                    round=entry.round,
                    tool_name="" if proposal is None else proposal.tool or "",
                    tier=None if proposal is None else proposal.tier,
                    approved=entry.approved,
                    by=entry.by,
                )
            )
        return Continued(run_id=self.run_id, round=self.last_round, trace=self.last_trace, decisions=tuple(decisions))

    def round(self, entry: RoundEntry, index: int) -> Iterator[Event]:
        self.last_round, self.last_trace = max(self.last_round, entry.round), entry.trace
        if entry.rationale and entry.round != self.rationale_of:
            self.rationale_of = entry.round
            text = str(entry.rationale)
            yield RationaleDelta(run_id=self.run_id, round=entry.round, attempt=1, text=text, delta=text)
        outcome = entry.outcome
        if outcome is RoundOutcome.PROPOSED:
            assert entry.call_digest is not None
            self.proposals[(entry.round, entry.call_digest)] = entry
            # A standing grant's approval follows at once (stored with it: a round's entries are stored together), and
            # the run shows no proposal for it, only the call that ran.
            if not self.granted(entry, index):
                yield self.proposal(entry)
        elif outcome is RoundOutcome.RAN or outcome is RoundOutcome.RETRIED:
            yield from self.call(entry, entry.args, batch=entry.batch, observation=entry.observation)
        elif outcome is RoundOutcome.REFUSED:
            yield self.repeat(entry, refused=True)
        elif outcome is RoundOutcome.ENDED and entry.tool is not None:
            if entry.error is None:  # the call repeated a recent one: a stalemate
                yield self.repeat(entry, refused=False)
            elif entry.tier is not None and entry.tool_seconds > 0:  # the tool ran, and failed
                yield from self.call(entry, entry.args, batch=None, error=entry.error)

    def granted(self, entry: RoundEntry, index: int) -> bool:
        after = self.entries[index + 1] if index + 1 < len(self.entries) else None
        return (
            isinstance(after, DecisionEntry)
            and (after.round, after.call_digest) == (entry.round, entry.call_digest)
            and after.approved
        )

    def decision(self, entry: DecisionEntry) -> Iterator[Event]:
        proposal = self.proposals.get((entry.round, entry.call_digest))
        if proposal is None or not entry.approved:
            return  # a rejection is the leg's `RunStarted.continues`; nothing ran
        ran = proposal.model_copy(update={"tool_seconds": entry.tool_seconds})  # the call as decided, timed as run
        args = proposal.args if entry.args is None else entry.args  # amended: the args that ran
        yield from self.call(ran, args, batch=entry.batch, observation=entry.observation, error=entry.error)

    def call(
        self,
        entry: RoundEntry,
        args: str | None,
        *,
        batch: str | None,
        observation: str | None = None,
        error: str | None = None,
    ) -> Iterator[Event]:
        tool = str(entry.tool)
        count = self.calls[tool] = self.calls.get(tool, 0) + 1
        yield ToolCallStarted(
            run_id=self.run_id,
            round=entry.round,
            tool_name=tool,
            tier=entry.tier if entry.tier is not None else Tier.IRREVERSIBLE,  # a call that ran declares one
            args=_args(args),
            count=count,
            label=status_label(tool, count),
        )
        yield ToolResultReturned(
            run_id=self.run_id,
            round=entry.round,
            tool_name=tool,
            batch_size=_size(batch),
            seconds=entry.tool_seconds,
            observation=None if observation is None else str(observation),
            error=None if error is None else _error(error),
        )

    def proposal(self, entry: RoundEntry) -> ProposalCaptured:
        assert entry.tier is not None
        assert entry.call_digest is not None
        action = ProposedAction[EventArgs](
            tool_name=str(entry.tool),
            tier=entry.tier,
            args=_args(entry.args),
            rationale=str(entry.rationale),
            round=entry.round,
            run_id=self.run_id,
            created_at=datetime.fromisoformat(entry.proposed_at) if entry.proposed_at else _UNKNOWN_TIME,
            digest=entry.call_digest,
        )
        return ProposalCaptured(run_id=self.run_id, proposal=action)

    def repeat(self, entry: RoundEntry, *, refused: bool) -> DegenerationDetected:
        return DegenerationDetected(
            run_id=self.run_id, round=entry.round, tool_name=str(entry.tool), args=_args(entry.args), refused=refused
        )

    def recorded_end(self) -> RunFinished:
        record = self.record
        assert record.outcome is not None
        assert record.stop_reason is not None
        ending = RunEnding(
            outcome=record.outcome,
            stop_reason=record.stop_reason,
            error=None if record.error is None else _ended_by(record.error),
            usage=record.usage,
            rounds=record.rounds,
            run_id=self.run_id,
        )
        return RunFinished(run_id=self.run_id, result=ending)

    def finished(self, entry: EndEntry, index: int) -> RunFinished:
        progress = fold(self.entries[: index + 1])
        ending = RunEnding(
            outcome=entry.outcome,
            stop_reason=entry.stop_reason,
            error=None if entry.error is None else _ended_by(str(entry.error)),
            usage=progress.usage,
            rounds=progress.rounds,
            run_id=self.run_id,
        )
        return RunFinished(run_id=self.run_id, result=ending)


_UNKNOWN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""A proposal's time where its entry recorded none (every proposal does): fixed, so that each read agrees."""


def _args(text: str | None) -> EventArgs:
    value: object = None if text is None else json.loads(text)
    return EventArgs.model_validate(value if isinstance(value, dict) else {})


def _size(batch: str | None) -> int:
    items: object = None if batch is None else json.loads(batch)
    return len(cast("list[object]", items)) if isinstance(items, list) else 0


def _error(text: str) -> ReportedError:
    # The state keeps an error's message, not its class: a failed call's reads back as a `ToolError`.
    return ReportedError(text, type_name="ToolError")


def _ended_by(text: str) -> ReportedError:
    # As `_error`: what ended the run is named by its message; its class is the root's.
    return ReportedError(text, type_name="AgentkitError")
