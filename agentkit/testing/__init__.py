"""Test doubles for agents: the scripted and function callers, the replay of a recorded run, and a fake
OpenAI-compatible HTTP server."""

from agentkit.testing._fake_server import FakeOpenAIServer, FakeReply
from agentkit.testing._function import Answer, AnswerFunction, FunctionCaller, RoundAnswerFunction
from agentkit.testing._replay import ReplayCaller, ReplayDiverged
from agentkit.testing._scripted import ScriptedCaller, ScriptedReply, ScriptExhausted, call_step, done_step

__all__ = [
    "Answer",
    "AnswerFunction",
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
    "done_step",
]
