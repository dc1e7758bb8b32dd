"""How OpenAICaller's requests reach the server: straight through a stock client's HTTP client, or its pipeline."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import httpx2
import openai
import pytest
from pydantic import BaseModel

from agentkit import StructuredRequest
from agentkit.errors import ProviderError, Throttled
from agentkit.providers._post import _Direct, is_direct, post_for
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.support import http_server

BASE = "http://llm.test/v1"


class Verdict(BaseModel):
    score: int


def reply_to(request: httpx2.Request) -> httpx2.Response:
    content = json.dumps({"score": 3})
    completion = {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    return httpx2.Response(200, json=completion)


class Recorder:
    """An httpx transport that answers every request with one completion and keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def client(self, **options: object) -> openai.AsyncOpenAI:
        transport = httpx2.MockTransport(self.handle)
        http = httpx2.AsyncClient(transport=transport)
        return openai.AsyncOpenAI(base_url=BASE, http_client=http, max_retries=0, **options)  # type: ignore[arg-type]  # options of the client's own types

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return reply_to(request)


def sent_headers(request: httpx2.Request) -> dict[str, str]:
    """The request's headers, less the SDK's telemetry (``X-Stainless-*``) and the length of its body."""
    return {
        name: value
        for name, value in request.headers.items()
        if not name.startswith("x-stainless-") and name != "content-length"
    }


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_a_stock_client_sends_straight_through_its_http_client(recorder: Recorder) -> None:
    """A plain AsyncOpenAI with a fixed key gets the direct road, built or passed."""
    assert is_direct(post_for(recorder.client(api_key="k"), "/chat/completions"))
    assert is_direct(OpenAICaller(recorder.client(api_key="k"))._post)
    assert is_direct(OpenAICaller(base_url=BASE, api_key="k")._post)


async def test_the_direct_request_is_the_one_the_client_would_send(recorder: Recorder) -> None:
    """Same method, URL, body and headers (auth, organization, project, defaults) as client.post, less telemetry."""
    client = recorder.client(api_key="k", organization="org-1", project="proj-1", default_headers={"X-Team": "search"})
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    async with client:
        await client.post("/chat/completions", cast_to=httpx2.Response, content=body)
        await post_for(client, "/chat/completions")(body)
    through_client, direct = recorder.requests
    assert (direct.method, direct.url, direct.content) == (through_client.method, through_client.url, body)
    assert sent_headers(direct) == sent_headers(through_client)
    assert sent_headers(direct)["authorization"] == "Bearer k"
    assert sent_headers(direct)["x-team"] == "search"
    assert not [name for name in direct.headers if name.startswith("x-stainless-")]
    assert direct.extensions["timeout"] == through_client.extensions["timeout"]


async def key() -> str:
    return "from-a-function"


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"api_key": key}, id="a key given as a function"),
        pytest.param({"api_key": "k", "default_query": {"api-version": "2025-01"}}, id="a default query"),
    ],
)
async def test_a_client_that_works_per_request_goes_through_its_pipeline(
    recorder: Recorder, options: dict[str, object]
) -> None:
    """A client that computes something per request (a key provider, a query) is sent through client.post."""
    async with recorder.client(**options) as client:
        caller = OpenAICaller(client)
        assert not is_direct(caller._post)
        completion = await caller.complete(StructuredRequest(system="", dynamic="rate", model="m"), Verdict)
    assert completion.value == Verdict(score=3)
    (sent,) = recorder.requests
    if options["api_key"] is key:
        assert sent.headers["authorization"] == "Bearer from-a-function"
    else:
        assert sent.url.params["api-version"] == "2025-01"


def test_a_subclass_of_the_client_goes_through_its_pipeline() -> None:
    """AsyncAzureOpenAI (and any subclass) builds its own requests, so it is never sent around its pipeline."""
    azure = openai.AsyncAzureOpenAI(api_key="k", api_version="2025-01-01", azure_endpoint="https://x.openai.azure.com")
    assert not is_direct(post_for(azure, "/chat/completions"))


Road = Callable[[FakeOpenAIServer], openai.AsyncOpenAI]


def direct_client(server: FakeOpenAIServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)


def pipeline_client(server: FakeOpenAIServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key=key, max_retries=0)


ROADS = [pytest.param(direct_client, id="direct"), pytest.param(pipeline_client, id="through the client")]


