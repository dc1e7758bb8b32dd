"""The demo's datasets and agents, ready for `agentkit eval run`.

`QUESTIONS` holds 24 questions over the demo's corpus, each with the passage that answers it and
a pattern the answer must match; `researcher` is the demo's retrieval agent asked for a cited
answer. `PLANNING` holds tasks for the demo's curator (`curator`), whose delete is only ever
proposed: one case expects the delete of the archived Pluto entry, two expect no delete at all.

Run them on the embedded model (the `local` extra):

```text
agentkit eval run agentkit.evals.demo:QUESTIONS --agent agentkit.evals.demo:researcher --local --out base.json
```
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from pydantic import BaseModel

from agentkit._demo.agent import DEMO_CONFIG, Curator, GroundedAnswer, Researcher, delete_tool
from agentkit._demo.search import BM25Index, Hit, load_corpus, search_tool
from agentkit._runner import ToolLoop
from agentkit._structured import StructuredCaller
from agentkit.evals._dataset import Dataset
from agentkit.evals._run import Task

__all__ = ["PLANNING", "QUESTIONS", "GroundedAnswer", "curator", "researcher"]


def _load(name: str) -> Dataset[str]:
    source = resources.files("agentkit._demo").joinpath(name)
    return Dataset.from_data(json.loads(source.read_text(encoding="utf-8")), str, source=name)


QUESTIONS: Dataset[str] = _load("questions.json")
"""24 questions over the demo's corpus: each expects an APPLIED run that retrieved the answer's
passage, an answer matching a pattern, and citations of retrieved passages only."""

PLANNING: Dataset[str] = _load("planning.json")
"""Three tasks for the curator: delete the archived Pluto entry (a proposal, never run), and two
where nothing may be deleted."""


def researcher(caller: StructuredCaller, model: str) -> Task[str, Hit, GroundedAnswer]:
    """The demo's retrieval agent over its corpus, answering with a `GroundedAnswer`."""
    tool = search_tool(BM25Index(load_corpus()))
    loop = ToolLoop(
        caller, Researcher(model=model, tools=(tool,), answers=True), tool, DEMO_CONFIG, answer=GroundedAnswer
    )
    return loop.run


def curator(caller: StructuredCaller, model: str) -> Task[str, Any, Any]:
    """The demo's planning agent: each run searches a fresh copy of the corpus and may propose a delete."""

    async def run(task: str) -> Any:
        index = BM25Index(load_corpus())
        tools: tuple[Any, ...] = (search_tool(index), delete_tool(index))
        loop: ToolLoop[str, BaseModel, Any, None] = ToolLoop(
            caller, Curator(model=model, tools=tools), list(tools), DEMO_CONFIG
        )
        return await loop.run(task)

    return run
