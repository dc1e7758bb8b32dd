"""`ReplayCaller`: a recorded run played back, offline, request by request.

A run's state (`RunCheckpoint`: `result.checkpoint`, `journal.state(run_id)`, or a cassette
file `agentkit journal export` wrote) records each round's validated step, usage and model, and
digests of the prompt the executor rendered and of the step schema the model was asked to follow.
`ReplayCaller` answers each request with the step recorded for it, after checking that the
request is the recorded one: the same prompt, the same schema. A request that differs raises
`ReplayDiverged` naming the round and what differs (or, with `strict=False`, goes to a fallback
caller, as does every request after it). `ReplayCaller.tools(...)` gives stand-ins for the run's
tools that return the recorded batches instead of running, so a replay repeats no side effect.

Through its stand-ins a replay also sees whether the run gates each call as the recording did: a
call whose tool has another tier than the recorded one diverges at its round (naming the tool and
both tiers); a call the recording ran that the run did not run (another autonomy, say) diverges at
the next request; a call the recording proposed that the run runs diverges when it runs.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, TypeAdapter, ValidationError

from agentkit._codec import item_type_of
from agentkit._loop import schema_digest
from agentkit._media import media_digests
from agentkit._outcome import StopReason
from agentkit._session import prompt_digest
from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome, RunCheckpoint
from agentkit._structured import Completion, StructuredCaller, StructuredRequest
from agentkit._tiers import Tier, runs_live
from agentkit._tools import AnyTool, ContextTool, Tool, declared_tier
from agentkit._trust import declared_egress, declared_trust
from agentkit._usage import Usage, usage_of_counts
from agentkit.errors import ProviderError, ReplayDiverged, ResumeRefused, Throttled, ToolRetry, Truncated, UsageError

if TYPE_CHECKING:
    from agentkit._agent import Prompt
    from agentkit.journal import Journal

__all__ = ["ReplayCaller", "ReplayDiverged"]

M = TypeVar("M", bound=BaseModel)
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")

_CALLS = frozenset({RoundOutcome.RAN, RoundOutcome.RETRIED})
"""Round outcomes whose tool ran (a batch, or a `ToolRetry`): what a tool stand-in plays back."""


class ReplayCaller:
    """A `StructuredCaller` that answers each request with the step a recorded run took.

    Args:
        cassette: The recorded run's state. Its digests are checked first: an edited or damaged
            cassette, or one of another version, is refused naming what is wrong.
        strict: `True` (the default): a request whose prompt or schema differs from the
            recorded one, or whose recorded call the run gates otherwise, raises `ReplayDiverged`.
            `False`: it, and every request after it, is answered by `fallback`.
        fallback: The caller for requests the recording cannot answer (`strict=False`: required), and
            for requests after the recording's end; without one, those raise `ReplayDiverged`.

    Raises:
        UsageError: `strict=False` without a `fallback`: the requests the recording cannot answer would
            have no one to answer them.

    Example:
        >>> replay = ReplayCaller.from_file("tests/cassettes/refund.json")  # doctest: +SKIP
        >>> result = await run_tool_loop(replay, Researcher(), replay.tools([search]), "refunds?")  # doctest: +SKIP
    """

    def __init__(
        self, cassette: RunCheckpoint, *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> None:
        _check_fallback(strict, fallback)
        try:
            cassette.verify()
        except ResumeRefused as refused:
            raise ReplayDiverged(f"the cassette cannot be replayed: {refused}", round=0, what="cassette") from None
        self.cassette = cassette
        self.strict, self.fallback = strict, fallback
        self._steps = _steps(cassette)
        """Each recorded model call's entries (by the identity of the first): one, or a step's calls in its order."""
        self._rounds: deque[RoundEntry] = deque(
            e for e in cassette.entries if isinstance(e, RoundEntry) and e.prompt is not None and id(e) in self._steps
        )
        self._ends = {_index_of(cassette, e): e for e in cassette.entries if isinstance(e, EndEntry)}
        self._stand_ins: dict[str, _StandIn] = {}
        """The latest stand-in made for each tool (`tools`): its tier is the run's."""
        self._current: RoundEntry | None = None
        """The recorded round the latest request was answered with."""
        self._played: set[int] = set()
        """The recorded rounds (by identity) whose call a stand-in played back."""
        self._executions = _executions(cassette)
        """What the stand-ins play back, each tool's in order (shared by every `tools` call: one recording)."""
        self.requests: list[StructuredRequest] = []
        """Every request made, in order."""
        self.diverged: ReplayDiverged | None = None
        """Where the replay left the recording (`strict=False`): every request since went to `fallback`."""

    @classmethod
    def from_json(
        cls, text: str | bytes, *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> ReplayCaller:
        """Replay the run a cassette's JSON records (`RunCheckpoint` JSON, as `agentkit journal export` writes)."""
        _check_fallback(strict, fallback)
        try:
            cassette = RunCheckpoint.model_validate_json(text)
        except ValidationError as invalid:
            raise ReplayDiverged(f"the cassette is not a run's state: {invalid}", round=0, what="cassette") from None
        return cls(cassette, strict=strict, fallback=fallback)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> ReplayCaller:
        """Replay the run a cassette file records."""
        return cls.from_json(Path(path).read_bytes(), strict=strict, fallback=fallback)

    @classmethod
    async def from_journal(
        cls, journal: Journal, run_id: str, *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> ReplayCaller:
        """Replay a run a journal recorded."""
        _check_fallback(strict, fallback)
        return cls(await journal.state(run_id), strict=strict, fallback=fallback)

    @property
    def remaining(self) -> int:
        """Recorded model calls not replayed yet."""
        return len(self._rounds)

    def assert_complete(self) -> None:
        """Fail when recorded model calls were never asked for, saying where and why the replay stopped short."""
        if self._rounds:
            raise AssertionError(f"{len(self._rounds)} recorded model call(s) never replayed: {self._short()}")

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """The recorded step for this request, after checking the request is the recorded one."""
        self.requests.append(request)
        if self.diverged is not None:
            return await self._fall_back(request, schema, self.diverged)
        if not self._rounds:
            return await self._fall_back(
                request,
                schema,
                ReplayDiverged(
                    f"request {len(self.requests)} comes after the recorded run's last model call",
                    round=0,
                    what="more requests",
                ),
            )
        entry = self._rounds[0]
        diverged = self._unplayed() or _diverged(entry, _difference(entry, request, schema)) or self._retiered(entry)
        if diverged is not None:
            if self.strict:
                raise diverged
            self.diverged = diverged
            return await self._fall_back(request, schema, diverged)
        self._current = self._rounds.popleft()
        usage = usage_of_counts(entry)
        if entry.outcome is RoundOutcome.FAILED:
            raise self._failure(entry, usage)
        return Completion(
            value=_step(self._steps[id(entry)], schema),
            usage=usage,
            model=entry.model or request.model,
            reasoning=entry.reasoning,
        )

    @overload
    def tools(self, tools: Tool[Args, R] | ContextTool[Args, R, Any]) -> Tool[Args, R]: ...
    @overload
    def tools(self, tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Any]]) -> list[Tool[Any, R]]: ...
    def tools(self, tools: AnyTool | Sequence[AnyTool]) -> Tool[Any, Any] | list[Tool[Any, Any]]:
        """Stand-ins for `tools` (one tool gives one stand-in, a sequence a list) that play back the
        recorded calls instead of running: each returns the batch the recorded call of that tool returned
        (or raises its `ToolRetry`), in order, after checking the args are the recorded ones
        (`ReplayDiverged` if not). An approved call run on resume plays back the batch its decision
        recorded. They take no ctx: they run nothing. Their tiers are the given tools': a recorded call
        whose tool's tier changed, or that the run gates otherwise than the recording did, diverges
        (naming its round, the tool and both tiers). Every call of `tools` plays back one recording."""
        made = [_StandIn(tool, self._executions, self) for tool in (tools if isinstance(tools, Sequence) else [tools])]
        self._stand_ins.update((stand_in.name, stand_in) for stand_in in made)
        stand_ins: list[Tool[Any, Any]] = list(made)
        return stand_ins if isinstance(tools, Sequence) else stand_ins[0]

    def _retiered(self, first: RoundEntry) -> ReplayDiverged | None:
        """A recorded call of the round is of a tool whose tier changed since: the run gates it otherwise (or may)."""
        for entry in self._steps[id(first)]:
            if (diverged := self._retiered_call(entry)) is not None:
                return diverged
        return None

    def _retiered_call(self, entry: RoundEntry) -> ReplayDiverged | None:
        stand_in = self._stand_ins.get(entry.tool or "")
        if stand_in is None or entry.tier is None or entry.outcome not in _GATED:
            return None
        tier = declared_tier(stand_in)
        if tier == entry.tier:
            return None
        did = "proposed" if entry.outcome is RoundOutcome.PROPOSED else "ran"
        autonomy = self.cassette.config.autonomy
        now = "runs it" if tier is not None and runs_live(tier, autonomy) else "does not run it"
        what = f"tool {stand_in.name!r} is {_tier(tier)} now, {_tier(entry.tier)} when recorded"
        return ReplayDiverged(
            f"round {entry.round} diverged from the recording: {what}. The recording {did} the call; under its "
            f"autonomy ({_tier(autonomy)}) the run now {now}. Record the run again, or give the tool its recorded tier",
            round=entry.round,
            what=what,
        )

    def _unplayed(self) -> ReplayDiverged | None:
        """A call of the last recorded round ran in the recording but not in the run (its stand-in was not called)."""
        if self._current is None:
            return None
        for entry in self._steps[id(self._current)]:
            if (diverged := self._unplayed_call(entry)) is not None:
                return diverged
        return None

    def _unplayed_call(self, entry: RoundEntry) -> ReplayDiverged | None:
        if entry.outcome not in _CALLS or id(entry) in self._played:
            return None
        stand_in = self._stand_ins.get(entry.tool or "")
        if stand_in is None:
            return None  # the run's tool is not a stand-in: whether it ran is not seen here
        tier = declared_tier(stand_in)
        if tier != entry.tier:
            why = f"{stand_in.name!r} is {_tier(tier)} now, {_tier(entry.tier)} when recorded"
        else:
            autonomy = _tier(self.cassette.config.autonomy)
            why = (
                f"its tier is the recorded one ({_tier(tier)}): another LoopConfig (autonomy {autonomy} when "
                "recorded, or its repeat policy) or same= kept it from running"
            )
        what = f"the recording ran the call of {stand_in.name!r} ({_tier(entry.tier)}); the run did not"
        return ReplayDiverged(
            f"round {entry.round} diverged from the recording: {what}: {why}", round=entry.round, what=what
        )

    def _live_call(self, stand_in: _StandIn, recorded: RoundEntry | DecisionEntry | None) -> None:
        """A stand-in is called to run its tool live (`recorded`: the next recorded execution of it): refuse a call
        the recording did not run in the round the replay is at (it proposed or refused it)."""
        if isinstance(recorded, DecisionEntry) or self._current is None or self.diverged is not None:
            return  # an approved call's batch, played back; or no round to compare with
        step = self._steps[id(self._current)]
        if any(entry is recorded and entry.outcome in _CALLS for entry in step):
            return
        entry = next((entry for entry in step if entry.tool == stand_in.name), None)
        if entry is None:
            return  # a call of another tool than the recorded step's: its args are compared as it is played
        tier = declared_tier(stand_in)
        match entry.outcome:
            case RoundOutcome.PROPOSED:
                did = f"proposed it ({_tier(entry.tier)}, under autonomy {_tier(self.cassette.config.autonomy)})"
            case RoundOutcome.REFUSED:
                did = f"refused it as a repeat of round {entry.repeats}"
            case RoundOutcome.RAN | RoundOutcome.RETRIED:
                did = "ran it once"
            case _:
                did = f"did not run it ({entry.outcome.value})"
        what = f"the run runs the call of {stand_in.name!r} ({_tier(tier)} now)"
        raise ReplayDiverged(
            f"round {entry.round} diverged from the recording: {what}; the recording {did}",
            round=entry.round,
            what=what,
        )

    def _short(self) -> str:
        """Why the replay stopped before the recording's last model call, in words."""
        if self.diverged is not None:
            return f"the replay left the recording at round {self.diverged.round}: {self.diverged}"
        if (unplayed := self._unplayed()) is not None:
            return str(unplayed)
        upcoming = self._rounds[0]
        if self._current is None:
            return f"the run asked for none; the recording begins with round {upcoming.round}"
        at = _index_of(self.cassette, self._current)
        ended = next(
            (e for i, e in self._ends.items() if at < i < _index_of(self.cassette, upcoming)),
            None,
        )
        if ended is not None:
            return (
                f"the run ended after round {self._current.round}, where the recording's leg ended too "
                f"({ended.stop_reason.value}) and went on with round {upcoming.round}: resume the replayed run to "
                "replay the rest"
            )
        return (
            f"the run ended after round {self._current.round} (recorded: {self._current.outcome.value}), where the "
            f"recording went on with round {upcoming.round}"
        )

    async def _fall_back(self, request: StructuredRequest, schema: type[M], why: ReplayDiverged) -> Completion[M]:
        if self.fallback is None:
            raise why
        return await self.fallback.complete(request, schema)

    def _failure(self, entry: RoundEntry, usage: Usage) -> Exception:
        """The recorded model failure, raised again so the replayed run ends as the recorded one did."""
        message = entry.error or "the recorded model call failed"
        end = self._end_after(entry)
        match end:
            case StopReason.THROTTLED:
                return Throttled(message, usage=usage)
            case StopReason.MAX_TOKENS:
                return Truncated(message, raw="", max_tokens=None, usage=usage)
            case _:
                return ProviderError(message, usage=usage)

    def _end_after(self, entry: RoundEntry) -> StopReason | None:
        at = _index_of(self.cassette, entry)
        later = [end for index, end in self._ends.items() if index > at]
        return min(later, key=lambda end: _index_of(self.cassette, end)).stop_reason if later else None


