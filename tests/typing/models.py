"""The models, tools and executor the typing tests share (checked by mypy, never run)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import Prompt, ProposedAction, RoleSpec, Tier, ToolRoundInfo, tool
from agentkit._once import RoundInfo


class SearchArgs(BaseModel):
    query: str


class FetchArgs(BaseModel):
    doc_id: str


class DeleteArgs(BaseModel):
    path: str


class Doc(BaseModel):
    id: str


@tool(tier=Tier.READ_ONLY)
def search(args: SearchArgs) -> list[Doc]:
    """Search."""
    return []


@tool(tier=Tier.READ_ONLY)
async def asearch(args: SearchArgs) -> Sequence[Doc]:
    """Search, async."""
    return []


@tool(tier=Tier.READ_ONLY)
async def fetch(args: FetchArgs) -> list[Doc]:
    """Fetch one document."""
    return []


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: DeleteArgs) -> list[Doc]:
    """Delete a path."""
    return []


class Finder:
    """A tool-loop executor over ``Doc`` results with a ``str`` context."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="s", dynamic=ctx)


class Planner:
    """A tiered-loop executor that sees the proposals made so far, typed."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        assert_type(info.proposals, tuple[ProposedAction[Any], ...])
        return Prompt(system="s", dynamic=ctx)


class Triage(BaseModel):
    labels: list[str]


class Triager:
    """A once-agent with a ``str`` context."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="s", dynamic=ctx)