@pytest.mark.parametrize("road", ROADS)
async def test_a_429_is_throttled_on_either_road(road: Road) -> None:
    """HTTP 429 is Throttled, with Retry-After, after one request."""
    with FakeOpenAIServer([FakeReply.error(429, retry_after=7)]) as server:
        async with road(server) as client:
            with pytest.raises(Throttled) as raised:
                await OpenAICaller(client).complete(StructuredRequest(system="", dynamic="rate", model="m"), Verdict)
    assert raised.value.retry_after == 7
    assert len(server.requests) == 1


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize(("status", "transient"), [(500, True), (503, True), (400, False), (404, False)])
async def test_a_status_error_is_a_provider_error_on_either_road(road: Road, status: int, transient: bool) -> None:
    """A 5xx is a transient ProviderError and a 4xx a lasting one, with the server's message, whatever the road."""
    with FakeOpenAIServer([FakeReply.error(status, message="the server says no")]) as server:
        async with road(server) as client:
            with pytest.raises(ProviderError) as raised:
                await OpenAICaller(client).complete(StructuredRequest(system="", dynamic="rate", model="m"), Verdict)
    assert (raised.value.status, raised.value.transient) == (status, transient)
    assert "the server says no" in str(raised.value)


@pytest.mark.parametrize("road", ROADS)
async def test_a_server_that_is_gone_is_a_transient_provider_error_on_either_road(road: Road) -> None:
    """A refused connection is a transient ProviderError naming the server, whatever the road."""
    with FakeOpenAIServer() as server:
        gone = road(server)
    async with gone as client:
        with pytest.raises(ProviderError, match="could not reach the model server") as raised:
            await OpenAICaller(client).complete(StructuredRequest(system="", dynamic="rate", model="m"), Verdict)
    assert raised.value.transient


class Scripted:
    """An httpx transport that answers each request with the next of its responses, and keeps the requests."""

    def __init__(self, *answers: Callable[[httpx2.Request], httpx2.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx2.Request] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.answers.pop(0)(request) if self.answers else reply_to(request)

    def client(self, **options: object) -> openai.AsyncOpenAI:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle), **options)  # type: ignore[arg-type]  # the HTTP client's own options
        return openai.AsyncOpenAI(base_url=BASE, http_client=http, api_key="k", max_retries=0)


BODY = b'{"model":"m","messages":[]}'


def direct_of(client: openai.AsyncOpenAI) -> _Direct:
    post = post_for(client, "/chat/completions")
    assert isinstance(post, _Direct)
    return post


async def test_a_stock_http_client_has_the_request_sent_on_its_transport() -> None:
    """A stock HTTP client's request goes to its own transport; the response is read and carries its request,
    its elapsed time and the client's default encoding, as the client's request layer leaves them."""
    script = Scripted()
    async with script.client(default_encoding="latin-1") as client:
        post = direct_of(client)
        assert post._transport is client._client._transport
        response = await post(BODY)
    assert response.json()["id"] == "chatcmpl-1"
    assert response.request is script.requests[0]
    assert response.request.url == httpx2.URL(f"{BASE}/chat/completions")
    assert response.elapsed.total_seconds() >= 0
    assert response.default_encoding == "latin-1"


def hook_seen(seen: list[str]) -> Callable[[httpx2.Request], Awaitable[None]]:
    async def hook(request: httpx2.Request) -> None:
        seen.append(str(request.url))

    return hook


async def test_an_http_client_that_works_per_request_sends_through_its_request_layer() -> None:
    """Auth, event hooks or query parameters on the HTTP client: each request goes through `send`, so they run."""
    seen: list[str] = []
    script = Scripted()
    options: list[dict[str, object]] = [
        {"auth": ("user", "secret")},
        {"event_hooks": {"request": [hook_seen(seen)]}},
        {"params": {"tenant": "a"}},
    ]
    for option in options:
        async with script.client(**option) as client:
            post = direct_of(client)
            assert post._transport is None
            await post(BODY)
    with_auth, hooked, with_params = script.requests
    assert with_auth.headers["authorization"].startswith("Basic ")
    assert seen == [str(hooked.url)]
    assert with_params.url.params["tenant"] == "a"


