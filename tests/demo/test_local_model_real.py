"""The demo's retrieval agent on the real embedded model (Qwen2.5-Coder-0.5B, temperature 0, fixed seed).

Needs the ``local`` extra and ``AGENTKIT_REAL_MODEL=1`` (CI sets both); skipped otherwise, so a
plain local ``pytest`` stays fast. Run it alone with::

    AGENTKIT_REAL_MODEL=1 pytest -m local_model
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit._demo.agent import PLANNING_TASK, QUESTIONS, Curator, GroundedAnswer, delete_tool, plan, research
from agentkit._demo.check import AnswerVerifier
from agentkit._demo.search import BM25Index, load_corpus, search_tool
from agentkit._outcome import Outcome, StopReason
from agentkit._tools import FunctionTool
from agentkit.journal import JournalObserver, ProposalState, open_journal
from agentkit.providers.local import LocalModel

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.slow,
    # Opting in with AGENTKIT_REAL_MODEL=1 (as CI does) makes a missing 'local' extra a failure
    # (LocalModel says which command installs it), never a silent skip.
    pytest.mark.skipif(
        os.environ.get("AGENTKIT_REAL_MODEL") != "1",
        reason="the real model runs only with AGENTKIT_REAL_MODEL=1 (and the 'local' extra installed)",
    ),
]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalModel]:
    with LocalModel() as model:
        yield model


def test_embedded_server_speaks_the_openai_api_on_loopback(local: LocalModel) -> None:
    """The server answers its health check and lists the model under the name agents ask for."""
    assert local.base_url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(local.base_url.removesuffix("/v1") + "/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok"}
    with urllib.request.urlopen(local.base_url + "/models", timeout=10) as response:
        listed = json.loads(response.read())
    assert local.model_name in {entry["id"] for entry in listed["data"]}


@pytest.mark.parametrize(
    ("question", "passage_id"),
    [
        ("When was the Voyager 1 space probe launched?", "space-01"),
        ("Which metal is liquid at room temperature?", "chem-01"),
        ("Who wrote the first published computer program, and for which machine?", "comp-01"),
    ],
)
async def test_real_model_searches_then_stops_with_the_answer_passage(
    local: LocalModel, question: str, passage_id: str
) -> None:
    """The model searches before it stops (it does not answer from memory), the run ends APPLIED,
    and the passage holding the answer is among the items."""
    caller = local.caller()
    try:
        result = await research(caller, local.model_name, BM25Index(load_corpus()), question)
    finally:
        await caller.aclose()
    searches = [r for r in result.trace if r.tool_name == "search_corpus" and r.executed]
    assert result.outcome is Outcome.APPLIED, result.trace
    assert searches, result.trace
    assert passage_id in {hit.id for hit in result.items}


async def test_real_model_judges_an_answer_against_the_passage_it_cites(local: LocalModel) -> None:
    """The demo's check on the real model, two judge calls: the Voyager question answered with the words of the
    Hubble passage the search also returned (what the 0.5B model once answered) is not supported, the judge
    finding the answer in the Voyager passage; answered with the Voyager passage's words, it is supported,
    with that passage shown last (so a judge that picks the first passage shown would fail one of the two)."""
    index = BM25Index(load_corpus())
    hits = index.search("voyager 1 space probe launched")
    assert [hit.id for hit in hits] == ["space-01", "space-02", "space-07"]
    first = {hit.id: hit.passage.text.split(". ")[0] for hit in hits}
    caller = local.caller()
    try:
        wrong = await AnswerVerifier(caller, local.model_name, QUESTIONS[0], hits).review(
            GroundedAnswer(passage_id="space-07", answer=first["space-07"])
        )
        right = await AnswerVerifier(caller, local.model_name, QUESTIONS[0], hits[::-1]).review(
            GroundedAnswer(passage_id="space-01", answer=first["space-01"])
        )
    finally:
        await caller.aclose()
    assert (wrong.usage.requests, right.usage.requests) == (1, 1)  # the rules passed both; the judge decided
    assert not wrong.approved
    assert wrong.feedback == "the judge finds the answer in [space-01] Voyager 1, not in the cited [space-07]"
    assert right.approved, right.feedback


async def test_real_model_searches_then_proposes_deleting_the_archived_passage(local: LocalModel) -> None:
    """The curator searches (run live), then asks to delete the archived Pluto entry, which comes
    back as a proposal for that passage and is never run."""
    caller = local.caller()
    index = BM25Index(load_corpus())
    try:
        result = await plan(caller, local.model_name, index)
    finally:
        await caller.aclose()
    assert result.outcome is Outcome.APPLIED, result.trace
    assert [(p.tool_name, p.args.model_dump()["passage_id"]) for p in result.proposed] == [
        ("delete_passage", "space-04")
    ], result.trace
    assert index.get("space-04") is not None


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_real_model_finishes_the_planning_run_once_its_delete_is_decided(
    local: LocalModel, decision: str, tmp_path: Path
) -> None:
    """The demo's arc through the journal: the curator proposes the delete; after an approval it runs
    once and the model says done; after a rejection nothing is deleted and the model says done."""
    index = BM25Index(load_corpus())
    tools: tuple[FunctionTool[Any, Any], ...] = (search_tool(index), delete_tool(index))
    caller = local.caller()
    try:
        async with open_journal(tmp_path / "journal.db") as journal:
            with JournalObserver(journal) as recorder:
                planned = await plan(caller, local.model_name, index, observer=recorder)
            [pending] = await journal.pending()
            if decision == "approve":
                await journal.approve(pending.id, "ana")
            else:
                await journal.reject(pending.id, "ana", "keep the archive for the record")
            agent = Curator(model=local.model_name, tools=tools)
            resumed = await journal.resume(planned.run_id, caller, agent, tools, PLANNING_TASK)
            state = (await journal.get(pending.id)).state
    finally:
        await caller.aclose()
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE, resumed.trace
    if decision == "approve":
        assert state is ProposalState.EXECUTED
        assert index.get("space-04") is None
        assert resumed.items[-1] == "deleted space-04"
    else:
        assert state is ProposalState.REJECTED
        assert index.get("space-04") is not None


def test_the_shipped_questions_run_on_the_real_model_into_a_report_of_the_right_shape(
    local: LocalModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentkit eval run`` of the demo's dataset on the embedded model writes a report with a run per case, each
    judged by its checks, and the summary; the scores are the model's and are not asserted."""
    from agentkit._cli import main
    from agentkit.evals import EvalReport
    from agentkit.evals.demo import QUESTIONS

    out = tmp_path / "report.json"
    argv = ["eval", "run", "agentkit.evals.demo:QUESTIONS", "--agent", "agentkit.evals.demo:researcher"]
    assert main([*argv, "--base-url", local.base_url, "--model", local.model_name, "--out", str(out)]) == 0
    report = EvalReport.load(out)
    assert [c.name for c in report.cases] == [c.name for c in QUESTIONS.cases]
    assert all(len(c.runs) == 1 and c.runs[0].outcome is not None for c in report.cases)
    assert all(c.runs[0].checks for c in report.cases)
    assert report.summary.runs == len(QUESTIONS.cases)
    assert sum(report.summary.outcomes.values()) == report.summary.runs
    assert f"dataset {QUESTIONS.name} · {len(QUESTIONS.cases)} cases" in capsys.readouterr().out


def test_the_planning_tasks_run_through_the_local_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--local`` starts the embedded model itself; the planning tasks' report records what each run proposed."""
    from agentkit._cli import main
    from agentkit.evals import EvalReport

    out = tmp_path / "planning.json"
    argv = ["eval", "run", "agentkit.evals.demo:PLANNING", "--agent", "agentkit.evals.demo:curator", "--local"]
    assert main([*argv, "--out", str(out)]) == 0
    report = EvalReport.load(out)
    assert report.summary.runs == 3
    assert all(r.tool == "delete_passage" for c in report.cases for run in c.runs for r in run.proposals)
    assert "dataset demo-planning · 3 cases" in capsys.readouterr().out
