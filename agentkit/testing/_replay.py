"""`ReplayCaller`: a recorded run played back, offline, request by request.

A run's state (`RunCheckpoint`: `result.checkpoint`, `journal.state(run_id)`, or a cassette
file `agentkit journal export` wrote) records each round's validated step, usage and model, and
digests of the prompt the executor rendered and of the step schema the model was asked to follow.
`ReplayCaller` answers each request with the step recorded for it, after checking that the
request is the recorded one: the same prompt, the same schema. A request that differs raises
`ReplayDiverged` naming the round and what differs (or, with `strict=False`, goes to a fallback
caller, as does every request after it). `ReplayCaller.tools(...)` gives stand-ins for the run's
tools that return the recorded batches instead of running, so a replay repeats no side effect.
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
from agentkit._outcome import StopReason
from agentkit._session import prompt_digest
from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome, RunCheckpoint
from agentkit._structured import Completion, StructuredCaller, StructuredRequest
from agentkit._tools import AnyTool, ContextTool, Tool
from agentkit._usage import Usage
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
            recorded one raises `ReplayDiverged`. `False`: it, and every request after it, is
            answered by `fallback`.
        fallback: The caller for requests the recording cannot answer (`strict=False`), and for
            requests after the recording's end; without one, those raise `ReplayDiverged`.

    Example:
        >>> replay = ReplayCaller.from_file("tests/cassettes/refund.json")  # doctest: +SKIP
        >>> result = await run_tool_loop(replay, Researcher(), replay.tools([search]), "refunds?")  # doctest: +SKIP
    """

    def __init__(
        self, cassette: RunCheckpoint, *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> None:
        try:
            cassette.verify()
        except ResumeRefused as refused:
            raise ReplayDiverged(f"the cassette cannot be replayed: {refused}", round=0, what="cassette") from None
        self.cassette = cassette
        self.strict, self.fallback = strict, fallback
        self._rounds: deque[RoundEntry] = deque(
            e for e in cassette.entries if isinstance(e, RoundEntry) and e.prompt is not None
        )
        self._ends = {_index_of(cassette, e): e for e in cassette.entries if isinstance(e, EndEntry)}
        self.requests: list[StructuredRequest] = []
        """Every request made, in order."""
        self.diverged: ReplayDiverged | None = None
        """Where the replay left the recording (`strict=False`): every request since went to `fallback`."""

    @classmethod
    def from_json(
        cls, text: str | bytes, *, strict: bool = True, fallback: StructuredCaller | None = None
    ) -> ReplayCaller:
        """Replay the run a cassette's JSON records (`RunCheckpoint` JSON, as `agentkit journal export` writes)."""
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
        return cls(await journal.state(run_id), strict=strict, fallback=fallback)

    @property
    def remaining(self) -> int:
        """Recorded model calls not replayed yet."""
        return len(self._rounds)

    def assert_complete(self) -> None:
        """Fail when recorded model calls were never asked for."""
        if self._rounds:
            raise AssertionError(f"{len(self._rounds)} recorded model call(s) never replayed")

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
        difference = _difference(entry, request, schema)
        if difference is not None:
            diverged = ReplayDiverged(
                f"round {entry.round} diverged from the recording: {difference}", round=entry.round, what=difference
            )
            if self.strict:
                raise diverged
            self.diverged = diverged
            return await self._fall_back(request, schema, diverged)
        self._rounds.popleft()
        usage = Usage(requests=entry.requests, input_tokens=entry.input_tokens, output_tokens=entry.output_tokens)
        if entry.outcome is RoundOutcome.FAILED:
            raise self._failure(entry, usage)
        return Completion(value=_step(entry, schema), usage=usage, model=entry.model or request.model)

    @overload
    def tools(self, tools: Tool[Args, R] | ContextTool[Args, R, Any]) -> Tool[Args, R]: ...
    @overload
    def tools(self, tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Any]]) -> list[Tool[Any, R]]: ...
    def tools(self, tools: AnyTool | Sequence[AnyTool]) -> Tool[Any, Any] | list[Tool[Any, Any]]:
        """Stand-ins for `tools` (one tool gives one stand-in, a sequence a list) that play back the
        recorded calls instead of running: each returns the batch the recorded call of that tool returned
        (or raises its `ToolRetry`), in order, after checking the args are the recorded ones
        (`ReplayDiverged` if not). An approved call run on resume plays back the batch its decision
        recorded. They take no ctx: they run nothing."""
        played = _executions(self.cassette)
        if not isinstance(tools, Sequence):
            return _StandIn(tools, played)
        return [_StandIn(tool, played) for tool in tools]

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