_GATED = frozenset({RoundOutcome.RAN, RoundOutcome.RETRIED, RoundOutcome.PROPOSED})
"""Round outcomes the gate decided by the tool's tier: a call run (a batch, or a `ToolRetry`), or proposed."""


def _check_fallback(strict: bool, fallback: StructuredCaller | None) -> None:
    if not strict and fallback is None:
        raise UsageError(
            "ReplayCaller(strict=False) needs a fallback: the requests the recording cannot answer go to it. "
            "Pass fallback=caller (a ScriptedCaller, or a real one), or leave strict=True"
        )


def _tier(tier: Tier | None) -> str:
    return "no tier" if tier is None else f"Tier.{tier.name}"


def _diverged(entry: RoundEntry, difference: str | None) -> ReplayDiverged | None:
    if difference is None:
        return None
    return ReplayDiverged(
        f"round {entry.round} diverged from the recording: {difference}", round=entry.round, what=difference
    )


def _index_of(cassette: RunCheckpoint, entry: object) -> int:
    return next(index for index, candidate in enumerate(cassette.entries) if candidate is entry)


def _difference(entry: RoundEntry, request: StructuredRequest, schema: type[BaseModel]) -> str | None:
    """What differs between a request and the recorded one, in words; `None`: nothing."""
    prompt: Prompt = _prompt_of(request)
    if entry.prompt != prompt_digest(prompt):
        media = media_digests(prompt.parts)
        if media != entry.media:
            return (
                f"the prompt's images or documents differ from the recorded ones ({_media_change(entry.media, media)})"
            )
        return "the prompt differs from the recorded one (the executor rendered another system or dynamic text)"
    if entry.schema_digest is not None and entry.schema_digest != schema_digest(schema):
        return f"the step schema {schema.__name__} differs from the recorded one (another tool set, or answer type)"
    return None


