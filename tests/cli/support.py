"""What the command line's tests share: running the command in process, a journaled run to show, and the eval
datasets and replies of the fake model server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import AfterProposal, LoopConfig, Tier, run_tool_loop_tiered, tool
from agentkit._cli import main
from agentkit._demo.search import load_corpus
from agentkit._results import Usage
from agentkit.journal import JournalObserver, ProposalRecord, open_journal
from agentkit.testing import FakeReply, ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import Executor, Query, Target


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `agentkit ARGV` in this process: its exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    return [args.query] * 3


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path."""
    return [f"deleted {args.path}"]


class Planner(Executor[str]):
    def __init__(self) -> None:
        super().__init__("cli-model", system="plan")


def record_run(url: str, *paths: str) -> str:
    """One journaled run: a search, then one proposed deletion per path; returns the run id."""
    used = Usage(requests=1, input_tokens=100, output_tokens=20)
    steps = [
        ScriptedReply(value=call_step(Query(query="stale"), tool="search"), usage=used),
        *(ScriptedReply(value=call_step(Target(path=p), tool="delete", rationale=f"{p} is stale")) for p in paths),
        ScriptedReply(value=done_step("done")),
    ]
    journal = open_journal(url)
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE, max_rounds=None, token_budget=10_000)
    with JournalObserver(journal) as observer:
        result = asyncio.run(
            run_tool_loop_tiered(ScriptedCaller(steps), Planner(), [search, delete], None, config, observer=observer)
        )
    asyncio.run(journal.close())
    return result.run_id


def inbox(url: str) -> list[ProposalRecord]:
    async def read() -> list[ProposalRecord]:
        journal = open_journal(url, create=False)
        try:
            return await journal.proposals()
        finally:
            await journal.close()

    return asyncio.run(read())


CORPUS = {p.id: p for p in load_corpus()}


def dataset_file(tmp_path: Path, name: str = "two-questions") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "name": name,
                "cases": [
                    {
                        "name": "voyager",
                        "ctx": "When was the Voyager 1 space probe launched?",
                        "expect": {
                            "outcome": "applied",
                            "retrieved": ["space-01"],
                            "answer_matches": {"answer": "1977"},
                        },
                    },
                    {
                        "name": "mercury",
                        "ctx": "Which metal is liquid at room temperature?",
                        "expect": {"retrieved": ["chem-01"], "cites_only_retrieved": ["passage_id"]},
                    },
                ],
            }
        )
    )
    return path


def _search(query: str) -> FakeReply:
    return FakeReply.value({"rationale": "search", "decision": {"done": False, "call": {"query": query}}})


def _answer(passage: str, text: str | None = None) -> FakeReply:
    answer = {"passage_id": passage, "answer": text or CORPUS[passage].text}
    return FakeReply.value({"rationale": "found", "decision": {"done": True, "answer": answer}})


def replies(*, voyager_says: str | None = None) -> list[Any]:
    return [
        _search("Voyager 1 launched"),
        _answer("space-01", voyager_says),
        _search("metal liquid room temperature"),
        _answer("chem-01"),
    ]
