"""The one admission check: the tools a path brings to a run against the tools the run recorded.

Every path that continues a run (an in-process resume, the journal's resume, a Temporal replay or
continuation, a worker executing an approved call) compares the tool set it brings with the one
the run recorded when it started, here, before any model call or tool run. A tier that changed, a
tool added or removed, a tool whose args take another shape, another order: each is named, and
the run is refused with ``ToolSetChanged``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentkit._cache import value_cache
from agentkit.errors import ToolSetChanged
from agentkit.tiers import Tier
from agentkit.tools import AnyTool, declared_tier

__all__ = ["ToolEntry", "admit_tools", "differences", "tool_entries"]


class ToolEntry(BaseModel):
    """One tool of a run's set, as the run records it: its name, its tier, the shape of its args."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    tier: Tier | None
    """The declared tier; ``None``: the tool declares none (it never runs)."""
    args: str
    """SHA-256 of the args type's JSON schema (sorted keys): a change of fields, types or constraints shows."""


@value_cache(maxsize=512)
def args_digest(args_type: type[BaseModel]) -> str:
    """The digest of an args type's JSON schema (once per type: a service builds runs over the same tools)."""
    schema = args_type.model_json_schema()
    return hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tool_entries(tools: Mapping[str, AnyTool]) -> tuple[ToolEntry, ...]:
    """The run's record of ``tools``, in their order."""
    return tuple(
        ToolEntry(name=name, tier=declared_tier(tool), args=args_digest(tool.args_type)) for name, tool in tools.items()
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
    if not problems and list(kept) != list(now):
        problems.append(f"the tools are in another order ({list(now)}; the run had {list(kept)})")
    return problems


def admit_tools(run_id: str, recorded: Iterable[ToolEntry], tools: Mapping[str, AnyTool] | Iterable[ToolEntry]) -> None:
    """Refuse ``tools`` for run ``run_id`` unless they are the tool set it recorded.

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


def _tier(tier: Tier | None) -> str:
    return f"Tier.{tier.name}" if tier is not None else "no tier"


def entries_json(entries: Iterable[ToolEntry]) -> list[dict[str, Any]]:
    """The entries as JSON values (what crosses a process boundary)."""
    return [entry.model_dump(mode="json") for entry in entries]
