"""The one admission check: what a path brings to a run against what the run's state recorded.

Every path that continues a run (an in-process resume, the journal's resume, a Temporal replay or
continuation, a worker executing an approved call) admits the state it loaded and the tools it
brings here, before any model call or tool run: the state must be of this version and reproduce
its digests, be the run's own, and record the same tool set. A tier that changed, a trust or egress
declaration that changed, a tool added or removed, a tool whose args take another shape, another
order: each is named, and the run is refused with `ToolSetChanged`. A state written before trust and
egress were recorded (their fields absent) has them compared for no tool: it goes on as it did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentkit._state import RunCheckpoint, ToolEntry, tool_entry
from agentkit._tiers import Tier
from agentkit._tools import AnyTool, declared_tier
from agentkit._trust import Trust, declared_egress, declared_trust
from agentkit.errors import ResumeRefused, ToolSetChanged

__all__ = ["admit", "admit_tools", "differences", "tool_entries"]


def tool_entries(tools: Mapping[str, AnyTool]) -> tuple[ToolEntry, ...]:
    """The record of `tools`, in their order, with the tiers, trust and egress they declare now."""
    return tuple(
        tool_entry(name, declared_tier(tool), tool.args_type, trust=declared_trust(tool), egress=declared_egress(tool))
        for name, tool in tools.items()
    )


def differences(recorded: Iterable[ToolEntry], given: Iterable[ToolEntry]) -> list[str]:
    """What differs between the recorded tool set and the given one, in words; empty when they agree."""
    kept: dict[str, ToolEntry] = {entry.name: entry for entry in recorded}
    now: dict[str, ToolEntry] = {entry.name: entry for entry in given}
    problems = [f"tool {name!r} is missing" for name in kept if name not in now]
    problems += [f"tool {name!r} was not in the run" for name in now if name not in kept]
    for name, entry in kept.items():
        other = now.get(name)
        if other is None:
            continue
        if other.tier is not entry.tier:
            problems.append(f"tool {name!r} now declares {_tier(other.tier)}, the run had {_tier(entry.tier)}")
        if other.args != entry.args:
            problems.append(f"tool {name!r} now takes args of another schema than the run's")
        problems += _declarations(name, entry, other)
    if not problems and list(kept) != list(now):
        problems.append(f"the tools are in another order ({list(now)}; the run had {list(kept)})")
    return problems


def admit_tools(run_id: str, recorded: Iterable[ToolEntry], tools: Mapping[str, AnyTool] | Iterable[ToolEntry]) -> None:
    """Refuse `tools` for run `run_id` unless they are the tool set it recorded.

    Raises:
        ToolSetChanged: naming every difference; nothing ran.
    """
    given = tool_entries(tools) if isinstance(tools, Mapping) else tuple(tools)
    problems = differences(recorded, given)
    if problems:
        raise ToolSetChanged(
            f"run {run_id!r} cannot go on with another tool set: {'; '.join(problems)}. Nothing ran",
            problems=problems,
        )


def admit(state: RunCheckpoint, tools: Mapping[str, AnyTool], *, run_id: str | None = None) -> None:
    """Admit `state` and `tools` for going on with a run, before anything runs.

    Args:
        state: The state loaded (from a result, a file, a journal, a workflow's history).
        tools: The tools the path brings, by name.
        run_id: The run the caller asked for, when it named one: a state of another run is refused.

    Raises:
        ResumeRefused: a state of another version or altered (its digests), of another run, or of a run
            that is finished.
        ToolSetChanged: another tool set (a `ResumeRefused` too).
    """
    if run_id is not None and state.run_id != run_id:
        raise ResumeRefused(
            f"the state stored for run {run_id!r} is that of run {state.run_id!r}; nothing ran. A state goes on "
            "only as the run that made it"
        )
    state.verify()
    if state.finished:
        reason = state.stop_reason.value if state.stop_reason is not None and state.run_id else "no run recorded"
        raise ResumeRefused(
            f"run {state.run_id!r} is finished ({reason}); only a run that stopped at a proposal, or whose process "
            "died between rounds, can go on. Nothing ran"
        )
    admit_tools(state.run_id, state.tools, tools)


def _tier(tier: Tier | None) -> str:
    return f"Tier.{tier.name}" if tier is not None else "no tier"


def _declarations(name: str, recorded: ToolEntry, given: ToolEntry) -> list[str]:
    """How `given`'s trust and egress differ from the run's, where both record them (a state written before they
    were recorded has them as `None`)."""
    problems = []
    if None not in (recorded.trust, given.trust) and recorded.trust is not given.trust:
        problems.append(
            f"tool {name!r} now declares {_trust(given.trust)}, the run had {_trust(recorded.trust)}: its results "
            "decide whether untrusted content entered the run"
        )
    if None not in (recorded.egress, given.egress) and recorded.egress != given.egress:
        problems.append(
            f"tool {name!r} now declares egress={given.egress}, the run had egress={recorded.egress}: the provenance "
            "policy holds egress calls"
        )
    return problems


def _trust(trust: Trust | None) -> str:
    return f"Trust.{trust.name}" if trust is not None else "no trust"
