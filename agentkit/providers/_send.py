"""How `OpenAICaller`'s and `AnthropicCaller`'s requests reach the server: through public interfaces only.

Every request is a `POST` (`{base_url}chat/completions`, `{base_url}/v1/messages`) whose body the caller has
already built (compact JSON, the schema's part serialised once per schema). Both SDKs are built the same way
(`AsyncOpenAI`, `AsyncAnthropic`: an httpx2 client, `auth_headers`, `default_headers`, a documented `post`),
so both go the same two roads, both public (described for `openai`; `anthropic`'s names are the same):

* **A client the caller builds** (`OpenAICaller(base_url=..., api_key=...)`) runs on an
  `httpx2.AsyncClient` the caller makes for it (`openai.DefaultAsyncHttpxClient`, the SDK's own
  defaults: its connection limits, redirects followed) and hands to the `openai` client as its
  `http_client`. Each request is built with that HTTP client's `build_request` and sent with its
  `send`: its connection pool, cookies, redirects, log line and decoding are httpx2's own. The
  headers are the `openai` client's (`auth_headers`, `default_headers`, less the SDK's
  `X-Stainless-*` telemetry), made again whenever `client.api_key` changes, so a key rotated on
  `caller.client` is the one sent. Nothing else is built per request.
* **A client you pass** goes through its documented interface, `client.post(path,
  cast_to=httpx2.Response, content=...)` (the SDK's "undocumented endpoints" call): its auth (a
  key provider, a rotated key, custom auth), default query and headers, event hooks, logging and
  any instrumentation that wraps its request method all apply, as they do for `chat.completions`.

Either road can also stream (`stream=True`, for a body that asks the server to): the response then
comes back once its headers are in, its body unread, for the caller to read as it arrives
(`aiter_bytes`) and close (`aclose`); on the first road that is `send(..., stream=True)`, on the
second the same `post` with `stream=True` (and the SDK's public stream class, `openai.AsyncStream` or
`anthropic.AsyncStream`, as its `stream_cls`, which a `cast_to` of `httpx2.Response` leaves unused: the raw
response is returned).

Either road yields the response or raises `openai.APITimeoutError` / `openai.APIConnectionError`;
a status other than 2xx is the response itself on the first road and the client's
`openai.APIStatusError` (which carries it) on the second. `OpenAICaller` maps both from the
response, in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

import httpx2
import openai

__all__ = [
    "ClientOwner",
    "ClosedWhenGarbage",
    "InFlight",
    "OwnedHttpClient",
    "SdkClient",
    "Send",
    "through_client",
    "through_http",
]


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientOwner(Generic[C]):
    """What a caller over an SDK client shares: `client`, and `aclose` (also on leaving `async with`), which
    closes the client only when the caller built it (`_owns_client`); a client passed in stays its owner's."""

    _client: C
    _owns_client: bool

    @property
    def client(self) -> C:
        """The client requests go through (its own retries are off)."""
        return self._client

    async def aclose(self) -> None:
        """Close the client if this caller built it; a client you passed stays yours to close."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Send(Protocol):
    """Send one request body: the response (or, through a client, its `openai.APIStatusError`), else
    `openai.APITimeoutError` or `openai.APIConnectionError`; with `stream`, the response with its body unread."""

    async def __call__(self, content: bytes, stream: bool = False) -> httpx2.Response: ...


class ClosedWhenGarbage(httpx2.AsyncClient):
    """An HTTP client closed once it is garbage, as an SDK closes the one it makes itself, so that a caller left
    unclosed leaves no connection open (mixed into an SDK's default client class)."""

    def __del__(self) -> None:
        if self.is_closed:
            return
        with contextlib.suppress(Exception):  # no running loop: nothing can close it any more
            asyncio.get_running_loop().create_task(self.aclose())


class OwnedHttpClient(ClosedWhenGarbage, openai.DefaultAsyncHttpxClient):
    """The HTTP client a caller builds for its `openai` client: the SDK's defaults, closed once it is garbage."""


class SdkClient(Protocol):
    """What `through_http` reads of an SDK client (`openai.AsyncOpenAI` and `anthropic.AsyncAnthropic` alike)."""

    @property
    def api_key(self) -> object: ...
    @property
    def base_url(self) -> httpx2.URL: ...
    @property
    def auth_headers(self) -> Mapping[str, str]: ...
    @property
    def default_headers(self) -> Mapping[str, object]: ...


class RequestError(Protocol):
    """An SDK's error class for a request that failed on the way (`APITimeoutError`, `APIConnectionError`)."""

    def __call__(self, *, request: httpx2.Request) -> Exception: ...


class Posting(Protocol):
    """An SDK client's documented `post` (`openai.AsyncOpenAI` and `anthropic.AsyncAnthropic` alike)."""

    def post(
        self, path: str, *, cast_to: type[httpx2.Response], content: bytes, stream: bool, stream_cls: Any = ...
    ) -> Awaitable[Any]: ...


class StreamFailed(Protocol):
    """An SDK's `APIConnectionError`, made with a message."""

    def __call__(self, *, message: str, request: httpx2.Request) -> Exception: ...


def through_client(client: Posting, path: str, *, stream_cls: type[Any], failed: StreamFailed) -> Send:
    """The client's documented `post`: everything the client does per request applies. With `stream`, the same
    `post` with `stream=True` and the SDK's public stream class as `stream_cls` (which a `cast_to` of
    `httpx2.Response` leaves unused): the raw response, its body unread; anything else is `failed`."""

    async def send(content: bytes, stream: bool = False) -> httpx2.Response:
        if stream:
            response: object = await client.post(
                path, cast_to=httpx2.Response, content=content, stream=True, stream_cls=stream_cls
            )
        else:
            response = await client.post(path, cast_to=httpx2.Response, content=content, stream=False)
        if isinstance(response, httpx2.Response):  # the SDK returns the raw response for this cast_to
            return response
        close = getattr(response, "close", None)
        if close is not None:
            await close()
        raise failed(
            message=f"the client returned {type(response).__name__}, not the raw response",
            request=getattr(getattr(response, "response", None), "request", None) or httpx2.Request("POST", path),
        )

    return send


def through_http(
    client: SdkClient,
    http: httpx2.AsyncClient,
    path: str,
    *,
    timeout_error: RequestError = openai.APITimeoutError,
    connection_error: RequestError = openai.APIConnectionError,
) -> Send:
    """`http.build_request` and `http.send`, with the SDK client's URL and headers: for a client the caller
    built on `http` itself (nothing per request but the key, read from `client.api_key`). A failure on the way
    is raised as the SDK's own `timeout_error` or `connection_error`, as the SDK itself raises it."""
    return _ThroughHttp(client, http, path, timeout_error, connection_error)


class _ThroughHttp:
    __slots__ = ("_client", "_connection_error", "_headers", "_http", "_key", "_timeout_error", "_url")

    def __init__(
        self,
        client: SdkClient,
        http: httpx2.AsyncClient,
        path: str,
        timeout_error: RequestError,
        connection_error: RequestError,
    ) -> None:
        self._client = client
        self._http = http
        self._timeout_error = timeout_error
        self._connection_error = connection_error
        self._url = client.base_url.join(path.lstrip("/"))
        self._key: object = None
        self._headers: dict[str, str] = {}
        self._refresh()

    def _refresh(self) -> None:
        client = self._client
        self._key = client.api_key
        headers = {**client.default_headers, **client.auth_headers}
        self._headers = {
            name: value
            for name, value in headers.items()
            if isinstance(value, str) and not name.lower().startswith("x-stainless-")
        }

    async def __call__(self, content: bytes, stream: bool = False) -> httpx2.Response:
        if self._client.api_key is not self._key:
            self._refresh()
        request = self._http.build_request("POST", self._url, content=content, headers=self._headers)
        try:
            return await self._http.send(request, stream=stream)
        except httpx2.TimeoutException as error:
            raise self._timeout_error(request=request) from error
        except Exception as error:  # as the SDK's rule: anything else on the way is a connection error
            raise self._connection_error(request=request) from error


class InFlight:
    """The bound on a caller's requests on the wire (`max_in_flight`): `async with slot():` waits its turn, first
    come first served, before the request reaches the HTTP pool (one semaphore per event loop); `None`: no bound.

    httpx's pool scans every queued request and every connection on each request it starts or ends, so 10,000
    concurrent runs handed to it at once cost quadratic CPU; behind the bound its work per request stays constant.
    """

    __slots__ = ("_bound", "_loop", "_semaphore")

    def __init__(self, bound: int | None) -> None:
        self._bound = bound
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self) -> contextlib.AbstractAsyncContextManager[Any]:
        if self._bound is None:
            return contextlib.nullcontext()
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._semaphore, self._loop = asyncio.Semaphore(self._bound), loop
        return self._semaphore
