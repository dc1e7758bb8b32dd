"""How `OpenAICaller`'s requests reach the server: through public interfaces only.

Every request is a `POST {base_url}chat/completions` whose body `OpenAICaller` has already built
(compact JSON, the schema's part serialised once per schema). There are two roads, both public:

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
(`aiter_lines`) and close (`aclose`); on the first road that is `send(..., stream=True)`, on the
second the same `post` with `stream=True` (and the SDK's public `openai.AsyncStream` as its
`stream_cls`, which a `cast_to` of `httpx2.Response` leaves unused: the raw response is returned).

Either road yields the response or raises `openai.APITimeoutError` / `openai.APIConnectionError`;
a status other than 2xx is the response itself on the first road and the client's
`openai.APIStatusError` (which carries it) on the second. `OpenAICaller` maps both from the
response, in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import httpx2
import openai

__all__ = ["OwnedHttpClient", "Send", "through_client", "through_http"]


class Send(Protocol):
    """Send one request body: the response (or, through a client, its `openai.APIStatusError`), else
    `openai.APITimeoutError` or `openai.APIConnectionError`; with `stream`, the response with its body unread."""

    async def __call__(self, content: bytes, stream: bool = False) -> httpx2.Response: ...


class OwnedHttpClient(openai.DefaultAsyncHttpxClient):
    """The HTTP client a caller builds for its `openai` client: the SDK's defaults, and closed once it is garbage,
    as the SDK closes the one it makes itself, so that a caller left unclosed leaves no connection open."""

    def __del__(self) -> None:
        if self.is_closed:
            return
        with contextlib.suppress(Exception):  # no running loop: nothing can close it any more
            asyncio.get_running_loop().create_task(self.aclose())


def through_client(client: openai.AsyncOpenAI, path: str) -> Send:
    """The client's documented `post`: everything the client does per request applies."""

    async def send(content: bytes, stream: bool = False) -> httpx2.Response:
        if not stream:
            return await client.post(path, cast_to=httpx2.Response, content=content)
        response = await client.post(
            path, cast_to=httpx2.Response, content=content, stream=True, stream_cls=openai.AsyncStream[object]
        )
        if not isinstance(response, httpx2.Response):  # the SDK returns the raw response for this cast_to
            await response.close()
            raise openai.APIConnectionError(
                message=f"the openai client streamed {type(response).__name__}, not the raw response",
                request=response.response.request,
            )
        return response

    return send


def through_http(client: openai.AsyncOpenAI, http: httpx2.AsyncClient, path: str) -> Send:
    """`http.build_request` and `http.send`, with the `openai` client's URL and headers: for a client the caller
    built on `http` itself (nothing per request but the key, read from `client.api_key`)."""
    return _ThroughHttp(client, http, path)


class _ThroughHttp:
    __slots__ = ("_client", "_headers", "_http", "_key", "_url")

    def __init__(self, client: openai.AsyncOpenAI, http: httpx2.AsyncClient, path: str) -> None:
        self._client = client
        self._http = http
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
            raise openai.APITimeoutError(request=request) from error
        except Exception as error:  # as the SDK's rule: anything else on the way is a connection error
            raise openai.APIConnectionError(request=request) from error
