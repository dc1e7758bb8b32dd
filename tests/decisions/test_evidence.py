"""The evidence behind a proposal: the run's task, and the rounds and calls the executor had seen, by reference,
kept and shown."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from agentkit import LoopConfig, ProposedAction, RetryPolicy, StopReason, Tier, run_tool_loop_tiered
from agentkit._cli import main
from agentkit._proposals import TASK_LIMIT, call_digest, task_text
from agentkit.decisions import CallSeen, Evidence
from agentkit.journal import JournalObserver, open_journal
from agentkit.provenance import CallProvenance, ProvenancePolicy, Trust
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, PathArgs, Query, Recording

NO_WAIT = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


def steps() -> list[dict[str, Any]]:
    return [
        call_step(Query(query="old reports"), tool="search"),
        call_step(Query(query="older"), tool="search"),
        call_step(PathArgs(path="/r/2019"), tool="delete", rationale="search:2 says it is stale"),
        done_step(),
    ]


async def test_a_proposal_records_the_rounds_and_calls_before_it_by_reference() -> None:
    """The proposal's evidence names the earlier rounds and each call by digest, with its items' ids."""
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    result = await run_tool_loop_tiered(ScriptedCaller(steps()), Executor[Doc](), [search, delete], "ctx", NO_WAIT)
    assert result.stop_reason is StopReason.PROPOSED
    [proposal] = result.proposed
    assert proposal.rationale == "search:2 says it is stale"
    assert proposal.evidence == Evidence(
        task="ctx",
        rounds=(1, 2),
        calls=(
            CallSeen(round=1, tool_name="search", digest=call_digest("search", Query(query="old reports")), ran=True,
                     item_ids=("search:1",)),
            CallSeen(round=2, tool_name="search", digest=call_digest("search", Query(query="older")), ran=True,
                     item_ids=("search:2",)),
        ),
        provenance=CallProvenance(),  # the run's policy read no untrusted content before it
    )  # fmt: skip
    assert ProposedAction[PathArgs].model_validate_json(proposal.model_dump_json()) == proposal


async def test_the_journal_keeps_the_evidence_and_proposals_show_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inbox entry holds the evidence; `agentkit proposals show` prints the rounds, calls and item ids."""
    url = str(tmp_path / "journal.db")
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    journal = open_journal(url)
    try:
        with JournalObserver(journal) as observer:
            result = await run_tool_loop_tiered(
                ScriptedCaller(steps()), Executor[Doc](), [search, delete], "ctx", NO_WAIT, observer=observer
            )
        [entry] = await journal.pending()
        assert entry.evidence == result.proposed[0].evidence
    finally:
        await journal.close()
    assert await asyncio.to_thread(main, ["proposals", "show", entry.id, "--db", url]) == 0
    shown = capsys.readouterr().out
    assert "rationale: search:2 says it is stale" in shown
    assert "evidence:  rounds before it: 1, 2; 2 earlier calls" in shown
    assert "  round 2: search (ran, items search:2) digest " in shown


