"""How `OpenAICaller`'s requests reach the server: through the `openai` client, by the shortest road it allows.

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

Where that HTTP client is itself stock (`httpx2.AsyncClient`, or the `openai` package's own
subclasses of it that change nothing per request: no auth, event hooks, query parameters, proxy
mounts or credentials in the URL), `_Direct` also leaves out the HTTP client's request layer (the
URL and cookies merged again, an auth flow, redirect and event-hook loops, a stream wrapper per
response): the request, with the HTTP client's headers and timeout, is built once and handed to its
transport. Where that transport is stock too (`httpx2.AsyncHTTPTransport`), the request goes to
its connection pool (`httpcore2`) as the transport would hand it on, and the reply is read and
decoded (gzip, deflate) as the client reads it; the `httpx2.Request` a response carries is made
only where something reads it. What the layers left out do that a stock client's request can need
is kept: a response that sets a cookie has it kept in the client's jar (and while the jar holds
one, requests go through `http.send`, which sends it); a redirect the client follows is followed
as it follows it (the request it asks for made from the response, sent through `http.send`); the
response carries its elapsed time and the client's default encoding; the client logs each request
as its head comes in (`httpx2` logger, INFO); a closed client refuses to send; a failure on the pool
is the HTTP client's error (`httpx2.ReadTimeout`, say) under the `openai` error the client would
raise. Each request checks that this still holds: a client given auth, event hooks, query
parameters, proxies or other headers after the caller was made, or whose request layer or stock
transport was patched since (an instrumentation, a mock), has its requests go through its request
layer or its patched transport. Those layers cost about a third of a bare `httpx2` request's client
CPU (see docs/performance.md).

Any other client (`AsyncAzureOpenAI` and other subclasses, a key given as a function, a provider
runtime, a default query) goes through `client.post`, which runs whatever that client does per
request. Every road yields the response or raises `openai` errors, so `OpenAICaller` maps
errors in one place.
"""

from __future__ import annotations

import datetime
import logging
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpcore2
import httpx2
import openai

try:  # the HTTP client's own parts that its request layer uses; another layout takes that layer every time
    from httpx2._client import ClientState
    from httpx2._transports.default import map_httpcore_exceptions
except ImportError:  # pragma: no cover - an httpx2 release that moved them
    _KNOWN_LAYOUT = False
