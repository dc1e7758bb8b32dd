"""Streaming on Temporal: no delta crosses into a workflow, so a durable agent refuses `LoopConfig.stream`; its
caller may still stream on the wire inside the model activity, which returns the complete step."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from agentkit import LoopConfig, StructuredCaller, StructuredRequest, Tier, UsageError, tool
from agentkit.providers.anthropic import AnthropicCaller
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import DurableAgent
from agentkit.temporal._activities import REQUEST, Activities
from agentkit.temporal._values import ModelCall, ModelReply
from agentkit.testing import FakeAnthropicServer, FakeOpenAIServer, FakeReply
from tests.temporal.agents import Brief, Doc, Researcher, Search


@tool(tier=Tier.READ_ONLY)
def search(args: Search) -> list[Doc]:
    """Search the corpus."""
    return [Doc(id=f"doc:{args.query}")]


STEP = {"rationale": "look it up", "decision": {"done": False, "call": {"query": "tiers"}}}


async def model_activity(caller: StructuredCaller) -> ModelReply:
    """The model activity's reply to one step request, for a durable agent over `caller`."""
    agent = DurableAgent(name="lookup", agent=Researcher(), tools=search, caller=caller, ctx_type=Brief)
    request = StructuredRequest(system="research", dynamic="tiers", model="m")
    call = ModelCall(
        agent="lookup", schema_name=agent.box.step_model.__name__, request=REQUEST.dump_python(request, mode="json")
    )
    return await ActivityEnvironment().run(Activities({"lookup": agent}).model_call, call)


def test_a_durable_agent_refuses_a_streamed_config() -> None:
    """`LoopConfig(stream=True)` on a durable agent is refused when it is built, naming why and what streams."""
    with pytest.raises(UsageError, match=r"no delta can cross into it.*OpenAICaller\(stream=True\)"):
        DurableAgent(
            name="x",
            agent=Researcher(),
            tools=search,
            caller=OpenAICaller(base_url="http://127.0.0.1:9/v1"),
            ctx_type=Brief,
            config=LoopConfig(stream=True),
        )


async def test_the_model_activity_streams_with_a_caller_set_to_stream(server: FakeOpenAIServer) -> None:
    """A durable agent's `OpenAICaller(stream=True)` streams inside the model activity; the reply is the whole step."""
    server.add(FakeReply.value(STEP, chunk_chars=4, prompt_tokens=30, completion_tokens=9))
    async with OpenAICaller(base_url=server.base_url, stream=True) as caller:
        reply = await model_activity(caller)
    assert server.requests[0]["stream"] is True
    assert reply.value == {"rationale": "look it up", "done": False, "call": {"query": "tiers"}}
    assert (reply.requests, reply.input_tokens, reply.output_tokens) == (1, 30, 9)


async def test_the_model_activity_streams_with_an_anthropic_caller_set_to_stream() -> None:
    """A durable agent's `AnthropicCaller(stream=True)` streams inside the model activity; the reply is the whole
    step, with the usage (the cache's counts included) a body would have reported."""
    with FakeAnthropicServer([FakeReply.value(STEP, chunk_chars=4, prompt_tokens=30, completion_tokens=9)]) as server:
        async with AnthropicCaller(base_url=server.base_url, stream=True) as caller:
            reply = await model_activity(caller)
        answered = server.responses[0]
    assert server.requests[0]["stream"] is True
    assert reply.value == {"rationale": "look it up", "done": False, "call": {"query": "tiers"}}
    assert answered is not None
    usage = answered["usage"]
    given = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    assert (reply.requests, reply.input_tokens, reply.output_tokens) == (1, given, 9)