def _media_change(recorded: tuple[str, ...], now: tuple[str, ...]) -> str:
    """The first image or document that differs, in words: `kind:media_type:sha256` as recorded and as now."""
    if len(recorded) != len(now):
        return f"{len(now)} now, {len(recorded)} recorded"
    index, (was, new) = next((i, pair) for i, pair in enumerate(zip(recorded, now, strict=True)) if pair[0] != pair[1])
    return f"part {index + 1} is {_short(new)}, recorded as {_short(was)}"


def _short(digest: str) -> str:
    kind, media_type, sha = digest.split(":")
    return f"{kind} {media_type} sha256:{sha[:12]}" if media_type else f"{kind} sha256:{sha[:12]}"


def _prompt_of(request: StructuredRequest) -> Prompt:
    from agentkit._agent import Prompt

    return Prompt(system=request.system, dynamic=request.dynamic, parts=request.parts)


def _step(calls: tuple[RoundEntry, ...], schema: type[M]) -> M:
    """The recorded step (one entry, or the entries of a step of several calls, in its order), validated through
    JSON against the schema as a real reply is."""
    entry = calls[0]
    step: dict[str, Any] = {"rationale": entry.rationale, "done": entry.outcome is RoundOutcome.DONE, "call": None}
    if entry.answer is not None:
        step["answer"] = json.loads(entry.answer)
    steps: list[dict[str, Any]] = [step]
    if entry.tool is not None and entry.args is not None and entry.outcome is not RoundOutcome.DONE:
        made = [(call.tool, json.loads(call.args or "null")) for call in calls]
        named = [{"tool": tool, "args": args} for tool, args in made]  # a tool set's step, then a single tool's
        bare = [args for _, args in made]
        if entry.position is None:
            steps = [{**step, "call": named[0]}, {**step, "call": bare[0]}]
        else:
            steps = [{**step, "calls": named}, {**step, "calls": bare}]
    problems: list[str] = []
    for shaped in steps:
        try:
            return schema.model_validate_json(json.dumps(shaped, allow_nan=True))
        except ValidationError as invalid:
            problems.append(str(invalid))
    raise ReplayDiverged(
        f"round {entry.round}'s recorded step does not validate as {schema.__name__}: {problems[-1]}",
        round=entry.round,
        what="the recorded step",
    )