else:
    _KNOWN_LAYOUT = True

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
    """The stock client's request, prepared once, sent through its own HTTP client (or, where that is stock
    too, its transport or its connection pool)."""

    __slots__ = (
        "_client",
        "_extensions",
        "_handle",
        "_header_list",
        "_headers",
        "_http",
        "_layer",
        "_pool",
        "_sent_headers",
        "_timeout",
        "_transport",
        "_url",
    )

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
        timeout = client.timeout
        # made once: a number given per request is made into an `httpx2.Timeout` on each one, through a
        # runtime protocol check (`SupportsFloat`) that costs more than the rest of building the request
        self._timeout = timeout if isinstance(timeout, httpx2.Timeout | None) else httpx2.Timeout(timeout)
        self._transport = _bare_transport(http, self._url)
        self._layer = (type(http).send, type(http)._send_single_request)
        """The request layer's functions found untouched: a patch of them later (an instrumentation, a mock)
        sends through the client again."""
        self._header_list = list(getattr(http.headers, "_list", ()))
        """The HTTP client's headers as they were: changed later, its request layer sends."""
        # the request `http.build_request` makes: the HTTP client's headers, then these, and the timeout
        sent = http.headers.copy()
        sent.update(self._headers)
        self._sent_headers = sent
        self._extensions = {"timeout": (self._timeout or httpx2.Timeout(None)).as_dict()}
        kind = type(self._transport)
        handle = getattr(kind, "handle_async_request", None)
        pool = getattr(self._transport, "_pool", None)
        stock = kind is httpx2.AsyncHTTPTransport and _untouched(handle, "_transports/default.py")
        self._handle = handle if stock else None
        """The stock transport's own `handle_async_request`, which the pool road stands in for."""
        self._pool = (
            _Pool(pool, self._url, sent, self._extensions)
            if stock and isinstance(pool, httpcore2.AsyncConnectionPool)
            else None
        )

    def _request(self, content: bytes) -> httpx2.Request:
        """The request a stock HTTP client's request layer would send with `content`."""
        extensions = dict(self._extensions)
        return httpx2.Request("POST", self._url, headers=self._sent_headers, content=content, extensions=extensions)

    async def __call__(self, content: bytes) -> httpx2.Response:
        response = await self._sent(content)
        if not response.is_success:
            # the client's own error, built as its pipeline builds it (message, body, class per status)
            make_error = cast("Callable[[httpx2.Response], Any]", self._client._make_status_error_from_response)
            raise make_error(response)
        return response

    def _bare(self) -> httpx2.AsyncBaseTransport | None:
        """The transport to hand this request to, where the HTTP client's request layer would still do nothing
        for it but send it: nothing set on the client or patched into its class since the caller was made, and
        no cookie in its jar. `None`: the request goes through the client's `send`."""
        http, transport = self._http, self._transport
        if transport is None or http._transport is not transport or _holds_cookies(http):
            return None
        kind = type(http)
        if (kind.send, kind._send_single_request) != self._layer or http.auth is not None or http.params:
            return None
        hooks = http._event_hooks
        if hooks["request"] or hooks["response"] or http._mounts or http.headers._list != self._header_list:
            return None
        return transport

    def _pooled_on(self, transport: httpx2.AsyncBaseTransport) -> _Pool | None:
        """The connection pool, where the transport is the stock one with its own `handle_async_request`."""
        if self._pool is None or type(transport).handle_async_request is not self._handle:
            return None
        return None if "handle_async_request" in vars(transport) else self._pool

    async def _sent(self, content: bytes) -> httpx2.Response:
        """The response to `content`, by the shortest road the HTTP client allows (see the module docstring)."""
        http = self._http
        request: httpx2.Request | None = None
        transport = self._bare()
        try:
            if transport is not None:
                pool = self._pooled_on(transport)
                if pool is not None:
                    return await self._pooled(pool, content)
                request = self._request(content)
                return await self._transported(transport, request)
            request = http.build_request(
                "POST", self._url, content=content, headers=self._headers, timeout=self._timeout
            )
            return await http.send(request)
        except httpx2.TimeoutException as error:
            raise openai.APITimeoutError(request=request or self._request(content)) from error
        except Exception as error:  # the client's own rule: anything else on the way is a connection error
            raise openai.APIConnectionError(request=request or self._request(content)) from error

    async def _transported(self, transport: httpx2.AsyncBaseTransport, request: httpx2.Request) -> httpx2.Response:
        """`request` sent on the HTTP client's transport, as its request layer sends it: the response, read."""
        http = self._http
        opened(http)
        started = time.perf_counter()
        try:
            response = await transport.handle_async_request(request)
        except httpx2.RequestError as error:
            error.request = request  # as the client's request layer attaches it
            raise
        response.request = request
        response.default_encoding = http._default_encoding
        received(http, response)
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - started)
        return await followed(http, response)

    async def _pooled(self, pool: _Pool, content: bytes) -> httpx2.Response:
        """`content` sent on the HTTP client's connection pool, as its transport sends a request: the response,
        read and decoded as the client decodes it. The `httpx2.Request` it carries is made only where something
        reads it (an error status, a cookie, a redirect, the client's log)."""
        http = self._http
        opened(http)
        started = time.perf_counter()
        try:
            raw = await pool.pool.handle_async_request(pool.request(content))
            try:
                response = httpx2.Response(raw.status, headers=raw.headers, stream=_BODY, extensions=raw.extensions)
                response.default_encoding = http._default_encoding
                if not 200 <= raw.status < 300 or _http_log.isEnabledFor(logging.INFO) or _sets_cookie(response):
                    response.request = self._request(content)
                    received(http, response)
                body = await raw.aread()
            finally:
                await raw.aclose()
        except Exception as error:
            with map_httpcore_exceptions():  # the transport's own mapping to the HTTP client's errors
                raise error
            raise  # pragma: no cover - mapped above
        if "content-encoding" in response.headers:
            response.stream = httpx2.ByteStream(body)
            response.read()  # decoded as the client decodes a response
        else:
            response._content = body
            response.is_stream_consumed = response.is_closed = True
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - started)
        return await followed(http, response)


_BODY = httpx2.ByteStream(b"")
"""A read response's stream: its body is the response's content."""


