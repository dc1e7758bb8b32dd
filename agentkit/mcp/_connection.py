"""`McpConnection`: one live connection to one MCP server, over stdio or streamable HTTP.

The SDK's client lives in a task of its own, entered and left there. A transport that fails
(a server that crashes, exits or drops the HTTP connection) then ends that task, not the
caller's: every request races the owner task, so a dead server fails the pending call at once
with an `McpServerError` naming the server, and a hung one fails it when `timeout` runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import urlsplit

from agentkit.errors import McpServerError, UsageError

if TYPE_CHECKING:
    import mcp
    import mcp.types

    from agentkit._trust import Trust
    from agentkit.mcp._tools import McpTool, TierSource

__all__ = ["McpConnection", "McpServerError", "connect_http", "connect_stdio"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0
"""Seconds one request to a server (listing, one call) may take by default."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds starting or reaching a server, with the protocol handshake, may take by default."""
_MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
"""The largest server-sent event read over HTTP (the SDK's default, 1 MiB, is smaller than many results)."""
_MAX_PAGES = 100
"""Most `tools/list` pages read: a server that paginates forever cannot hang the wiring."""


class McpConnection:
    """A connection to one MCP server; use it as `async with connect_stdio(...) as server:`.

    `await server.tools(tiers=...)` lists the server's tools and wires each as an agentkit
    `Tool`. The tools call through this connection, so use them inside the `async with`.
    """

    def __init__(
        self, client: Callable[[], mcp.Client], *, name: str, timeout: float | None, connect_timeout: float | None
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"an MCP connection needs a non-empty name (used in errors); got {name!r}")
        for option, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value is not None and not value > 0:
                raise UsageError(f"{option} must be positive seconds, or None for no limit; got {value!r}")
        self._connect_timeout = connect_timeout
        self._make_client = client
        self._name = name
        self._timeout = timeout
        self._client: mcp.Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._failure: BaseException | None = None

    @property
    def name(self) -> str:
        """The server's name in messages and errors."""
        return self._name

    @property
    def timeout(self) -> float | None:
        """Seconds one request may take; `None`: no limit."""
        return self._timeout

    def __repr__(self) -> str:
        state = "open" if self._client is not None and not self._gone() else "closed"
        return f"<McpConnection {self._name!r} {state}>"

    async def __aenter__(self) -> Self:
        if self._owner is not None:
            raise UsageError(f"the connection to MCP server {self._name!r} was already opened; make a new one")
        ready = asyncio.Event()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self._name}")
        waiter = asyncio.create_task(ready.wait())
        try:
            async with asyncio.timeout(self._connect_timeout):
                await asyncio.wait({waiter, self._owner}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await self._stop()
            raise McpServerError(
                f"MCP server {self._name!r} did not finish connecting within {self._connect_timeout}s",
                server=self._name,
            ) from None
        except BaseException:
            await self._stop()
            raise
        finally:
            waiter.cancel()
        if not ready.is_set():
            await self._stop()
            raise McpServerError(
                f"could not connect to MCP server {self._name!r}: {_describe(self._failure)}", server=self._name
            ) from self._failure
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self._stop()

    async def _own(self, ready: asyncio.Event) -> None:
        try:
            async with self._make_client() as client:
                self._client = client
                ready.set()
                await self._closing.wait()
        except BaseException as failure:  # the transport's failure is reported by the calls it fails
            self._failure = failure
            if not isinstance(failure, Exception):
                raise
        finally:
            self._client = None

    async def _stop(self) -> None:
        owner = self._owner
        if owner is None:
            return
        self._closing.set()
        # Closing a stdio server waits for it to exit (the SDK escalates to a kill); a crashed
        # transport has already failed, and its failure was reported to the call it broke.
        with contextlib.suppress(Exception):
            await owner

    def _gone(self) -> bool:
        return self._owner is None or self._owner.done() or self._closing.is_set()

    async def request(self, what: str, send: Callable[[mcp.Client], Awaitable[T]]) -> T:
        """Send one request within `timeout`, failing at once if the server's transport dies.

        Raises:
            McpServerError: naming the server and `what` was asked.
        """
        from mcp import MCPError

        client, owner = self._client, self._owner
        if client is None or owner is None or self._gone():
            raise McpServerError(self._gone_message(what), server=self._name) from self._failure
        sent = asyncio.ensure_future(send(client))
        try:
            async with asyncio.timeout(self._timeout):
                await asyncio.wait({sent, owner}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise McpServerError(
                f"MCP server {self._name!r} did not answer {what} within {self._timeout}s", server=self._name
            ) from None
        finally:
            if not sent.done():
                sent.cancel()
                await asyncio.wait({sent})  # let it unwind; its outcome is not wanted any more
        if sent.cancelled():
            raise McpServerError(self._gone_message(what), server=self._name) from self._failure
        try:
            return sent.result()
        except MCPError as error:
            raise McpServerError(
                f"MCP server {self._name!r} failed {what}: {error} (code {error.code})", server=self._name
            ) from error
        except Exception as error:  # a broken transport, a malformed or unexpected reply
            raise McpServerError(
                f"MCP server {self._name!r} failed {what}: {_describe(error)}", server=self._name
            ) from error

    def _gone_message(self, what: str) -> str:
        if self._failure is not None:
            return f"MCP server {self._name!r} is gone ({_describe(self._failure)}); {what} was not answered"
        return f"the connection to MCP server {self._name!r} is closed; {what} needs it open (inside `async with`)"

    async def list_tools(self) -> list[mcp.types.Tool]:
        """Every tool the server lists now, all pages, never from a cache."""
        listed: list[mcp.types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self.request("tools/list", functools.partial(_list_page, cursor=cursor))
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return listed
        raise McpServerError(
            f"MCP server {self._name!r} listed more than {_MAX_PAGES} pages of tools", server=self._name
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> mcp.types.CallToolResult:
        """One `tools/call`, as sent: no automatic re-send, no server-initiated questions."""

        async def send(client: mcp.Client) -> mcp.types.CallToolResult:
            # The session's call, not the client's: the client re-sends a call the server refuses as
            # stale, after re-listing, which would run it against a schema nobody checked.
            return await client.session.call_tool(name, arguments)

        return await self.request(f"the call to tool {name!r}", send)

    async def tools(
        self,
        *,
        tiers: TierSource | None = None,
        trust_annotations: bool = False,
        include: Sequence[str] | None = None,
        names: Mapping[str, str] | None = None,
        trust: Mapping[str, Trust] | None = None,
        egress: Mapping[str, bool] | None = None,
    ) -> list[McpTool]:
        """List the server's tools and wire each one as an agentkit `Tool`, its tier fixed now.

        Args:
            tiers: Each tool's tier: a mapping from the server's tool name to a `Tier`, or a
                function of the tool's definition returning a `Tier` or `None`. A tool it
                gives no tier to has none (unless `trust_annotations`), and a loop refuses it
                (`StopReason.TOOL_DECLARES_NO_TIER`) without running it.
            trust_annotations: Opt in to reading a tier from the server's annotations for the
                tools `tiers` gives none to (`tier_from_annotations`). Annotations are the
                server's claims, not facts.
            include: Wire only these tools (the server's names). Default: every listed tool.
            names: The agentkit name of a server tool, where the server's name is not usable
                (agentkit names match `^[a-zA-Z0-9_-]{1,64}$`, and cannot be a step field).
            trust: The trust of a tool's results, by the server's name; a tool it does not name is
                `Trust.UNTRUSTED` (a server is a third party: see docs/provenance.md).
            egress: Whether a tool sends data out, by the server's name; a tool it does not name is
                egress (its arguments reach the server).

        Raises:
            McpServerError: the server failed, or listed two tools under one name.
            UsageError: `tiers`, `include` or `names` name a tool the server does not list,
                a tier is not a `Tier`, or a wired tool's name or schema cannot be used
                (the message says which option fixes it).
        """
        from agentkit.mcp._tools import wire

        return wire(self, await self.list_tools(), tiers, trust_annotations, include, names, trust, egress)


def connect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> McpConnection:
    """A connection to an MCP server that runs as a subprocess speaking over stdin/stdout.

    The process starts when the connection is entered (`async with`) and is stopped when it is
    left. It gets only `env` and a few safe variables (`PATH`, `HOME`...), not this process's
    whole environment.

    Args:
        command: The executable.
        args: Its arguments.
        name: The server's name in errors; the executable's file name by default.
        env: Environment variables for the server.
        cwd: Its working directory.
        timeout: Seconds one request (listing, one call) may take; `None`: no limit.
        connect_timeout: Seconds starting the server and the handshake may take; `None`: no limit.
    """
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=command,
        args=list(args),
        env=dict(env) if env is not None else None,
        cwd=None if cwd is None else Path(cwd),
    )
    label = name if name is not None else Path(command).name
    return McpConnection(
        lambda: Client(params, cache=None), name=label, timeout=timeout, connect_timeout=connect_timeout
    )


def connect_http(
    url: str,
    *,
    name: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> McpConnection:
    """A connection to an MCP server over streamable HTTP at `url` (`http://host:port/mcp`).

    Args:
        url: The server's MCP endpoint.
        name: The server's name in errors; the URL's host and path by default.
        headers: Sent with every request (an `Authorization` header, say).
        timeout: Seconds one request (listing, one call) may take; `None`: no limit.
        connect_timeout: Seconds connecting and the handshake may take; `None`: no limit.
    """
    from mcp import Client

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"an MCP server URL is http:// or https:// with a host, like http://127.0.0.1:8000/mcp; got {url!r}"
        )
    label = name if name is not None else f"{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
    fixed_headers = dict(headers or {})
    return McpConnection(
        lambda: Client(_http_transport(url, fixed_headers), cache=None),
        name=label,
        timeout=timeout,
        connect_timeout=connect_timeout,
    )


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport with our headers and a larger event limit."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # The SDK's own client timeouts: 30 s to connect or write, 300 s to read a held-open stream.
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http, max_sse_event_size=_MAX_SSE_EVENT_BYTES) as streams,
    ):
        yield streams


async def _list_page(client: mcp.Client, *, cursor: str | None) -> mcp.types.ListToolsResult:
    return await client.list_tools(cursor=cursor, cache_mode="bypass")


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "no error was reported"
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
