"""How `OpenAICaller`'s requests reach the server: through the `openai` client, by one of two roads.

Every request is a `POST {base_url}chat/completions` whose body `OpenAICaller` has already
built. For a stock `openai.AsyncOpenAI` (a fixed API key; no key provider, provider runtime,
workload identity or custom auth; no default query), everything the client's `post` adds to
that body is fixed when the caller is built: the URL, the headers (auth, organization, project,
user agent, platform, the client's default headers) and the timeout. `post_for` then prepares
them once and sends each body through the client's own `httpx2.AsyncClient`, so its connection
pool, transport, proxies and event hooks carry the request as before, and answers a failure with
the client's own error classes. What it leaves out is the client's per-request pipeline (two deep
copies of the request options, the headers and the URL rebuilt, a response wrapper), which cost
more client CPU than the rest of an agentkit round, and the SDK's telemetry headers
(`X-Stainless-*`: 9 of its 13 headers, which cost about as much again to build, check and write).

Any other client (`AsyncAzureOpenAI` and other subclasses, a key given as a function, a provider
runtime, a default query) goes through `client.post`, which runs whatever that client does per
request. Either road yields the response or raises `openai` errors, so `OpenAICaller` maps
errors in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx2
import openai

__all__ = ["Post", "is_direct", "post_for"]

Post = Callable[[bytes], Awaitable[httpx2.Response]]
"""Send one request body; the response of a 2xx, else the `openai` error the client would raise."""

_PER_REQUEST_HOOKS = ("_api_key_provider", "_provider_runtime", "_workload_identity_auth")
"""`AsyncOpenAI` attributes that, when set, make the client compute something for each request."""


def post_for(client: openai.AsyncOpenAI, path: str) -> Post:
    """The way to send a body to `path` through `client`: prepared once where nothing varies per request."""
    http = _stock_http_client(client)
    if http is None:
        return _ThroughClient(client, path)
    return _Direct(client, http, path)


def is_direct(post: Post) -> bool:
    """Whether `post` sends straight through the client's HTTP client (for tests and diagnostics)."""
    return isinstance(post, _Direct)


def _stock_http_client(client: openai.AsyncOpenAI) -> httpx2.AsyncClient | None:
    """The client's HTTP client, when a request sent through it is what `client.post` would send."""
    if type(client) is not openai.AsyncOpenAI or client.custom_auth is not None or client.default_query:
        return None
    if any(getattr(client, name, None) is not None for name in _PER_REQUEST_HOOKS):
        return None
    if not client.api_key or not hasattr(client, "_make_status_error_from_response"):
        return None
    http = getattr(client, "_client", None)
    return http if isinstance(http, httpx2.AsyncClient) else None


def _telemetry(header: str) -> bool:
    """The SDK's `X-Stainless-*` headers (its language, version, OS, runtime): no server needs them to answer,
    and they are most of a request's headers, each one parsed, validated and written on every request."""
    return header.lower().startswith("x-stainless-")


class _ThroughClient:
    """`client.post`: the client's whole request pipeline, for clients that do work per request."""

    __slots__ = ("_client", "_path")

    def __init__(self, client: openai.AsyncOpenAI, path: str) -> None:
        self._client = client
        self._path = path

    async def __call__(self, content: bytes) -> httpx2.Response:
        return await self._client.post(self._path, cast_to=httpx2.Response, content=content)


class _Direct:
    """The stock client's request, prepared once, sent through its own HTTP client."""

    __slots__ = ("_client", "_headers", "_http", "_timeout", "_url")

    def __init__(self, client: openai.AsyncOpenAI, http: httpx2.AsyncClient, path: str) -> None:
        self._client = client
        self._http = http
        base = client.base_url
        # as the client joins a relative path to its base URL (which always ends in "/")
        self._url = base.copy_with(raw_path=base.raw_path + path.lstrip("/").encode())
        headers = {**client.auth_headers, **client.default_headers}
        self._headers = httpx2.Headers(
            {name: value for name, value in headers.items() if isinstance(value, str) and not _telemetry(name)}
        )
        self._timeout = client.timeout

    async def __call__(self, content: bytes) -> httpx2.Response:
        http = self._http
        request = http.build_request("POST", self._url, content=content, headers=self._headers, timeout=self._timeout)
        try:
            response = await http.send(request)
        except httpx2.TimeoutException as error:
            raise openai.APITimeoutError(request=request) from error
        except Exception as error:  # the client's own rule: anything else on the way is a connection error
            raise openai.APIConnectionError(request=request) from error
        if not response.is_success:
            # the client's own error, built as its pipeline builds it (message, body, class per status)
            make_error = cast("Callable[[httpx2.Response], Any]", self._client._make_status_error_from_response)
            raise make_error(response)
        return response
