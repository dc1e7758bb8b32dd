"""`McpTool`: an MCP server's tool as an agentkit `Tool`, and the wiring that fixes its tier.

The rules, in one place:

* **Tier.** From the caller (`tiers=`), or, only with `trust_annotations=True`, from the
  server's annotations (`tier_from_annotations`). Fixed when the tool is wired; nothing the
  server says later changes it. A tool without one is wired without one, and a loop refuses it.
* **Provenance.** An MCP tool's results are `Trust.UNTRUSTED` and it is egress (it sends its arguments
  to a server), unless the caller says otherwise (`trust=`, `egress=`): a server is a third party.
* **Arguments.** Validated against the input schema listed at wiring before anything is sent.
* **Schema drift.** Before each call the tool lists the server's tools again; if the tool is gone,
  listed twice, or its input schema is not the one wired, the call is refused and not sent.
* **Results.** A result's structured content is the batch's one item; otherwise each content
  item (text, image, audio, resource, link) is an item, as its JSON object (`{"type": ...}`).
* **Error results** (`isError: true`) are the server telling the model its call failed, so they
  raise `ToolRetry`: the loop shows the message to the model as that call's observation and goes
  on. Anything else (a protocol error, a crash, a timeout, a refused call) raises
  `McpServerError`, which ends a run `TOOL_ERROR`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import mcp.types

from agentkit._tiers import Tier, tier_choices
from agentkit._tools import validate_tool_names
from agentkit._trust import Trust
from agentkit.errors import ToolRetry, UsageError
from agentkit.mcp._args import McpArgs, UnusableSchema, args_model

if TYPE_CHECKING:
    from agentkit.mcp._connection import McpConnection
from agentkit.errors import McpServerError

__all__ = ["McpItem", "McpTool", "TierSource", "tier_from_annotations", "wire"]

McpItem: TypeAlias = dict[str, Any]
"""One item of an MCP tool's batch: its structured content, or one content item, as JSON."""

TierSource: TypeAlias = Mapping[str, Tier] | Callable[[mcp.types.Tool], Tier | None]
"""Where tools get their tiers: by the server's tool name, or from the tool's definition."""

_MAX_OBSERVATION = 4000
"""Characters of a server's error text shown to the model (a server cannot flood the prompt)."""


def tier_from_annotations(definition: mcp.types.Tool) -> Tier:
    """The tier a tool's annotations claim; a hint the server leaves out counts against it.

    * `readOnlyHint` true → `READ_ONLY`;
    * `destructiveHint` false and `openWorldHint` false → `REVERSIBLE`;
    * `openWorldHint` true → `EXTERNAL_REVERSIBLE`;
    * anything else (no annotations included) → `IRREVERSIBLE`.

    Annotations are claims by the server: use this only for servers you trust to label their tools.
    """
    hints = definition.annotations
    if hints is None:
        return Tier.IRREVERSIBLE
    if hints.read_only_hint is True:
        return Tier.READ_ONLY
    if hints.destructive_hint is False and hints.open_world_hint is False:
        return Tier.REVERSIBLE
    if hints.open_world_hint is True:
        return Tier.EXTERNAL_REVERSIBLE
    return Tier.IRREVERSIBLE


