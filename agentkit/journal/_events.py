"""Run events as journal rows, and the rounds of an unfinished run rebuilt from those rows."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass, replace
from decimal import Decimal
from typing import Any, assert_never, overload

from agentkit import _events as ev
from agentkit._config import LoopConfig
from agentkit._proposals import canonical_json
from agentkit._tiers import Tier
from agentkit._usage import Usage, written_counts
from agentkit.journal._records import RoundEntry

__all__ = ["event_data", "fold_events", "loop_config_data", "said"]


def loop_config_data(config: LoopConfig) -> dict[str, Any]:
    """A run's `LoopConfig` as JSON data: every field, tiers by name, other enums by value, money (`Decimal`) as
    its exact text, mappings as objects, sets (sorted) and tuples as arrays."""
    data: dict[str, Any] = _plain(config)
    return data


def _plain(value: object) -> Any:
    if isinstance(value, Tier):
        return value.name
    if isinstance(value, enum.Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        return str(value)  # money, exactly: "0.09", as the run's state keeps it
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, frozenset | set):
        return sorted((_plain(item) for item in value), key=str)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    # A field that is not JSON (a future callable policy, say) is kept readable rather than dropped.
    return repr(value)


@overload
def said(error: BaseException) -> str: ...
@overload
def said(error: None) -> None: ...
def said(error: BaseException | None) -> str | None:
    """The error's text for the journal, even when its `__str__` raises (the record must not fail with it)."""
    if error is None:
        return None
    try:
        return str(error)
    except Exception as broken:
        return f"<str() of the {type(error).__name__} raised {type(broken).__name__}>"


def _usage(usage: Usage) -> dict[str, int]:
    """The usage as an event records it: the detail counts only where not 0 (so a record without them, an old
    one included, reads back as the same usage)."""
    return written_counts(usage)


def event_data(event: ev.Event) -> tuple[int | None, dict[str, Any]]:
    """The round an event belongs to and its JSON payload (only what a reader of the journal needs)."""
    match event:
        case ev.RunStarted():
            return None, {"agent": event.agent, "model": event.model, "tools": list(event.tools)}
        case ev.RoundStarted():
            return event.info.round, {"max_rounds": event.info.max_rounds}
        case ev.LLMCallFinished():
            data: dict[str, Any] = {"role": event.role, "model": event.model, "attempt": event.attempt}
            data |= {"seconds": event.seconds, "usage": _usage(event.usage)}
            return event.round, data | {"error": said(event.error)}
        case ev.ToolCallStarted():
            return event.round, {"tool": event.tool_name, "tier": int(event.tier), "args": canonical_json(event.args)}
        case ev.ToolResultReturned():
            data = {"tool": event.tool_name, "batch_size": event.batch_size, "seconds": event.seconds}
            data |= {"observation": event.observation, "error": said(event.error)}
            return event.round, data
        case ev.ProposalCaptured():
            p = event.proposal
            data = {"tool": p.tool_name, "tier": int(p.tier), "args": canonical_json(p.args), "digest": p.digest}
            return p.round, data | {"rationale": p.rationale}
        case ev.DegenerationDetected():
            return event.round, {"tool": event.tool_name, "args": canonical_json(event.args)}
        case ev.RunFinished():
            result = event.result
            data = {"outcome": result.outcome.value, "stop_reason": result.stop_reason.value, "rounds": result.rounds}
            return None, data | {
                "usage": _usage(result.usage),
                "error": said(result.error),
            }
        case ev.RunAborted():
            return None, {"error": f"{type(event.error).__name__}: {said(event.error)}"}
        case ev.RationaleDelta() | ev.AnswerDelta() | ev.TextDelta() | ev.PartialDiscarded():
            # never written (the observer leaves a streamed reply's deltas out); said here so every event has a form
            return event.round, {"kind": event.kind, "attempt": event.attempt}
        case _:
            assert_never(event)


def round_of_event(event: ev.Event) -> int | None:
    """The round of one of a round's own events (its start, a model call, its tool call and result, a repeat);
    `None` for the others (a run's start and end, a proposal), which the journal records besides the log."""
    match event:
        case ev.RoundStarted():
            return event.info.round
        case ev.LLMCallFinished() | ev.ToolCallStarted() | ev.ToolResultReturned() | ev.DegenerationDetected():
            return event.round
        case _:
            return None


def _fold(entry: RoundEntry, kind: str, data: Mapping[str, Any]) -> RoundEntry:
    match kind:
        case "llm_call":
            usage = entry.usage + Usage(**data["usage"])
            return replace(entry, usage=usage, llm_seconds=entry.llm_seconds + data["seconds"])
        case "tool_call":
            return replace(entry, tool_name=data["tool"], tier=Tier(data["tier"]), args_json=data["args"])
        case "tool_result":
            ran = data["error"] is None and data["observation"] is None
            return replace(
                entry,
                executed=ran,
                batch_size=data["batch_size"],
                tool_seconds=data["seconds"],
                observation=data["observation"],
                error=data["error"],
            )
        case "proposal":
            return replace(
                entry,
                tool_name=data["tool"],
                tier=Tier(data["tier"]),
                args_json=data["args"],
                rationale=data["rationale"],
                proposed=True,
            )
        case "degeneration":
            return replace(entry, tool_name=data["tool"], args_json=data["args"], repeated=True)
        case _:
            return entry


def fold_events(run_id: str, rows: Iterable[tuple[str, int | None, Mapping[str, Any]]]) -> list[RoundEntry]:
    """Rebuild the rounds of a run from its event rows `(kind, round, data)`, in journal order.

    Used for a run whose end was never recorded (it is still going, or its process died): every
    round that started is there, with what its events recorded before the run stopped.
    """
    entries: dict[int, RoundEntry] = {}
    for kind, round, data in rows:
        if round is None:
            continue
        entry = entries.get(round) or RoundEntry(run_id=run_id, round=round, from_trace=False)
        entries[round] = _fold(entry, kind, data)
    return [entries[r] for r in sorted(entries)]