class _Pool:
    """A stock HTTP client's connection pool, with the parts of a request to it made once: its URL, and its
    headers (those `http.build_request` writes, in its order) around the body's length."""

    __slots__ = ("extensions", "head", "length", "pool", "tail", "url")

    def __init__(
        self, pool: httpcore2.AsyncConnectionPool, url: httpx2.URL, headers: httpx2.Headers, extensions: dict[str, Any]
    ) -> None:
        self.pool = pool
        self.url = httpcore2.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path)
        raw = httpx2.Request("POST", url, headers=headers, content=b"-").headers.raw
        at = next(index for index, (name, _) in enumerate(raw) if name.lower() == b"content-length")
        self.head, self.length, self.tail = tuple(raw[:at]), raw[at][0], tuple(raw[at + 1 :])
        self.extensions = extensions

    def request(self, content: bytes) -> httpcore2.Request:
        headers = [*self.head, (self.length, str(len(content)).encode("ascii")), *self.tail]
        return httpcore2.Request(b"POST", self.url, headers=headers, content=content, extensions=dict(self.extensions))


_REQUEST_LAYER = (
    "send",
    "build_request",
    "_send_handling_auth",
    "_send_handling_redirects",
    "_send_single_request",
    "_transport_for_url",
    "_set_timeout",
    "_build_request_auth",
)
"""What `httpx2.AsyncClient` does per request: a class that overrides any of it is sent through `send`."""

_http_log = logging.getLogger("httpx2")


def _untouched(function: object, module: str) -> bool:
    """`function` is httpx2's own, as defined in `module` (not a wrapper or a mock patched in its place)."""
    code = getattr(function, "__code__", None)
    return (
        isinstance(function, types.FunctionType)
        and code is not None
        and code.co_filename.replace("\\", "/").endswith(f"httpx2/{module}")
    )


def _bare_transport(http: httpx2.AsyncClient, url: httpx2.URL) -> httpx2.AsyncBaseTransport | None:
    """The HTTP client's transport for `url`, when its request layer does nothing for that request but build it,
    send it and read the response (see the module docstring); `None` otherwise."""
    kind = type(http)
    if not _KNOWN_LAYOUT or any(not _untouched(getattr(kind, name, None), "_client.py") for name in _REQUEST_LAYER):
        return None
    hooks = getattr(http, "_event_hooks", None)
    mounts = getattr(http, "_mounts", None)
    jar = getattr(http.cookies.jar, "_cookies", None)
    transport = getattr(http, "_transport", None)
    if http.auth is not None or http.params or url.username or url.password or url.query:
        return None
    if not isinstance(hooks, dict) or any(hooks.values()) or mounts != {} or not isinstance(jar, dict):
        return None
    if not isinstance(getattr(http.headers, "_list", None), list) or not hasattr(kind, "_build_redirect_request"):
        return None
    return transport if isinstance(transport, httpx2.AsyncBaseTransport) else None


def _holds_cookies(http: httpx2.AsyncClient) -> bool:
    """The client's jar holds a cookie (which `build_request` would send): its request layer then sends."""
    return bool(http.cookies.jar._cookies)  # type: ignore[attr-defined]  # CookieJar's store, checked in _bare_transport


def opened(http: httpx2.AsyncClient) -> None:
    """Mark the client in use, as its `send` does; a closed one sends nothing."""
    if http._state is not ClientState.OPENED:
        if http.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        http._state = ClientState.OPENED


def received(http: httpx2.AsyncClient, response: httpx2.Response) -> None:
    """What the client's request layer does once a response's head is in: its cookies kept in the client's jar,
    its log line."""
    if _sets_cookie(response):
        http.cookies.extract_cookies(response)
    if _http_log.isEnabledFor(logging.INFO):
        request = response.request
        _http_log.info(
            'HTTP Request: %s %s "%s %d %s"',
            request.method,
            request.url,
            response.http_version,
            response.status_code,
            response.reason_phrase,
        )


def _sets_cookie(response: httpx2.Response) -> bool:
    return "set-cookie" in response.headers


async def followed(http: httpx2.AsyncClient, response: httpx2.Response) -> httpx2.Response:
    """`response`, or where it is a redirect the client follows, the response at the end of it: the request
    the redirect asks for, made from it as the client makes it, sent through `send` (which follows any further
    redirects, up to the client's `max_redirects` more)."""
    if not (300 <= response.status_code < 400 and http.follow_redirects and response.has_redirect_location):
        return response
    following = http._build_redirect_request(response.request, response)
    final = await http.send(following)
    final.history = [response, *final.history]
    return final