class McpTool:
    """One tool of an MCP server as an agentkit `Tool[McpArgs, McpItem]`; made by `McpConnection.tools`.

    `tier` is the tier fixed at wiring; a tool wired without one raises `AttributeError` on
    `tier`, so every loop, gate and approval path sees "declares no tier" and refuses it.
    """

    __slots__ = (
        "_args_type",
        "_connection",
        "_definition",
        "_description",
        "_egress",
        "_name",
        "_schema_key",
        "_tier",
        "_trust",
    )

    def __init__(
        self,
        *,
        name: str,
        definition: mcp.types.Tool,
        args_type: type[McpArgs],
        tier: Tier | None,
        connection: McpConnection,
        trust: Trust = Trust.UNTRUSTED,
        egress: bool = True,
    ) -> None:
        self._trust = trust
        self._egress = egress
        self._name = name
        self._definition = definition
        self._description = definition.description or definition.title or definition.name
        self._args_type = args_type
        self._tier = tier
        self._connection = connection
        self._schema_key = _schema_key(definition.input_schema)

    @property
    def name(self) -> str:
        """The name the model calls the tool by (the server's name unless renamed with `names=`)."""
        return self._name

    @property
    def description(self) -> str:
        """The server's description of the tool, as listed at wiring."""
        return self._description

    @property
    def args_type(self) -> type[McpArgs]:
        """The arguments' model: validates against the input schema listed at wiring."""
        return self._args_type

    @property
    def tier(self) -> Tier:
        """The tier fixed at wiring.

        Raises:
            AttributeError: the tool was wired without a tier (so it is never called).
        """
        if self._tier is None:
            raise AttributeError(
                f"MCP tool {self._name!r} of server {self._connection.name!r} has no tier; give it one with "
                f"tools(tiers=...), choosing one of {tier_choices()}"
            )
        return self._tier

    @property
    def trust(self) -> Trust:
        """What its results are: `Trust.UNTRUSTED` unless the caller said otherwise when wiring (`trust=`)."""
        return self._trust

    @property
    def egress(self) -> bool:
        """It sends data out: `True` unless the caller said otherwise when wiring (`egress=`)."""
        return self._egress

    @property
    def server(self) -> str:
        """The name of the server the tool belongs to."""
        return self._connection.name

    @property
    def definition(self) -> mcp.types.Tool:
        """The tool's definition as the server listed it at wiring (a copy)."""
        return self._definition.model_copy(deep=True)

    def __repr__(self) -> str:
        tier = f"Tier.{self._tier.name}" if self._tier is not None else "no tier"
        return f"<McpTool {self._name!r} of {self._connection.name!r}, {tier}>"

    async def call(self, args: McpArgs) -> Sequence[McpItem]:
        """Check the arguments and the server's schema, call the tool, and return its batch.

        Raises:
            ToolRetry: the server answered with an error result (the model is told, the loop goes on).
            McpServerError: the server failed, hung, is gone, or changed the tool since it was wired.
            UsageError: `args` do not match the tool's input schema (nothing was sent).
        """
        try:
            payload = self._args_type.model_validate(args.root if isinstance(args, McpArgs) else args).root
        except ValueError as invalid:
            raise UsageError(
                f"arguments for MCP tool {self._name!r} do not match its input schema; nothing was sent: {invalid}"
            ) from invalid
        await self._check_unchanged()
        result = await self._connection.call_tool(self._definition.name, payload)
        if result.is_error:
            raise ToolRetry(_error_text(self._name, result))
        if result.structured_content is not None:
            return [dict(result.structured_content)]
        return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]

    async def _check_unchanged(self) -> None:
        remote = self._definition.name
        server = self._connection.name
        listed = [tool for tool in await self._connection.list_tools() if tool.name == remote]
        if len(listed) != 1:
            now = "no longer lists it" if not listed else f"now lists it {len(listed)} times"
            raise McpServerError(
                f"MCP server {server!r} {now}; the call to {remote!r} was refused and not sent", server=server
            )
        if _schema_key(listed[0].input_schema) != self._schema_key:
            raise McpServerError(
                f"MCP server {server!r} changed the input schema of tool {remote!r} after it was wired; the call was "
                "refused and not sent. Wire the tools again (and review their tiers) to use the new schema",
                server=server,
            )