def _steps(cassette: RunCheckpoint) -> dict[int, tuple[RoundEntry, ...]]:
    """Each recorded model call's entries, by the identity of the first (the one with the reply's usage): a
    round's entry, or the entries of a step of several calls (`RoundEntry.position`) in the step's order."""
    steps: dict[int, tuple[RoundEntry, ...]] = {}
    first: RoundEntry | None = None
    for entry in cassette.entries:
        if isinstance(entry, DecisionEntry):
            continue  # a standing grant's approval, run inside the step: the step goes on after it
        if not isinstance(entry, RoundEntry) or entry.prompt is None:
            first = None
            continue
        if entry.position is not None and first is not None and first.round == entry.round:
            step = sorted((*steps[id(first)], entry), key=lambda e: e.position or 0)
            steps[id(first)] = tuple(step)
            continue
        steps[id(entry)] = (entry,)
        first = entry if entry.position is not None else None
    return steps


def _in_step_order(cassette: RunCheckpoint) -> list[RoundEntry | DecisionEntry | EndEntry]:
    """The cassette's entries with each step's calls in the step's order (they are recorded as each finished)."""
    ordered: list[RoundEntry | DecisionEntry | EndEntry] = []
    for entry in cassette.entries:
        ordered.append(entry)
        at = len(ordered) - 1
        while at > 0 and _before(ordered[at], ordered[at - 1]):
            ordered[at - 1], ordered[at] = ordered[at], ordered[at - 1]
            at -= 1
    return ordered