def test_a_subclass_of_the_http_client_that_sends_its_own_way_goes_through_its_request_layer() -> None:
    """An HTTP client whose class changes how a request is sent keeps doing so."""

    class Signing(httpx2.AsyncClient):
        async def send(self, request: httpx2.Request, **options: Any) -> httpx2.Response:
            request.headers["x-signature"] = "signed"
            return await super().send(request, **options)

    client = openai.AsyncOpenAI(base_url=BASE, http_client=Signing(), api_key="k")
    assert direct_of(client)._transport is None


def set_cookie(request: httpx2.Request) -> httpx2.Response:
    response = reply_to(request)
    response.headers["set-cookie"] = "route=b; Path=/"
    return response


async def test_a_cookie_the_server_sets_is_kept_and_sent_with_the_next_request() -> None:
    """A response that sets a cookie has it kept in the client's jar, and the next request carries it."""
    script = Scripted(set_cookie)
    async with script.client() as client:
        post = direct_of(client)
        await post(BODY)
        assert client._client.cookies["route"] == "b"
        await post(BODY)
    first, second = script.requests
    assert "cookie" not in first.headers
    assert second.headers["cookie"] == "route=b"


def moved(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(307, headers={"location": "http://llm.test/v2/chat/completions"})


async def test_a_redirect_is_followed_where_the_client_follows_them() -> None:
    """A redirect, where the HTTP client follows redirects, is followed as the client follows it: the request it
    asks for goes out once (the first is not sent again); where it does not, the redirect is the response (and
    the caller's status error)."""
    script = Scripted(moved)
    async with script.client(follow_redirects=True) as client:
        response = await direct_of(client)(BODY)
    assert response.is_success
    assert [str(r.url) for r in script.requests] == [f"{BASE}/chat/completions", "http://llm.test/v2/chat/completions"]
    assert [r.status_code for r in response.history] == [307]
    script = Scripted(moved)
    async with script.client() as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await direct_of(client)(BODY)
    assert raised.value.status_code == 307


async def test_each_request_is_logged_as_the_http_client_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    """The HTTP client's INFO line for each request (`httpx2` logger) is written on the direct road too."""
    script = Scripted()
    with caplog.at_level(logging.INFO, logger="httpx2"):
        async with script.client() as client:
            await direct_of(client)(BODY)
    assert [r.getMessage() for r in caplog.records if r.name == "httpx2"] == [
        f'HTTP Request: POST {BASE}/chat/completions "HTTP/1.1 200 OK"'
    ]


async def test_a_closed_client_sends_nothing() -> None:
    """A request through a closed client is a connection error, and reaches no server."""
    script = Scripted()
    client = script.client()
    post = direct_of(client)
    await client.close()
    with pytest.raises(openai.APIConnectionError):
        await post(BODY)
    assert script.requests == []


class Scene(http.server.BaseHTTPRequestHandler):
    """A real HTTP server's scripted answers, by path: a completion gzipped, one that sets a cookie, a
    redirect to the completion, a slow completion; every request's path and cookie header is kept."""

    seen: ClassVar[list[tuple[str, str | None]]] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        Scene.seen.append((self.path, self.headers["cookie"]))
        body = json.dumps(reply_to(httpx2.Request("POST", BASE)).json()).encode()
        headers = {"content-type": "application/json"}
        if self.path.startswith("/gzip/"):
            body, headers["content-encoding"] = gzip.compress(body), "gzip"
        if self.path.startswith("/cookie/"):
            headers["set-cookie"] = "route=b; Path=/"
        if self.path.startswith("/moved/"):
            self.send_response(307)
            self.send_header("location", "/plain/v1/chat/completions")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.path.startswith("/slow/"):
            time.sleep(0.5)
        self.send_response(200)
        for name, value in {**headers, "content-length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(ConnectionError):  # the slow reply's client has given up
            self.wfile.write(body)


@pytest.fixture
def scene() -> Iterator[str]:
    Scene.seen = []
    with http_server(Scene) as base:
        yield base


def pooled(base: str, **options: Any) -> tuple[openai.AsyncOpenAI, _Direct]:
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, **options)
    post = direct_of(client)
    assert post._pool is not None  # the openai client's own HTTP client: its connection pool takes the request
    return client, post


async def test_a_compressed_reply_on_the_connection_pool_is_decoded(scene: str) -> None:
    """A gzip-encoded completion sent on the client's connection pool reads as the client reads it: decoded."""
    client, post = pooled(f"{scene}/gzip")
    async with client:
        response = await post(BODY)
    assert response.json()["id"] == "chatcmpl-1"
    assert response.headers["content-encoding"] == "gzip"
    assert response.elapsed.total_seconds() >= 0


async def test_a_cookie_set_on_the_connection_pool_is_kept_and_sent(scene: str) -> None:
    """A cookie a response on the pool sets goes to the client's jar; the next request carries it."""
    client, post = pooled(f"{scene}/cookie")
    async with client:
        await post(BODY)
        await post(BODY)
    assert [cookie for _, cookie in Scene.seen] == [None, "route=b"]


async def test_a_redirect_on_the_connection_pool_is_followed_by_the_client(
    scene: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The openai client follows redirects: a 307 on the pool is followed as the client follows it, the POST
    sent once to each place; each request is logged as the client logs it."""
    client, post = pooled(f"{scene}/moved")
    with caplog.at_level(logging.INFO, logger="httpx2"):
        async with client:
            response = await post(BODY)
    assert response.is_success
    assert [path for path, _ in Scene.seen] == ["/moved/v1/chat/completions", "/plain/v1/chat/completions"]
    assert f'HTTP Request: POST {scene}/moved/v1/chat/completions "HTTP/1.1 307 Temporary Redirect"' in [
        r.getMessage() for r in caplog.records if r.name == "httpx2"
    ]


async def test_a_read_timeout_on_the_connection_pool_is_the_clients_timeout(scene: str) -> None:
    """The client's timeout holds on the pool: a reply slower than it is the client's timeout error."""
    client, post = pooled(f"{scene}/slow", timeout=0.1)
    async with client:
        with pytest.raises(openai.APITimeoutError) as raised:
            await post(BODY)
    assert isinstance(raised.value.__cause__, httpx2.ReadTimeout)
    assert raised.value.request.url == httpx2.URL(f"{scene}/slow/v1/chat/completions")


async def test_a_transport_patched_after_the_caller_is_made_takes_the_request(
    scene: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instrumentation or a mock that patches the stock transport (its class or the one instance) after the
    caller is made still sees every request: the pool road stands in only for httpx2's own method."""
    client, post = pooled(f"{scene}/plain")
    seen: list[str] = []
    original = httpx2.AsyncHTTPTransport.handle_async_request

    async def watched(self: httpx2.AsyncHTTPTransport, request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return await original(self, request)

    async with client:
        with monkeypatch.context() as patch:
            patch.setattr(httpx2.AsyncHTTPTransport, "handle_async_request", watched)
            await post(BODY)
        transport = client._client._transport
        assert isinstance(transport, httpx2.AsyncHTTPTransport)
        with monkeypatch.context() as patch:
            patch.setattr(transport, "handle_async_request", functools.partial(watched, transport), raising=False)
            await post(BODY)
        await post(BODY)  # the patches gone: the pool road again
    assert seen == [f"{scene}/plain/v1/chat/completions"] * 2
    assert len(Scene.seen) == 3


async def test_a_client_patched_or_changed_after_the_caller_is_made_sends_through_its_request_layer(
    scene: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP client's `send` patched on its class, or headers, an event hook or auth set on it after the caller
    is made: each request goes through its request layer, so all of them take effect."""
    client, post = pooled(f"{scene}/plain")
    sent: list[str] = []
    original = httpx2.AsyncClient.send

    async def watched(self: httpx2.AsyncClient, request: httpx2.Request, **options: Any) -> httpx2.Response:
        sent.append(request.url.path)
        return await original(self, request, **options)

    async with client:
        with monkeypatch.context() as patch:
            patch.setattr(httpx2.AsyncClient, "send", watched)
            await post(BODY)
        http = client._client
        http.headers["x-tenant"] = "a"
        hooked: list[str] = []
        http.event_hooks = {"request": [hook_seen(hooked)]}
        http.auth = ("user", "secret")
        response = await post(BODY)
    assert sent == ["/plain/v1/chat/completions"]
    assert response.request.headers["x-tenant"] == "a"
    assert response.request.headers["authorization"].startswith("Basic ")
    assert hooked == [f"{scene}/plain/v1/chat/completions"]