def _index_of(cassette: RunCheckpoint, entry: object) -> int:
    return next(index for index, candidate in enumerate(cassette.entries) if candidate is entry)


def _difference(entry: RoundEntry, request: StructuredRequest, schema: type[BaseModel]) -> str | None:
    """What differs between a request and the recorded one, in words; `None`: nothing."""
    prompt: Prompt = _prompt_of(request)
    if entry.prompt != prompt_digest(prompt):
        return "the prompt differs from the recorded one (the executor rendered another system or dynamic text)"
    if entry.schema_digest is not None and entry.schema_digest != schema_digest(schema):
        return f"the step schema {schema.__name__} differs from the recorded one (another tool set, or answer type)"
    return None


def _prompt_of(request: StructuredRequest) -> Prompt:
    from agentkit._agent import Prompt

    return Prompt(system=request.system, dynamic=request.dynamic)


def _step(entry: RoundEntry, schema: type[M]) -> M:
    """The recorded step, validated through JSON against the schema as a real reply is."""
    step: dict[str, Any] = {"rationale": entry.rationale, "done": entry.outcome is RoundOutcome.DONE, "call": None}
    if entry.answer is not None:
        step["answer"] = json.loads(entry.answer)
    shapes: list[Any] = [None]
    if entry.tool is not None and entry.args is not None and entry.outcome is not RoundOutcome.DONE:
        args = json.loads(entry.args)
        shapes = [{"tool": entry.tool, "args": args}, args]  # a tool set's step, then a single tool's
    problems: list[str] = []
    for shape in shapes:
        try:
            return schema.model_validate_json(json.dumps({**step, "call": shape}, allow_nan=True))
        except ValidationError as invalid:
            problems.append(str(invalid))
    raise ReplayDiverged(
        f"round {entry.round}'s recorded step does not validate as {schema.__name__}: {problems[-1]}",
        round=entry.round,
        what="the recorded step",
    )


def _executions(cassette: RunCheckpoint) -> dict[str, deque[RoundEntry | DecisionEntry]]:
    """The recorded executions of each tool, in order: rounds whose tool ran, and approved calls that ran."""
    by_tool: dict[str, deque[RoundEntry | DecisionEntry]] = {}
    proposed = {(e.round, e.call_digest): e for e in cassette.entries if isinstance(e, RoundEntry)}
    for entry in cassette.entries:
        if isinstance(entry, RoundEntry) and entry.outcome in _CALLS and entry.tool is not None:
            by_tool.setdefault(entry.tool, deque()).append(entry)
        elif isinstance(entry, DecisionEntry) and entry.approved and entry.batch is not None:
            call = proposed.get((entry.round, entry.call_digest))
            if call is not None and call.tool is not None:
                by_tool.setdefault(call.tool, deque()).append(entry)
    return by_tool


class _StandIn:
    """A tool that plays back its recorded calls (see `ReplayCaller.tools`)."""

    def __init__(self, tool: AnyTool, played: dict[str, deque[RoundEntry | DecisionEntry]]) -> None:
        self.name: str = tool.name
        self.description: str = tool.description
        self.args_type: type[BaseModel] = tool.args_type
        self.tier = tool.tier
        self.result_type = item_type_of(tool)
        self._items: TypeAdapter[list[Any]] | None = (
            None if self.result_type is None else TypeAdapter(list[self.result_type])  # type: ignore[name-defined]  # a run-time type
        )
        self._played = played

    async def call(self, args: BaseModel) -> Sequence[Any]:
        recorded = self._played.get(self.name)
        if not recorded:
            raise ReplayDiverged(
                f"tool {self.name!r} was called more often than in the recording",
                round=0,
                what=f"a call of {self.name!r}",
            )
        entry = recorded.popleft()
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
