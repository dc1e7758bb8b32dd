"""Test doubles for agents: the scripted and function callers, the replay of a recorded run, and fake HTTP
servers that speak the OpenAI chat-completions API and Anthropic's Messages API."""

from agentkit.testing._fake_anthropic import FakeAnthropicServer
from agentkit.testing._fake_server import FakeOpenAIServer, FakeReply
from agentkit.testing._function import Answer, AnswerFunction, FunctionCaller, RoundAnswerFunction
from agentkit.testing._replay import ReplayCaller, ReplayDiverged
from agentkit.testing._scripted import (
    ScriptedCaller,
    ScriptedReply,
    ScriptExhausted,
    call_step,
    calls_step,
    done_step,
)

__all__ = [
    "Answer",
    "AnswerFunction",
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "FakeReply",
    "FunctionCaller",
    "ReplayCaller",
    "ReplayDiverged",
    "RoundAnswerFunction",
    "ScriptExhausted",
    "ScriptedCaller",
    "ScriptedReply",
    "call_step",
    "calls_step",
    "done_step",
]
