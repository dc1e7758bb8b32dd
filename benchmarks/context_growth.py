"""Request size over 20 rounds, without a context window and under each kind of ``ContextWindow``.

A 20-round run of a retrieval executor (``reflective_prompt``, the items rendered as JSON) over a
search tool that returns 5 passages of about 230 characters per call, against
``agentkit.testing.FakeOpenAIServer`` through ``OpenAICaller`` (real loopback HTTP, the official
``openai`` client). Each request body is counted in bytes as the server receives it
(``FakeOpenAIServer.request_bytes``), so the figure is what the model is sent, the step schema and
the system prompt included. The
summarizer here is a deterministic function (a model call in real use, e.g. ``run_once_text``),
so its own requests are not counted.

    python -m benchmarks.context_growth [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentkit import ContextWindow, LoopConfig, PriorCall, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop, tool
from agentkit.prompting import reflective_prompt
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, call_step

ROUNDS = 20
PER_CALL = 5


class Query(BaseModel):
    text: str


class Passage(BaseModel):
    id: str
    title: str
    text: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Passage]:
    """Search the corpus by keywords; five passages per call."""
    return [
        Passage(
            id=f"{args.text}-{n}",
            title=f"On {args.text}, part {n}",
            text=f"Passage {n} about {args.text}. " + "It states a fact that may or may not answer the question. " * 3,
        )
        for n in range(PER_CALL)
    ]


class Researcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="bench-model")

    def render(self, ctx: str, info: ToolRoundInfo[Passage]) -> Prompt:
        return reflective_prompt("You find passages that answer a question.", ctx, info, tools=[search])


def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
    """A short line per left-out call (a model would write a real summary)."""
    lines = [f"- {c.args.model_dump_json()}: {len(c.batch)} passages, none decisive" for c in calls]
    return "\n".join([*(summary.splitlines() if summary else []), *lines])


POLICIES: dict[str, ContextWindow | None] = {
    "none (before)": None,
    "last=3": ContextWindow(last=3),
    "max_chars=6000": ContextWindow(max_chars=6000),
    "max_tokens=1500 (≈6000 chars)": ContextWindow(max_tokens=1500),
    "last=3 + summarize": ContextWindow(last=3, summarize=summarize),
}


@dataclass(frozen=True)
class Row:
    policy: str
    sizes: list[int]

    def cells(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "round 1": self.sizes[0],
            "round 5": self.sizes[4],
            "round 10": self.sizes[9],
            "round 20": self.sizes[-1],
            "growth 1→20": self.sizes[-1] - self.sizes[0],
            "total": sum(self.sizes),
        }


async def measure(name: str, window: ContextWindow | None, rounds: int) -> Row:
    steps = [call_step(Query(text=f"topic{n:02d}")) for n in range(1, rounds + 1)]
    with FakeOpenAIServer(steps) as server:
        async with OpenAICaller(base_url=server.base_url) as caller:
            config = LoopConfig(max_rounds=rounds, context=window)
            result = await run_tool_loop(caller, Researcher(), search, "Which passage answers it?", config)
        server.assert_complete()
        sizes = list(server.request_bytes)
    assert result.rounds == rounds, result
    assert len(result.items) == rounds * PER_CALL  # only the executor's view is bounded
    assert len(sizes) == rounds
    return Row(name, sizes)


async def main(rounds: int) -> list[Row]:
    return [await measure(name, window, rounds) for name, window in POLICIES.items()]


def table(rows: list[Row]) -> str:
    cells = [row.cells() for row in rows]
    head = list(cells[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in cells:
        lines.append("| " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in cell.values()) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", action="store_true", help="print every round's size as JSON lines")
    options = parser.parse_args()
    measured = asyncio.run(main(options.rounds))
    if options.json:
        for row in measured:
            print(json.dumps({"policy": row.policy, "bytes_per_round": row.sizes}))
    print(table(measured))
