"""How OpenAICaller's requests reach the server, on public interfaces only: a client the caller builds sends
through its HTTP client's `build_request` and `send`; a client you pass, through its documented `post`, so
its auth, hooks, logging and instrumentation apply."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import httpx2
import openai
import pytest
from pydantic import BaseModel

from agentkit import StructuredRequest
from agentkit.errors import ProviderError, Throttled
from agentkit.providers._send import OwnedHttpClient
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.support import http_server


class Verdict(BaseModel):
    score: int


REQUEST = StructuredRequest(system="", dynamic="rate", model="m")


class Keys(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that answers every completion request and keeps each request's Authorization header."""

    seen: ClassVar[list[str | None]] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        Keys.seen.append(self.headers["authorization"])
        content = json.dumps({"score": 3})
        body = json.dumps(
            {
                "id": "chatcmpl-1",
                "model": "m",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def keys() -> Iterator[str]:
    Keys.seen = []
    with http_server(Keys) as base:
        yield f"{base}/v1"


Road = Callable[[str], OpenAICaller]


def built(base_url: str) -> OpenAICaller:
    return OpenAICaller(base_url=base_url, api_key="first")


def passed(base_url: str) -> OpenAICaller:
    return OpenAICaller(openai.AsyncOpenAI(base_url=base_url, api_key="first"))


ROADS = [pytest.param(built, id="built"), pytest.param(passed, id="passed")]


@pytest.mark.parametrize("road", ROADS)
async def test_a_key_rotated_on_the_callers_client_is_the_key_sent(keys: str, road: Road) -> None:
    """A new api_key set on `caller.client` is sent with the next request, whoever built the client."""
    async with road(keys) as caller:
        await caller.complete(REQUEST, Verdict)
        caller.client.api_key = "second"
        await caller.complete(REQUEST, Verdict)
        await caller.client.close()
    assert Keys.seen == ["Bearer first", "Bearer second"]


async def test_a_key_provider_of_your_client_is_asked_for_each_request(keys: str) -> None:
    """A client whose key is a function (a key provider) has it called, and its key sent, on every request."""
    given = iter(["one", "two"])

    async def key() -> str:
        return next(given)

    async with openai.AsyncOpenAI(base_url=keys, api_key=key) as client:
        caller = OpenAICaller(client)
        await caller.complete(REQUEST, Verdict)
        await caller.complete(REQUEST, Verdict)
    assert Keys.seen == ["Bearer one", "Bearer two"]


async def test_an_event_hook_on_your_clients_http_client_sees_each_request() -> None:
    """The request event hooks of the HTTP client under a client you pass run for every request."""
    hooked: list[str] = []

    async def hook(request: httpx2.Request) -> None:
        hooked.append(str(request.url))

    with FakeOpenAIServer() as server:
        url = f"{server.base_url}/chat/completions"
        http = httpx2.AsyncClient(event_hooks={"request": [hook]})
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", http_client=http) as client:
            await OpenAICaller(client).complete(REQUEST, Verdict)
    assert hooked == [url]


async def test_the_sdks_debug_log_shows_each_request_of_your_client(caplog: pytest.LogCaptureFixture) -> None:
    """The openai SDK's own debug log (logger `openai`) records the request a client you pass sends."""
    with FakeOpenAIServer() as server, caplog.at_level(logging.DEBUG, logger="openai"):
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k") as client:
            await OpenAICaller(client).complete(REQUEST, Verdict)
    logged = [record.getMessage() for record in caplog.records if record.name.startswith("openai")]
    # the SDK's own wording, in every 3.x release so far (later ones leave the URL out)
    assert any(message.startswith("Sending HTTP Request: POST") for message in logged)
    assert any(message.startswith("HTTP Response: POST") for message in logged)


async def test_an_instrumentation_wrapping_the_sdks_request_method_sees_each_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrapper around the SDK client's `request` method (as tracing instrumentations install) sees every request
    of a client you pass."""
    seen: list[str] = []
    original = openai.AsyncOpenAI.request

    async def traced(self: openai.AsyncOpenAI, cast_to: Any, options: Any, **kwargs: Any) -> Any:
        seen.append(options.url)
        return await original(self, cast_to, options, **kwargs)

    monkeypatch.setattr(openai.AsyncOpenAI, "request", traced)
    with FakeOpenAIServer() as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k") as client:
            caller = OpenAICaller(client)
            await caller.complete(REQUEST, Verdict)
            await caller.complete_text(REQUEST)
    assert seen == ["/chat/completions", "/chat/completions"]


async def test_a_built_client_sends_through_its_http_clients_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that builds its client sends each request through the HTTP client's public `send`, so what wraps
    `httpx2.AsyncClient.send` sees it, with the body as built and the client's auth."""
    sent: list[httpx2.Request] = []
    original = httpx2.AsyncClient.send

    async def send(self: httpx2.AsyncClient, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        sent.append(request)
        return await original(self, request, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "send", send)
    with FakeOpenAIServer() as server:
        url = f"{server.base_url}/chat/completions"
        async with OpenAICaller(base_url=server.base_url, api_key="k") as caller:
            await caller.complete(REQUEST, Verdict)
    assert [(request.method, str(request.url)) for request in sent] == [("POST", url)]
    assert sent[0].headers["authorization"] == "Bearer k"
    assert sent[0].headers["content-type"] == "application/json"
    assert json.loads(sent[0].content) == server.requests[0]


ServerRoad = Callable[[FakeOpenAIServer], OpenAICaller]


def built_on(server: FakeOpenAIServer) -> OpenAICaller:
    return OpenAICaller(base_url=server.base_url, api_key="k")


def passed_on(server: FakeOpenAIServer) -> OpenAICaller:
    return OpenAICaller(openai.AsyncOpenAI(base_url=server.base_url, api_key="k"))


SERVER_ROADS = [pytest.param(built_on, id="built"), pytest.param(passed_on, id="passed")]


@pytest.mark.parametrize("road", SERVER_ROADS)
async def test_a_429_is_throttled_after_one_request_on_either_road(road: ServerRoad) -> None:
    """HTTP 429 is Throttled, with Retry-After, after exactly one request (the client's own retries are off)."""
    with FakeOpenAIServer([FakeReply.error(429, retry_after=7)]) as server:
        async with road(server) as caller:
            with pytest.raises(Throttled) as raised:
                await caller.complete(REQUEST, Verdict)
            await caller.client.close()
    assert raised.value.retry_after == 7
    assert len(server.requests) == 1


@pytest.mark.parametrize("road", SERVER_ROADS)
@pytest.mark.parametrize(("status", "transient"), [(500, True), (503, True), (400, False), (404, False)])
async def test_a_status_error_is_a_provider_error_on_either_road(
    road: ServerRoad, status: int, transient: bool
) -> None:
    """A 5xx is a transient ProviderError and a 4xx a lasting one, with the server's message, whatever the road."""
    with FakeOpenAIServer([FakeReply.error(status, message="the server says no")]) as server:
        async with road(server) as caller:
            with pytest.raises(ProviderError) as raised:
                await caller.complete(REQUEST, Verdict)
            await caller.client.close()
    assert (raised.value.status, raised.value.transient) == (status, transient)
    assert "the server says no" in str(raised.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("road", SERVER_ROADS)
async def test_a_server_that_is_gone_is_a_transient_provider_error_on_either_road(road: ServerRoad) -> None:
    """A refused connection is a transient ProviderError naming the server, whatever the road."""
    with FakeOpenAIServer() as server:
        caller = road(server)
    async with caller:
        with pytest.raises(ProviderError, match="could not reach the model server") as raised:
            await caller.complete(REQUEST, Verdict)
        await caller.client.close()
    assert raised.value.transient


async def test_a_closed_built_client_is_a_provider_error_and_sends_nothing() -> None:
    """A request through a caller whose client was closed fails as a connection error and reaches no server."""
    with FakeOpenAIServer() as server:
        caller = OpenAICaller(base_url=server.base_url, api_key="k")
        await caller.aclose()
        with pytest.raises(ProviderError, match="could not reach the model server"):
            await caller.complete(REQUEST, Verdict)
    assert server.requests == []


async def test_a_built_http_client_dropped_unclosed_closes_itself() -> None:
    """The HTTP client a caller builds closes itself once garbage (as the SDK's own does), so a caller left
    unclosed leaves no connection open."""
    with FakeOpenAIServer() as server:
        caller = OpenAICaller(base_url=server.base_url, api_key="k")
        await caller.complete(REQUEST, Verdict)
        http = caller._post._http  # type: ignore[attr-defined]  # the road's HTTP client, agentkit's own attribute
        assert isinstance(http, OwnedHttpClient)
        assert not http.is_closed
        http.__del__()  # what garbage collection calls
        for _ in range(100):
            if http.is_closed:
                break
            await asyncio.sleep(0)
        assert http.is_closed
