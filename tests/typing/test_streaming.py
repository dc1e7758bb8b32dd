"""assert_type checks for streamed steps: the switches, the delta events and the partial answer (mypy only)."""

from __future__ import annotations

from typing import Literal, assert_type

from pydantic import JsonValue

from agentkit import LoopConfig, Observer, events, run_once_text
from agentkit.providers.anthropic import AnthropicCaller
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeAnthropicServer, FakeOpenAIServer, FakeReply
from tests.typing.models import Finder, Triager, search

Delta = events.RationaleDelta | events.AnswerDelta | events.TextDelta | events.PartialDiscarded


class Watch(Observer):
    def on_delta(self, event: Delta) -> None:
        assert_type(event.round, int)
        assert_type(event.attempt, int)


async def streamed() -> None:
    config = LoopConfig(stream=True)
    assert_type(config.stream, bool)
    caller = OpenAICaller(base_url="http://127.0.0.1:8000/v1", stream=True)
    assert_type(caller.stream, bool)
    async with events.iter_tool_loop(caller, Finder(), search, "ctx", config) as run:
        async for event in run:
            if isinstance(event, events.RationaleDelta):
                assert_type(event.kind, Literal["rationale_delta"])
                assert_type(event.text, str)
                assert_type(event.delta, str)
            elif isinstance(event, events.AnswerDelta):
                assert_type(event.kind, Literal["answer_delta"])
                assert_type(event.partial, JsonValue)
            elif isinstance(event, events.TextDelta):
                assert_type(event.text, str)
            elif isinstance(event, events.PartialDiscarded):
                assert_type(event.reason, str)


async def text() -> None:
    caller = OpenAICaller(base_url="http://127.0.0.1:8000/v1")
    result = await run_once_text(caller, Triager(), "thread", stream=True)
    assert_type(result.text, str | None)


async def anthropic_streamed() -> None:
    caller = AnthropicCaller(base_url="http://127.0.0.1:8080", stream=True)
    assert_type(caller.stream, bool)
    async with events.iter_tool_loop(caller, Finder(), search, "ctx", LoopConfig(stream=True)) as run:
        async for event in run:
            if isinstance(event, events.RationaleDelta):
                assert_type(event.delta, str)
    prose = await run_once_text(caller, Triager(), "thread", stream=True)
    assert_type(prose.text, str | None)
    with FakeAnthropicServer([FakeReply.error(529, mid_stream=True), FakeReply.value({"a": 1}, chunk_chars=4)]):
        pass


def fake() -> None:
    reply = FakeReply.value({"a": 1}, pace=0.01, chunk_chars=4)
    assert_type(reply.pace, float)
    assert_type(reply.chunk_chars, int | None)
    with FakeOpenAIServer([reply]) as server:
        assert_type(server.handling, int)