def _before(entry: object, earlier: object) -> bool:
    """`entry`, a call of a step, comes before `earlier` in that step."""
    return (
        isinstance(entry, RoundEntry)
        and isinstance(earlier, RoundEntry)
        and entry.position is not None
        and earlier.position is not None
        and entry.round == earlier.round
        and entry.position < earlier.position
    )


def _executions(cassette: RunCheckpoint) -> dict[str, deque[RoundEntry | DecisionEntry]]:
    """The recorded executions of each tool, in order: rounds whose tool ran (a step's in the step's order), and
    approved calls that ran."""
    by_tool: dict[str, deque[RoundEntry | DecisionEntry]] = {}
    proposed = {(e.round, e.call_digest): e for e in cassette.entries if isinstance(e, RoundEntry)}
    for entry in _in_step_order(cassette):
        if isinstance(entry, RoundEntry) and entry.outcome in _CALLS and entry.tool is not None:
            by_tool.setdefault(entry.tool, deque()).append(entry)
        elif isinstance(entry, DecisionEntry) and entry.approved and entry.batch is not None:
            call = proposed.get((entry.round, entry.call_digest))
            if call is not None and call.tool is not None:
                by_tool.setdefault(call.tool, deque()).append(entry)
    return by_tool


class _StandIn:
    """A tool that plays back its recorded calls (see `ReplayCaller.tools`)."""

    def __init__(
        self, tool: AnyTool, played: dict[str, deque[RoundEntry | DecisionEntry]], replay: ReplayCaller
    ) -> None:
        self.name: str = tool.name
        self.description: str = tool.description
        self.args_type: type[BaseModel] = tool.args_type
        self.tier = tool.tier
        self.trust = declared_trust(tool)
        """The real tool's trust and egress: a replayed run is tainted, and gated, as the recording was."""
        self.egress = declared_egress(tool)
        self.result_type = item_type_of(tool)
        self._items: TypeAdapter[list[Any]] | None = (
            None if self.result_type is None else TypeAdapter(list[self.result_type])  # type: ignore[name-defined]  # a run-time type
        )
        self._played = played
        self._replay = replay

    async def call(self, args: BaseModel) -> Sequence[Any]:
        recorded = self._played.get(self.name)
        self._replay._live_call(self, recorded[0] if recorded else None)
        if not recorded:
            raise ReplayDiverged(
                f"tool {self.name!r} was called more often than in the recording",
                round=0,
                what=f"a call of {self.name!r}",
            )
        entry = recorded.popleft()
        self._replay._played.add(id(entry))
        expected = entry.args if isinstance(entry, RoundEntry) else None
        if expected is not None and json.loads(expected) != args.model_dump(mode="json"):
            raise ReplayDiverged(
                f"round {entry.round}: tool {self.name!r} was called with other args than recorded",
                round=entry.round,
                what=f"the args of {self.name!r}",
            )
        if isinstance(entry, RoundEntry) and entry.outcome is RoundOutcome.RETRIED:
            raise ToolRetry(entry.observation or "")
        if entry.batch is None or self._items is None:
            raise UsageError(f"tool {self.name!r}'s recorded batches were not kept (no item type JSON can carry)")
        return self._items.validate_python(json.loads(entry.batch))
