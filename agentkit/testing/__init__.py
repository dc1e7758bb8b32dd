"""Test doubles for agents: the scripted caller (and, with the OpenAI seam, a fake server)."""

from agentkit.testing._scripted import ScriptedCaller, ScriptedReply, ScriptExhausted, call_step, done_step

__all__ = ["ScriptExhausted", "ScriptedCaller", "ScriptedReply", "call_step", "done_step"]
