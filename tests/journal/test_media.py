"""A tool's image items on the journal: kept in the run's state, so a resumed run shows the model the same image
(on both backends); the prompt's own images are recorded by digest only."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from agentkit import LoopConfig, Prompt, RetryPolicy, RoleSpec, StopReason, Tier, Tool, ToolRoundInfo, tool
from agentkit import run_tool_loop_tiered as run_tiered
from agentkit.journal import Journal, JournalObserver
from agentkit.prompting import ImagePart, reflective_prompt
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, ScriptedCaller, call_step, done_step
from tests.media_support import JPEG, PNG
from tests.support import Query, Target

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


@tool(tier=Tier.READ_ONLY)
def snap(args: Query) -> list[str | ImagePart]:
    """Photograph the shelf."""
    return [f"shelf {args.query}", ImagePart(data=PNG, media_type="image/png")]


@tool(tier=Tier.IRREVERSIBLE)
def order(args: Target) -> list[str]:
    """Order a restock."""
    return [f"ordered {args.path}"]


TOOLS: list[Tool[Any, str | ImagePart]] = [snap, order]
PHOTO = ImagePart(data=JPEG, media_type="image/jpeg")


class Stocker:
    """The standard prompt, after the request's own photo."""

    def __init__(self) -> None:
        self.infos: list[ToolRoundInfo[str | ImagePart]] = []

    def role(self) -> RoleSpec:
        return RoleSpec(model="vision")

    def render(self, ctx: str, info: ToolRoundInfo[str | ImagePart]) -> Prompt:
        self.infos.append(info)
        prompt = reflective_prompt("Keep the shelf stocked.", ctx, info)
        rest = prompt.parts or (prompt.dynamic,)
        return Prompt(system=prompt.system, parts=("The request's photo:", PHOTO, "\n", *rest))


def url_of(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


async def test_a_resumed_run_shows_the_model_the_tools_image_from_the_journal(journal: Journal) -> None:
    """A run photographs, proposes an order and waits; resumed after approval, its next round sends the tool's
    image again (read back from the journal, the tool not run again), and the prompt's photo by digest only."""
    first = ScriptedCaller([call_step(Query(query="a"), tool="snap"), call_step(Target(path="milk"), tool="order")])
    with JournalObserver(journal) as observer:
        result = await run_tiered(first, Stocker(), TOOLS, "restock", FAST, observer=observer)
    assert result.stop_reason is StopReason.PROPOSED
    state = await journal.state(result.run_id)
    photo = f"image:image/jpeg:{hashlib.sha256(JPEG).hexdigest()}"
    shelf = f"image:image/png:{hashlib.sha256(PNG).hexdigest()}"
    assert [e.media for e in state.entries if e.kind == "round"] == [(photo,), (photo, shelf)]
    kept = state.model_dump_json()
    assert base64.b64encode(JPEG).decode() not in kept  # the prompt's photo: by digest
    assert base64.b64encode(PNG).decode() in kept  # the tool's image: in its batch, for the resume to show
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    stocker = Stocker()
    async with FakeOpenAIServer([done_step("ordered")]) as server, OpenAICaller(base_url=server.base_url) as caller:
        resumed = await journal.resume(result.run_id, caller, stocker, TOOLS, "restock")
    server.assert_complete()
    assert (resumed.stop_reason, resumed.rounds) == (StopReason.EXECUTOR_DONE, 3)
    assert stocker.infos[0].prior_calls[0].batch == ("shelf a", ImagePart(data=PNG, media_type="image/png"))
    [request] = server.requests
    content = next(m["content"] for m in request["messages"] if m["role"] == "user")
    urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
    assert urls == [url_of(JPEG, "image/jpeg"), url_of(PNG, "image/png")]
