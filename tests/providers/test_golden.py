"""The request bodies OpenAICaller sends, pinned as golden files: a change of the wire shows up here.

Each file in tests/providers/golden holds the bodies one scenario sends (a structured call that is
re-asked once, a loop round, a call without a system prompt, a plain-text call) in one structured mode,
as the server received them, with their size in bytes. A body must equal its golden one and be no
larger. To record them again after a deliberate change of the wire: AGENTKIT_GOLDEN_WRITE=1 pytest
tests/providers/test_golden.py, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Prompt, RetryPolicy, RoleSpec, StructuredRequest, ToolRoundInfo, run_tool_loop
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step
from tests.support import Query, corpus_search

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("AGENTKIT_GOLDEN_WRITE") == "1"
FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


class Verdict(BaseModel):
    score: int


class Rated(BaseModel):
    """A score for the text, from 0 to 10."""

    score: int
    note: str = ""


class Searcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="primary-model", temperature=0.2, max_tokens=300, seed=7)

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", dynamic=f"round {info.round}: {ctx}")


SCENARIOS = [
    (mode, strict)
    for mode in StructuredMode
    for strict in ((False, True) if mode in (StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS) else (False,))
]


class PartsSearcher(Searcher):
    """`Searcher`, its dynamic part given as a tuple of text parts."""

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", parts=(f"round {info.round}: ", ctx))


async def _bodies(mode: StructuredMode, strict: bool, *, parts: bool = False) -> list[tuple[dict[str, Any], int]]:
    async with FakeOpenAIServer() as server:
        async with OpenAICaller(base_url=server.base_url, mode=mode, strict=strict) as caller:
            server.add(FakeReply.value({"score": "high"}), FakeReply.value({"score": 7}))
            text = {"dynamic": "", "parts": ("the ", "text")} if parts else {"dynamic": "the text"}
            await caller.complete(StructuredRequest(system="Rate it.", model="m", max_tokens=50, **text), Rated)
            await caller.complete(StructuredRequest(system="", dynamic="just this", model="m"), Verdict)
            server.add(call_step(Query(query="otters")), done_step("enough"))
            searcher = PartsSearcher() if parts else Searcher()
            await run_tool_loop(caller, searcher, corpus_search, "find otters", FAST)
            hello = {"dynamic": "", "parts": ("hel", "lo")} if parts else {"dynamic": "hello"}
            await caller.complete_text(StructuredRequest(system="Be brief.", model="m", **hello))
        server.assert_complete()
        return list(zip(server.requests, server.request_bytes, strict=True))


@pytest.mark.parametrize(("mode", "strict"), SCENARIOS)
async def test_request_bodies_match_the_golden_files(mode: StructuredMode, strict: bool) -> None:
    """Every body sent in each mode equals its golden body and is no larger than it was."""
    path = GOLDEN / f"{mode.value}{'-strict' if strict else ''}.json"
    bodies = await _bodies(mode, strict)
    if WRITE:
        path.write_text(
            json.dumps([{"bytes": size, "body": body} for body, size in bodies], indent=1, ensure_ascii=False) + "\n"
        )
    golden = json.loads(path.read_text())
    assert len(bodies) == len(golden)
    for (body, size), want in zip(bodies, golden, strict=True):
        assert body == want["body"]
        assert size <= want["bytes"]


@pytest.mark.parametrize(("mode", "strict"), SCENARIOS)
async def test_a_prompt_of_text_parts_sends_the_golden_bodies(mode: StructuredMode, strict: bool) -> None:
    """A dynamic part given as a tuple of text (no image or document) sends exactly the golden bytes."""
    path = GOLDEN / f"{mode.value}{'-strict' if strict else ''}.json"
    golden = json.loads(path.read_text())
    bodies = await _bodies(mode, strict, parts=True)
    assert [body for body, _ in bodies] == [want["body"] for want in golden]
    assert [size for _, size in bodies] == [want["bytes"] for want in golden]
