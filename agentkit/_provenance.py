"""Provenance tracking: which calls of a run brought untrusted content in, and where its values came from.

The run records, entry by entry, which calls returned untrusted content (`RoundEntry.untrusted`,
`DecisionEntry.untrusted`, stamped by `Tracker.stamp` as each entry is appended); once one has, the run
is *tainted* and its `ProvenancePolicy` (`agentkit._trust`) lowers its autonomy: no call above
`ProvenancePolicy.ceiling` runs live, and no egress call does at all. Such calls become proposals, as
calls above the tier ceiling are.

Every call's arguments are also matched against what the run has read (`Tracker.origins`): a value
(or a word of it) of at least `ProvenancePolicy.min_match` characters, or a shorter value found whole,
whose *first* appearance, in the order the run read things (the task first, then each result), is in
untrusted content, is marked with that content's call; so is one that first appeared in a trusted result
of a call made after untrusted content entered the run (`ArgOrigin.steered`): that content may have
chosen the call. A proposal records the untrusted results that preceded it and those marks
(`CallProvenance`, in its `Evidence`), so a person deciding it sees that an IBAN came from a
document and not from the task.

Everything here is folded from the run's state entries (`Tracker.absorb`, `Tracker.catch_up`), so a
resumed, forked, journaled or Temporal run keeps its taint: the entries are the record.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from agentkit._proposals import Evidence, text_digest
from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome, RunCheckpoint
from agentkit._tiers import Tier, runs_live
from agentkit._trust import (
    ArgOrigin,
    CallProvenance,
    ItemOrigin,
    Origin,
    ProvenancePolicy,
    RunProvenance,
    Trust,
    declared_trust,
    held_by_policy,
    leaves,
    normalised,
    pieces,
    texts_of,
    word_key,
    words,
)

if typing.TYPE_CHECKING:
    from agentkit._views import Views

__all__ = ["Tracker", "provenance_at", "run_provenance", "task_source", "with_provenance"]

_VALUE_LIMIT = 200


@dataclass(slots=True)
class _Source:
    parts: list[str]
    """Its strings, as read."""
    origin: Origin | None
    """`None`: trusted content (the task, a trusted tool's result) read before any untrusted content."""
    steered: bool = False
    """A trusted result of a call made after untrusted content entered the run."""
    text: str = field(init=False)
    """`parts`, normalised and joined: what a value of `min_match` characters or more is found in."""
    whole: frozenset[str] | None = field(default=None, init=False)
    """Its whole words and values (made the first time a short value is matched)."""

    def __post_init__(self) -> None:
        self.text = normalised("\n".join(self.parts))

    def words(self) -> frozenset[str]:
        if self.whole is None:
            self.whole = words(self.parts)
        return self.whole


def _digest_of(tool: str, args: str | None) -> str:
    """`call_digest` of a call from the state's `json_text` of its args."""
    if args is None:
        return ""
    if "\\u" not in args:
        return text_digest(tool, args)
    canonical = json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text_digest(tool, canonical)


def _content(*texts: str | None) -> list[str]:
    """The strings of a result as matching reads them: every string of its JSON (a batch), or the text itself."""
    parts: list[str] = []
    for text in texts:
        if not text:
            continue
        try:
            parts.extend(texts_of(json.loads(text)))
        except ValueError:
            parts.append(text)
    return parts


@dataclass(slots=True)
class Tracker:
    """One run's provenance, folded from its state's entries as they are appended (`absorb`): which calls
    brought untrusted content in, what the run read in order (for `origins`), and whether it is tainted."""

    policy: ProvenancePolicy | None
    tools: Mapping[str, object]
    """The run's tools by name: each one's trust is read when its result is recorded."""
    autonomy: Tier = Tier.REVERSIBLE
    """The run's `LoopConfig.autonomy` (whether a proposal was held by the policy or by its tier)."""
    sources: list[_Source] = field(default_factory=list)
    """What the run read, in order, as matching reads it (`_content`), up to the reads still `unread`."""
    unread: list[tuple[tuple[str | None, ...], Origin | None, bool]] = field(default_factory=list)
    """Reads whose text is not made yet: made in order, only when a call's args are matched (`origins`), which
    happens only once untrusted content entered the run; a run that never reads any never pays for it."""
    untrusted: list[Origin] = field(default_factory=list)
    latest: int = 0
    """The highest round of the entries absorbed so far: how far the run had got."""
    tainted_round: int | None = None
    """How far the run had got (`latest`) when untrusted content was first read: a call of a later round was
    chosen with it in the model's context (a call of that round or earlier was chosen before, even one approved
    and run after it)."""
    untrusted_entries: set[int] = field(default_factory=set)
    """The indices of the entries whose call brought untrusted content in (a decided proposal: its round entry's)."""
    proposed: dict[tuple[int, str], tuple[int, str, str | None]] = field(default_factory=dict)
    """Each proposal by (round, digest): its entry's index, its tool and its args text."""
    seen: int = 0
    """How many of the state's entries have been absorbed."""

    @classmethod
    def start(
        cls, policy: ProvenancePolicy | None, tools: Mapping[str, object], task: list[str] | None, autonomy: Tier
    ) -> Tracker:
        tracker = cls(policy, tools, autonomy)
        if task:
            tracker.sources.append(_Source(task, None))
        return tracker

    @property
    def tainted(self) -> bool:
        """Untrusted content has entered the run."""
        return bool(self.untrusted)

    def stamp(self, entry: RoundEntry | DecisionEntry | EndEntry) -> RoundEntry | DecisionEntry | EndEntry:
        """`entry` with its provenance set (before it is appended): whether its call brought untrusted content
        in, and which of its args first appeared in untrusted content."""
        if self.policy is None:
            return entry
        changes: dict[str, Any] = {}
        if isinstance(entry, RoundEntry) and entry.tool is not None:
            if entry.outcome in (RoundOutcome.RAN, RoundOutcome.RETRIED) and self._untrusted(entry.tool):
                changes["untrusted"] = True
            if self.untrusted and entry.args is not None and entry.outcome is not RoundOutcome.DONE:
                # Not from a result of the call's own round: a call of a step of several is recorded once it
                # ran, perhaps after the step's other calls, whose results it was chosen without.
                found = self.origins(json.loads(entry.args))
                paths = tuple(dict.fromkeys(o.path for o in found if o.origin.round < entry.round))
                if paths:
                    changes["from_untrusted"] = paths
        elif isinstance(entry, DecisionEntry) and entry.approved and entry.error is None:
            proposed = self.proposed.get((entry.round, entry.call_digest))
            if proposed is not None and self._untrusted(proposed[1]):
                changes["untrusted"] = True
        return entry.model_copy(update=changes) if changes else entry

    def _untrusted(self, tool: str) -> bool:
        return tool not in self.tools or declared_trust(self.tools[tool]) is Trust.UNTRUSTED

    def absorb(self, index: int, entry: RoundEntry | DecisionEntry | EndEntry) -> None:
        """Take in the state's entry at `index` (appended, or read back from a stored state)."""
        self.seen = max(self.seen, index + 1)
        if isinstance(entry, RoundEntry | DecisionEntry):
            self.latest = max(self.latest, entry.round)
        if isinstance(entry, RoundEntry) and entry.tool is not None:
            if entry.outcome is RoundOutcome.PROPOSED and entry.call_digest is not None:
                self.proposed[(entry.round, entry.call_digest)] = (index, entry.tool, entry.args)
            if entry.outcome in (RoundOutcome.RAN, RoundOutcome.RETRIED):
                self._read(index, entry.round, entry.tool, entry.args, entry.untrusted, entry.batch, entry.observation)
        elif isinstance(entry, DecisionEntry) and entry.approved:
            proposed = self.proposed.get((entry.round, entry.call_digest))
            if proposed is not None:
                at, tool, args = proposed
                args = entry.args if entry.args is not None else args
                self._read(at, entry.round, tool, args, entry.untrusted, entry.batch, entry.observation)

    def _read(self, index: int, round: int, tool: str, args: str | None, untrusted: bool, *texts: str | None) -> None:
        policy = self.policy
        tainted = self.tainted_round
        steered = not untrusted and policy is not None and policy.steered and tainted is not None and tainted < round
        origin = Origin(round=round, tool_name=tool, digest=_digest_of(tool, args)) if untrusted or steered else None
        if untrusted:
            assert origin is not None
            self.untrusted.append(origin)
            self.untrusted_entries.add(index)
            if tainted is None:
                self.tainted_round = self.latest
        self.unread.append((texts, origin, steered))

    def _sources(self) -> list[_Source]:
        """`sources`, with the reads still unread made (in the order they were read)."""
        for texts, origin, steered in self.unread:
            parts = _content(*texts)
            if parts:
                self.sources.append(_Source(parts, origin, steered))
        self.unread.clear()
        return self.sources

    def catch_up(self, entries: typing.Sequence[RoundEntry | DecisionEntry | EndEntry]) -> None:
        """Absorb the entries of a stored state not absorbed yet (a resumed or forked run's)."""
        for index in range(self.seen, len(entries)):
            self.absorb(index, entries[index])

    def origins(self, value: object, policy: ProvenancePolicy | None = None) -> tuple[ArgOrigin, ...]:
        """The pieces of a JSON value (a call's args, an answer) whose first appearance in what the run read
        was in untrusted content; empty for a run that read none."""
        policy = policy or self.policy
        if policy is None or not self.untrusted:
            return ()
        found: list[ArgOrigin] = []
        sources = self._sources()
        for path, text in leaves(value):
            mark = _first_untrusted(text, policy, sources)
            if mark is not None:
                piece, source = mark
                assert source.origin is not None
                found.append(ArgOrigin(path=path, value=piece, origin=source.origin, steered=source.steered))
        return tuple(found)

    def held(self, tool: object, tier: Tier) -> bool:
        """Whether the policy keeps this call from running live now."""
        return held_by_policy(tool, tier, self.policy, self.tainted)

    def call(self, args: object, *, held: bool) -> CallProvenance | None:
        """A proposal's provenance (`None`: the policy is off)."""
        if self.policy is None:
            return None
        return CallProvenance(untrusted=tuple(self.untrusted), from_untrusted=self.origins(args), held=held)


def _first_untrusted(text: str, policy: ProvenancePolicy, sources: list[_Source]) -> tuple[str, _Source] | None:
    """The piece of one argument value that first appeared in untrusted (or steered) content, and that content:
    the whole value or its first word that matched (one mark per value); a short value only whole."""
    for piece in pieces(text, policy.min_match):
        key = normalised(piece)
        first = next((source for source in sources if key in source.text), None)
        if first is not None and first.origin is not None:
            return piece[:_VALUE_LIMIT], first
    key = word_key(text)
    if policy.short_values and 0 < len(key) < policy.min_match:
        first = next((source for source in sources if key in source.words()), None)
        if first is not None and first.origin is not None:
            return text[:_VALUE_LIMIT], first
    return None


def task_source(ctx: object) -> list[str] | None:
    """A run's task as matching reads it (trusted, read first): a `str` ctx; or a pydantic model's JSON and each
    string of it (so a short value of the task is one of its whole words); `None` for any other ctx (then every
    value is judged by the tool results alone)."""
    if isinstance(ctx, str):
        return [ctx]
    if isinstance(ctx, BaseModel):
        try:
            return [ctx.model_dump_json(), *texts_of(ctx.model_dump(mode="json"))]
        except ValueError:
            return None
    return None


def with_provenance(evidence: Evidence, tracker: Tracker, tool: object, tier: Tier, args: BaseModel) -> Evidence:
    """A proposal's evidence with its provenance (unchanged when the policy is off)."""
    if tracker.policy is None:
        return evidence
    autonomy = tracker.autonomy
    held = runs_live(tier, autonomy) and tracker.held(tool, tier)
    provenance = tracker.call(args.model_dump(mode="json"), held=held)
    return evidence.model_copy(update={"provenance": provenance})


def run_provenance(tracker: Tracker, state: RunCheckpoint, views: Views, answer: object) -> RunProvenance | None:
    """What the run's result says of its provenance (`None`: the policy is off)."""
    if tracker.policy is None:
        return None
    found: list[ItemOrigin] = []
    shown = views.shown
    for view, call, ran in zip(state.progress.calls, shown.calls, shown.ran, strict=False):
        if ran:
            trust = Trust.UNTRUSTED if view.entry in tracker.untrusted_entries else Trust.TRUSTED
            found += [ItemOrigin(round=view.round, tool_name=view.tool, trust=trust)] * len(call.batch)
    answered = answer is not None and tracker.tainted
    marks: tuple[ArgOrigin, ...] = ()
    if answered:
        try:
            marks = tracker.origins(_jsonable(answer))
        except (TypeError, ValueError):  # an answer JSON cannot carry: its text is not matched
            marks = ()
    return RunProvenance(
        untrusted=tuple(tracker.untrusted),
        items=tuple(found),
        answer_after_untrusted=answered,
        answer_from_untrusted=marks,
    )


def _jsonable(value: object) -> object:
    return TypeAdapter(type(value)).dump_python(value, mode="json")


def provenance_at(state: RunCheckpoint, entry: RoundEntry, tools: Mapping[str, object]) -> CallProvenance | None:
    """The provenance of the call `entry` (one of `state`'s entries) proposed, folded from the entries before
    it, for a proposal rebuilt from a stored state (a Temporal run's pending proposals); `None`: the run has
    no policy. Its marks are those its entry recorded (`RoundEntry.from_untrusted`), which were judged with
    the run's task in view."""
    record = state.config.provenance
    if record is None or entry.tool is None or entry.args is None:
        return None
    policy = record.rebuild()
    index = next(i for i, candidate in enumerate(state.entries) if candidate is entry)
    tracker = Tracker.start(policy, tools, None, state.config.autonomy)
    tracker.catch_up(state.entries[:index])
    marks = tuple(m for m in tracker.origins(json.loads(entry.args)) if m.path in entry.from_untrusted)
    tier = entry.tier
    held = tier is not None and runs_live(tier, state.config.autonomy) and tracker.held(tools.get(entry.tool), tier)
    return CallProvenance(untrusted=tuple(tracker.untrusted), from_untrusted=marks, held=held)
