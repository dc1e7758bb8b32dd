"""Test doubles for agents: the scripted caller and a fake OpenAI-compatible HTTP server."""

from agentkit.testing._fake_server import FakeOpenAIServer, FakeReply
from agentkit.testing._scripted import ScriptedCaller, ScriptedReply, ScriptExhausted, call_step, done_step

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "ScriptExhausted",
    "ScriptedCaller",
    "ScriptedReply",
    "call_step",
    "done_step",
]