def wire(
    connection: McpConnection,
    listed: Sequence[mcp.types.Tool],
    tiers: TierSource | None,
    trust_annotations: bool,
    include: Sequence[str] | None,
    names: Mapping[str, str] | None,
    trust: Mapping[str, Trust] | None = None,
    egress: Mapping[str, bool] | None = None,
) -> list[McpTool]:
    """The listed tools as `McpTool` values; see `McpConnection.tools`."""
    server = connection.name
    by_name: dict[str, mcp.types.Tool] = {}
    for definition in listed:
        if definition.name in by_name:
            raise McpServerError(
                f"MCP server {server!r} lists two tools named {definition.name!r}; a call could reach either, so "
                "none of its tools is wired",
                server=server,
            )
        by_name[definition.name] = definition
    if isinstance(include, str):
        raise UsageError(f"include takes a list of tool names, not one string; write include=[{include!r}]")
    _check_known(server, by_name, "include", include or ())
    _check_known(server, by_name, "names", names or {})
    if isinstance(tiers, Mapping):
        _check_known(server, by_name, "tiers", tiers)
    _check_known(server, by_name, "trust", trust or {})
    _check_known(server, by_name, "egress", egress or {})
    for tool_name, said in (trust or {}).items():
        if not isinstance(said, Trust):
            raise UsageError(
                f"the trust given to tool {tool_name!r} of MCP server {server!r} is {said!r}; give Trust.TRUSTED "
                "or Trust.UNTRUSTED"
            )
    for tool_name, said in (egress or {}).items():
        if not isinstance(said, bool):
            raise UsageError(
                f"the egress given to tool {tool_name!r} of MCP server {server!r} is {said!r}; give True or False"
            )
    chosen = [by_name[name] for name in include] if include is not None else list(by_name.values())
    wired: list[McpTool] = []
    seen: dict[str, str] = {}
    for definition in chosen:
        name = (names or {}).get(definition.name, definition.name)
        try:
            args_type = args_model(name, definition.input_schema)
        except UnusableSchema as unusable:
            raise UsageError(
                f"tool {definition.name!r} of MCP server {server!r} cannot be used: {unusable}; leave it out with "
                "include=[...]"
            ) from unusable
        tier = _tier_of(server, definition, tiers, trust_annotations)
        tool = McpTool(
            name=name,
            definition=definition,
            args_type=args_type,
            tier=tier,
            connection=connection,
            trust=(trust or {}).get(definition.name, Trust.UNTRUSTED),
            egress=(egress or {}).get(definition.name, True),
        )
        _check_name(server, tool, seen)
        seen[name] = definition.name
        wired.append(tool)
    return wired


def _check_known(
    server: str, listed: Mapping[str, object], option: str, wanted: Sequence[str] | Mapping[str, Any]
) -> None:
    unknown = sorted(name for name in wanted if name not in listed)
    if unknown:
        raise UsageError(
            f"{option} names tools that MCP server {server!r} does not list: {unknown}; it lists {sorted(listed)}"
        )


def _check_name(server: str, tool: McpTool, seen: Mapping[str, str]) -> None:
    remote = tool.definition.name
    if tool.name in seen:
        raise UsageError(
            f"tools {seen[tool.name]!r} and {remote!r} of MCP server {server!r} would both be named {tool.name!r}; "
            "give them distinct names with names={...}"
        )
    try:
        validate_tool_names([tool])
    except UsageError as unusable:
        raise UsageError(
            f"tool {remote!r} of MCP server {server!r} cannot be wired: {unusable}. Rename it with "
            f"names={{{remote!r}: 'a_valid_name'}} or leave it out with include=[...]"
        ) from unusable


def _tier_of(server: str, definition: mcp.types.Tool, tiers: TierSource | None, trust_annotations: bool) -> Tier | None:
    tier: object
    if tiers is None:
        tier = None
    elif isinstance(tiers, Mapping):
        tier = tiers.get(definition.name)
    else:
        tier = tiers(definition.model_copy(deep=True))
    if tier is not None and not isinstance(tier, Tier):
        raise UsageError(
            f"the tier given to tool {definition.name!r} of MCP server {server!r} is {tier!r}, not a Tier; "
            f"choose one of {tier_choices()}"
        )
    if tier is None and trust_annotations:
        return tier_from_annotations(definition)
    return tier


def _schema_key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _error_text(name: str, result: mcp.types.CallToolResult) -> str:
    parts = [
        block.text if isinstance(block, mcp.types.TextContent) else f"[{block.type} content]"
        for block in result.content
    ]
    text = "\n".join(parts).strip() or "no details given"
    if len(text) > _MAX_OBSERVATION:
        text = text[:_MAX_OBSERVATION] + f"... [{len(text) - _MAX_OBSERVATION} more characters cut]"
    return f"tool {name!r} reported an error: {text}"
