"""How OpenAICaller's requests reach the server: straight through a stock client's HTTP client, or its pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import openai
import pytest
from pydantic import BaseModel

from agentkit import StructuredRequest
from agentkit.errors import ProviderError, Throttled
from agentkit.providers._post import is_direct, post_for
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply

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
