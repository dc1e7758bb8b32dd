"""What the streamed-step tests share, whichever caller streams: the script's steps, the answer type, the configs
and the run that collects its events."""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, StructuredCaller
from agentkit.events import Event, RationaleDelta, iter_tool_loop
from tests.support import NO_WAIT, Finder, search

STREAM = LoopConfig(retry=NO_WAIT, stream=True)
PLAIN = LoopConfig(retry=NO_WAIT)


class Summary(BaseModel):
    title: str
    points: list[str]


LOOK: dict[str, Any] = {
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


def assert_rationale_grew(events: list[Event], round: int, rationale: str) -> None:
    """The round's rationale arrived in several `RationaleDelta`s, each text the one before it and more, the
    last the whole rationale, their deltas adding up to it."""
    grown = [e for e in events if isinstance(e, RationaleDelta) and e.round == round]
    assert len(grown) > 3
    assert grown[-1].text == rationale
    assert all(later.text.startswith(earlier.text) for earlier, later in itertools.pairwise(grown))
    assert "".join(e.delta for e in grown) == rationale
