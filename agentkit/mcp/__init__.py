"""Tools from MCP servers, as ordinary agentkit `Tool` objects, gated by tiers the caller gives.

Needs the `mcp` extra (`pip install 'agentkit[mcp]'`, the official MCP Python SDK 2.x).
`connect_stdio` starts a server as a subprocess; `connect_http` reaches one over streamable
HTTP. `await server.tools(tiers=...)` lists its tools and wires each as a `McpTool`, usable
in every loop, in program gating, in approvals and in the journal. A tool gets its tier from the
caller, or from the server's annotations only with `trust_annotations=True`; a tool without one
is refused by every loop (`TOOL_DECLARES_NO_TIER`). See docs/mcp.md for the rules and the
threat model.

Example:
    >>> async with connect_stdio("python", ["files_server.py"], name="files") as server:
    ...     tools = await server.tools(tiers={"read_file": Tier.READ_ONLY, "delete_file": Tier.IRREVERSIBLE})
    ...     result = await run_tool_loop_tiered(caller, agent, tools, ctx)
"""

try:
    import mcp as _sdk  # noqa: F401  # fail here, with the fix, rather than deep inside a module
except ImportError as missing:  # pragma: no cover - the test extra installs it
    raise ImportError("agentkit.mcp needs the MCP SDK; install it with: pip install 'agentkit[mcp]'") from missing

from agentkit.mcp._args import McpArgs
from agentkit.mcp._connection import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    McpConnection,
    McpServerError,
    connect_http,
    connect_stdio,
)
from agentkit.mcp._tools import McpItem, McpTool, TierSource, tier_from_annotations

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "McpArgs",
    "McpConnection",
    "McpItem",
    "McpServerError",
    "McpTool",
    "TierSource",
    "connect_http",
    "connect_stdio",
    "tier_from_annotations",
]
