"""What the streamed-step tests share, whichever caller streams: the script's steps, the answer type, the configs
and the run that collects its events."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, StructuredCaller
from agentkit.events import Event, iter_tool_loop
from tests.support import NO_WAIT, Finder, search

STREAM = LoopConfig(retry=NO_WAIT, stream=True)
PLAIN = LoopConfig(retry=NO_WAIT)


class Summary(BaseModel):
    title: str
    points: list[str]


LOOK = {
    "rationale": "Nothing is known yet; I search for tiers first.",
    "decision": {"done": False, "call": {"query": "tiers"}},
}
ANSWER: dict[str, Any] = {
    "title": "Tiers explained",
    "points": ["read only runs", "irreversible waits", "reversible runs"],
}
DONE = {"rationale": "The results cover it.", "decision": {"done": True, "answer": ANSWER}}


async def streamed_events(caller: StructuredCaller, config: LoopConfig = STREAM) -> tuple[list[Event], Any]:
    """The events of a run of the Finder over `search` with a `Summary` answer, and its result."""
    async with iter_tool_loop(caller, Finder(), search, "ctx", config, answer=Summary) as run:
        events = [event async for event in run]
    return events, run.result
