"""assert_type checks for tools that take the run's ctx, and the ctx mismatches the checkers refuse.

Checked by mypy and basedpyright. A ``# type: ignore[code]`` here is a negative check:
``warn_unused_ignores`` fails the run if mypy stops reporting that error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, assert_type

from pydantic import BaseModel

import agentkit as ak
from agentkit._tools import ContextFunctionTool
from agentkit.events import RunStream, iter_tool_loop
from agentkit.journal import Execution, open_journal
from agentkit.testing import ScriptedCaller, call_step
from tests.typing.models import DeleteArgs, Doc, Finder, SearchArgs, search


class HasSource(Protocol):
    @property
    def source(self) -> str: ...


class Clients:
    source: str = "wiki"


class Other:
    pass


@ak.tool(tier=ak.Tier.READ_ONLY)
def lookup(args: SearchArgs, ctx: Clients) -> list[Doc]:
    """Search through this run's clients."""
    return []


@ak.tool(tier=ak.Tier.READ_ONLY)
async def alookup(args: SearchArgs, ctx: Clients) -> Sequence[Doc]:
    """Search, async."""
    return []


@ak.tool(tier=ak.Tier.READ_ONLY)
def by_source(args: SearchArgs, ctx: HasSource) -> list[Doc]:
    """Needs only a source: any ctx with one fits."""
    return []


@ak.tool(tier=ak.Tier.IRREVERSIBLE)
def remove(args: DeleteArgs, ctx: Clients) -> list[Doc]:
    """Delete through this run's clients."""
    return []


@ak.tool(tier=ak.Tier.READ_ONLY)
def other(args: SearchArgs, ctx: Other) -> list[Doc]:
    """Takes a ctx no run here has."""
    return []


@ak.tool(tier=ak.Tier.READ_ONLY)
def limited(args: SearchArgs, limit: int = 3) -> list[Doc]:
    """A second parameter with a default is the ak.tool's own, not a ctx."""
    return []


class Agent:
    """An executor whose ctx is ``Clients``."""

    def role(self) -> ak.RoleSpec:
        return ak.RoleSpec(model="m")

    def render(self, ctx: Clients, info: ak.ToolRoundInfo[Doc]) -> ak.Prompt:
        return ak.Prompt(system="s", dynamic=ctx.source)


def decorated() -> None:
    assert_type(lookup, ContextFunctionTool[SearchArgs, Doc, Clients])
    assert_type(alookup, ContextFunctionTool[SearchArgs, Doc, Clients])
    assert_type(by_source, ContextFunctionTool[SearchArgs, Doc, HasSource])
    assert_type(limited, ak.FunctionTool[SearchArgs, Doc])
    _as_protocol: ak.ContextTool[SearchArgs, Doc, Clients] = lookup
    _plain: ak.Tool[SearchArgs, Doc] = search
    _lookup_as_plain: ak.Tool[SearchArgs, Doc] = lookup  # type: ignore[assignment]  # it needs the ctx to run
    mixed = ak.tool_set(search, lookup)
    assert_type(mixed, tuple[ak.Tool[Any, Doc] | ak.ContextTool[Any, Doc, Clients], ...])
    assert_type(ak.tool_set(search), tuple[ak.Tool[Any, Doc], ...])
    assert_type(call_step(SearchArgs(query="q"), tool=lookup), dict[str, Any])


async def loops() -> None:
    caller = ScriptedCaller()
    ctx = Clients()
    assert_type(await ak.run_tool_loop(caller, Agent(), lookup, ctx), ak.ToolLoopResult[Doc])
    assert_type(await ak.run_tool_loop(caller, Agent(), alookup, ctx), ak.ToolLoopResult[Doc])
    assert_type(await ak.run_tool_loop(caller, Agent(), search, ctx), ak.ToolLoopResult[Doc])  # a ctx-free ak.tool fits
    assert_type(await ak.run_tool_loop(caller, Agent(), by_source, ctx), ak.ToolLoopResult[Doc])  # a protocol ctx fits
    assert_type(await ak.run_tool_loop(caller, Agent(), [search, lookup], ctx), ak.ToolLoopResult[Doc])
    assert_type(await ak.run_tool_loop(caller, Agent(), ak.tool_set(search, lookup), ctx), ak.ToolLoopResult[Doc])
    assert_type(await ak.run_tool_loop_tiered(caller, Agent(), remove, ctx), ak.TieredLoopResult[DeleteArgs, Doc])
    tiered = await ak.run_tool_loop_tiered(caller, Agent(), [lookup, remove], ctx)
    assert_type(tiered, ak.TieredLoopResult[BaseModel, Doc])
    resumed = await ak.resume_tool_loop(caller, Agent(), [lookup, remove], ctx, tiered.checkpoint, [])
    assert_type(resumed, ak.TieredLoopResult[BaseModel, Doc])
    assert_type(iter_tool_loop(caller, Agent(), lookup, ctx), RunStream[ak.ToolLoopResult[Doc]])


async def mismatches() -> None:
    caller = ScriptedCaller()
    await ak.run_tool_loop(caller, Agent(), other, Clients())  # type: ignore[misc]  # ak.tool's ctx is Other, run's Clients
    await ak.run_tool_loop(caller, Finder(), lookup, "ctx")  # type: ignore[misc]  # ak.tool's ctx is Clients, run's str
    await ak.run_tool_loop(caller, Agent(), [search, other], Clients())  # type: ignore[list-item]  # one ak.tool's ctx is Other
    await ak.run_tool_loop_tiered(caller, Finder(), remove, "ctx")  # type: ignore[misc]  # ak.tool's ctx is Clients, run's str


async def outside_a_loop() -> None:
    caller = ScriptedCaller()
    result = await ak.run_tool_loop_tiered(caller, Agent(), remove, Clients())
    approval = ak.approve(result.proposed[0], approved_by="ana")
    assert_type(await ak.execute_approved(approval, remove, ctx=Clients()), Sequence[Doc])
    await ak.execute_approved(approval, remove)  # type: ignore[call-overload]  # a ctx ak.tool needs ctx=
    await ak.execute_approved(approval, remove, ctx=Other())  # type: ignore[misc]  # ctx of another type
    journal = open_journal("db.sqlite")
    assert_type(await journal.execute("id", remove, ctx=Clients()), Execution[Doc])
    await journal.execute("id", remove)  # type: ignore[call-overload]  # a ctx ak.tool needs ctx=
    await journal.work([search, lookup], ctx=Clients())
    await journal.work([lookup], ctx=Other())  # type: ignore[misc]  # ctx of another type
    assert_type(result.proposed[0].narrow(remove), ak.ProposedAction[DeleteArgs] | None)
