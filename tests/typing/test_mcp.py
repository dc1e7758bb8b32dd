"""assert_type checks for agentkit.mcp: connections, wired tools, and their results in every loop (mypy only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, assert_type

import mcp.types
from pydantic import BaseModel

from agentkit import (
    Prompt,
    RoleSpec,
    StructuredCaller,
    Tier,
    TieredLoopResult,
    Tool,
    ToolLoopResult,
    ToolRoundInfo,
    approve,
    execute_approved,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit.journal import Execution, Journal
from agentkit.mcp import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    McpArgs,
    McpConnection,
    McpItem,
    McpServerError,
    McpTool,
    TierSource,
    connect_http,
    connect_stdio,
    tier_from_annotations,
)


class Agent:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[McpItem]) -> Prompt:
        return Prompt(system="s", dynamic=ctx)


def connections() -> None:
    assert_type(connect_stdio("python", ["server.py"], name="files", env={"A": "1"}, cwd="/tmp"), McpConnection)
    assert_type(connect_http("http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer t"}), McpConnection)
    assert_type(connect_stdio("python", timeout=None, connect_timeout=5.0).timeout, float | None)
    assert_type(connect_stdio("python").name, str)
    assert_type(DEFAULT_TIMEOUT, float)
    assert_type(DEFAULT_CONNECT_TIMEOUT, float)


def tier_sources(
    definition: mcp.types.Tool, by_map: Mapping[str, Tier], by_function: Callable[[mcp.types.Tool], Tier | None]
) -> None:
    # Both shapes are tier sources (the assignments are the check; pyright narrows the variables after them).
    mapping: TierSource = by_map
    function: TierSource = by_function
    annotations: TierSource = tier_from_annotations
    assert_type(tier_from_annotations(definition), Tier)
    del mapping, function, annotations


async def wired_tools(caller: StructuredCaller, journal: Journal) -> None:
    async with connect_stdio("python", ["server.py"]) as server:
        assert_type(server, McpConnection)
        tools = await server.tools(tiers={"search": Tier.READ_ONLY}, include=["search"], names={"search": "find"})
        assert_type(tools, list[McpTool])
        one = tools[0]
        as_tool: Tool[McpArgs, McpItem] = one
        assert_type(one.args_type, type[McpArgs])
        assert_type(one.tier, Tier)
        assert_type(one.server, str)
        assert_type(one.definition, mcp.types.Tool)
        assert_type(await one.call(one.args_type.model_validate({"query": "q"})), Sequence[McpItem])
        assert_type(one.args_type.model_validate({"query": "q"}).root, dict[str, Any])

        plain = await run_tool_loop(caller, Agent(), tools, "ctx")
        assert_type(plain, ToolLoopResult[dict[str, Any]])
        assert_type(plain.items, list[dict[str, Any]])
        single = await run_tool_loop_tiered(caller, Agent(), one, "ctx")
        assert_type(single, TieredLoopResult[McpArgs, dict[str, Any]])
        tiered = await run_tool_loop_tiered(caller, Agent(), tools, "ctx")
        assert_type(tiered, TieredLoopResult[BaseModel, dict[str, Any]])
        approval = approve(single.proposed[0], approved_by="ops")
        assert_type(await execute_approved(approval, one), Sequence[dict[str, Any]])
        assert_type(await journal.execute("p1", one), Execution[dict[str, Any]])
        del as_tool


def errors(error: McpServerError) -> None:
    assert_type(error.server, str)