async def test_a_proposal_without_evidence_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A proposal recorded without evidence (by hand, or by an earlier agentkit) shows it was not recorded."""
    url = str(tmp_path / "journal.db")
    journal = open_journal(url)
    try:
        entry = await journal.propose(
            ProposedAction.create(tool_name="delete", tier=Tier.IRREVERSIBLE, args=PathArgs(path="/x"), round=1)
        )
        assert entry.evidence is None
    finally:
        await journal.close()
    assert await asyncio.to_thread(main, ["proposals", "show", entry.id, "--db", url]) == 0
    assert "evidence:  - (not recorded)" in capsys.readouterr().out


class Brief(BaseModel):
    topic: str
    key: SecretStr


class Holder(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    client: object


async def test_a_proposal_keeps_the_runs_task_a_text_or_a_pydantic_ctx() -> None:
    """The evidence keeps a text ctx as it is and a pydantic ctx as its JSON (secrets masked), so a reviewer sees
    what the run was asked."""
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    brief = Brief(topic="stale reports", key=SecretStr("sk-123"))
    for ctx, task in (("clear the stale reports", "clear the stale reports"), (brief, brief.model_dump_json())):
        result = await run_tool_loop_tiered(ScriptedCaller(steps()), Executor[Doc](), [search, delete], ctx, NO_WAIT)
        [proposal] = result.proposed
        assert proposal.evidence is not None
        assert proposal.evidence.task == task
    assert "sk-123" not in brief.model_dump_json()


def test_a_ctx_that_is_not_plain_data_is_not_kept_and_a_long_task_is_cut() -> None:
    """A ctx of another type (a dataclass or mapping may hold a tool's credentials), or a model JSON cannot carry,
    is not kept; a task over TASK_LIMIT characters is cut, ending in an ellipsis; a lone surrogate becomes U+FFFD,
    so the stored proposal can be written."""
    assert task_text({"api_key": "sk-123"}) is None
    assert task_text(object()) is None
    assert task_text(Holder(client=object())) is None
    long = task_text("x" * (TASK_LIMIT + 10))
    assert long is not None
    assert (len(long), long[-1]) == (TASK_LIMIT, "\u2026")
    assert task_text("x" * TASK_LIMIT) == "x" * TASK_LIMIT
    assert task_text("a\udc80b") == "a\ufffdb"
    Evidence(task=task_text("a\udc80b")).model_dump_json()


async def test_proposals_show_warns_of_values_that_first_appeared_in_untrusted_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentkit proposals show` names the untrusted results read before the call and warns, field by field, of
    the values that first appeared in them rather than in the task."""
    url = str(tmp_path / "journal.db")
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    search.trust = Trust.UNTRUSTED  # type: ignore[attr-defined]  # a declaration set on a hand-made tool
    script = [call_step(Query(query="q"), tool="search"), call_step(PathArgs(path="search:1"), tool="delete")]
    journal = open_journal(url)
    try:
        with JournalObserver(journal) as observer:
            await run_tool_loop_tiered(
                ScriptedCaller(script), Executor[Doc](), [search, delete], "tidy up", NO_WAIT, observer=observer
            )
        [entry] = await journal.pending()
    finally:
        await journal.close()
    assert await asyncio.to_thread(main, ["proposals", "show", entry.id, "--db", url]) == 0
    shown = capsys.readouterr().out
    assert "untrusted: read before it: round 1 search" in shown
    assert "WARNING path = 'search:1' first appeared in untrusted content (round 1 search), not in the task" in shown


async def test_proposals_show_says_a_steered_value_came_from_a_read_made_after_untrusted_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under `ProvenancePolicy(steered=True)`, a value first read in a trusted result after the untrusted one is
    shown as such: from which read, and that the untrusted content may have chosen it."""
    url = str(tmp_path / "journal.db")
    search, lookup = Recording("search", Tier.READ_ONLY), Recording("lookup", Tier.READ_ONLY)
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    search.trust = Trust.UNTRUSTED  # type: ignore[attr-defined]  # a declaration set on a hand-made tool
    script = [
        call_step(Query(query="q"), tool="search"),
        call_step(Query(query="q"), tool="lookup"),
        call_step(PathArgs(path="lookup:1"), tool="delete"),
    ]
    config = dataclasses.replace(NO_WAIT, provenance=ProvenancePolicy(steered=True))
    journal = open_journal(url)
    try:
        with JournalObserver(journal) as observer:
            await run_tool_loop_tiered(
                ScriptedCaller(script), Executor[Doc](), [search, lookup, delete], "tidy up", config, observer=observer
            )
        [entry] = await journal.pending()
    finally:
        await journal.close()
    assert await asyncio.to_thread(main, ["proposals", "show", entry.id, "--db", url]) == 0
    shown = capsys.readouterr().out
    assert (
        "WARNING path = 'lookup:1' first appeared in a trusted result read after untrusted content "
        "(round 2 lookup): that content may have chosen it"
    ) in shown
