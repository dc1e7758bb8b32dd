"""assert_type checks for agentkit.providers.openai and agentkit.testing's fake server (mypy only)."""

from __future__ import annotations

from typing import Any, assert_type

import openai
from pydantic import BaseModel

from agentkit import Completion, StructuredCaller, StructuredRequest
from agentkit._text import TextCaller, TextCompletion
from agentkit.providers.openai import DEFAULT_MAX_IN_FLIGHT, MAX_TOKENS_PER_REPLY, OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply


class Verdict(BaseModel):
    score: int


async def structured_and_text(request: StructuredRequest) -> None:
    caller = OpenAICaller(base_url="http://localhost:8000/v1", mode=StructuredMode.TOOLS, timeout=30, max_reasks=2)
    assert_type(caller, OpenAICaller)
    assert_type(caller.client, openai.AsyncOpenAI)
    assert_type(caller.mode, StructuredMode)
    assert_type(caller.strict, bool)
    assert_type(OpenAICaller(base_url="https://api.openai.com/v1", api_key="k", strict=True).strict, bool)
    assert_type(OpenAICaller(base_url="http://localhost:8000/v1", max_in_flight=None), OpenAICaller)
    assert_type(OpenAICaller(base_url="http://localhost:8000/v1", max_in_flight=DEFAULT_MAX_IN_FLIGHT), OpenAICaller)
    assert_type(MAX_TOKENS_PER_REPLY, int)
    assert_type(await caller.complete(request, Verdict), Completion[Verdict])
    assert_type((await caller.complete(request, Verdict)).value, Verdict)
    assert_type(await caller.complete_text(request), TextCompletion)
    _structured: StructuredCaller = caller
    _text: TextCaller = caller
    async with OpenAICaller(openai.AsyncOpenAI(api_key="k")) as scoped:
        assert_type(scoped, OpenAICaller)
    await caller.aclose()


def fake_server() -> None:
    with FakeOpenAIServer(["text", {"score": 1}, Verdict(score=2), FakeReply.error(429, retry_after=1)]) as server:
        assert_type(server, FakeOpenAIServer)
        assert_type(server.base_url, str)
        assert_type(server.requests, list[dict[str, Any]])
        assert_type(server.responses, list[dict[str, Any] | None])
        assert_type(server.remaining, int)
        assert_type(server.max_concurrent, int)
        server.add(
            FakeReply.tool_call({"score": 3}), FakeReply.truncated(), FakeReply.no_choices(), FakeReply.malformed()
        )
        server.add(FakeReply.auto(delay=0.5), FakeReply.value(Verdict(score=4)), FakeReply.text("x", prompt_tokens=3))
        server.add(FakeReply.auto(drip=0.2), FakeReply.value(Verdict(score=5), drip=0.01, prompt_tokens=-1))
        server.assert_complete()
    assert_type(FakeReply.error(500), FakeReply)
    assert_type(FakeReply.tool_calls({"score": 1}, Verdict(score=2), '{"score": 3}', name="answer"), FakeReply)


def fake_reply_options() -> None:
    # Each factory takes exactly ReplyOptions beside its own arguments; warn_unused_ignores fails if one is accepted.
    assert_type(FakeReply.error(503, retry_after="2", delay=0.1, prompt_tokens=None, completion_tokens=0), FakeReply)
    FakeReply.auto(dealy=5)  # type: ignore[call-arg]  # misspelt option is refused
    FakeReply.text("x", prompt_token=3)  # type: ignore[call-arg]  # misspelt option is refused
    FakeReply.tool_calls({"score": 1}, {"score": 2}, nmae="answer")  # type: ignore[call-arg]  # misspelt option is refused
    FakeReply.no_choices(status=500)  # type: ignore[call-arg]  # status belongs to FakeReply.error only
    FakeReply.value({"score": 1}, delay="5")  # type: ignore[arg-type]  # delay is seconds, a number
    FakeReply.auto(drip="0.2")  # type: ignore[arg-type]  # drip is seconds, a number
