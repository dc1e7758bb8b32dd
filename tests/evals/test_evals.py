"""``agentkit.evals``: cases over a run judged by built-in and typed checks, repeats and concurrency, the report
(JSON and table), ``compare`` as a regression gate, and the demo's shipped datasets."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, StopReason, Tier, ToolLoop, Usage, UsageError, tool
from agentkit._demo.search import load_corpus
from agentkit._structured import StructuredRequest
from agentkit.errors import ProviderError
from agentkit.evals import (
    Case,
    CaseRun,
    Check,
    Dataset,
    EvalReport,
    Expect,
    ExpectedProposal,
    RegressionKind,
    Verdict,
    answer_equals,
    answer_matches,
    cites_only_retrieved,
    compare,
    evaluate,
    evaluate_case,
    never_proposes,
    outcome_is,
    parametrize,
    proposes,
    recall_at_k,
    retrieved_contains,
    rounds_at_most,
)
from agentkit.evals.demo import PLANNING, QUESTIONS, GroundedAnswer, curator, researcher
from agentkit.providers import ModelPrice, Prices
from agentkit.testing import FunctionCaller, ScriptedReply
from tests.support import Doc, Executor, Mail


class Query(BaseModel):
    ids: list[str]


class Found(BaseModel):
    text: str
    cites: list[str]


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Return a document per id asked for."""
    return [Doc(id=i) for i in args.ids]


@tool(tier=Tier.IRREVERSIBLE)
def send(args: Mail) -> list[Doc]:
    """Send mail (never runs in a loop: it is proposed)."""
    raise AssertionError("a proposed call ran")


def _call(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"rationale": "", "decision": {"done": False, "call": {"tool": name, "args": dict(args)}}}


def _done(answer: Mapping[str, Any]) -> dict[str, Any]:
    return {"rationale": "", "decision": {"done": True, "answer": dict(answer)}}


SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "finds": [_call("search", {"ids": ["a", "b"]}), _done({"text": "found it in a", "cites": ["a"]})],
    "cites-unretrieved": [_call("search", {"ids": ["a"]}), _done({"text": "from z", "cites": ["z"]})],
    "stalls": [_call("search", {"ids": ["a"]})] * 6,
    "proposes": [_call("search", {"ids": ["m"]}), _call("send", {"to": "ops@example.com"})],
    "other-proposal": [_call("search", {"ids": ["m"]}), _call("send", {"to": "all@example.com"})],
}


def _script_of(request: StructuredRequest) -> tuple[str, int]:
    match = re.fullmatch(r"(.+) round (\d+)", request.dynamic)
    assert match is not None, request.dynamic
    return match.group(1), int(match.group(2))


def scripted(tokens: int = 10, scripts: Mapping[str, list[dict[str, Any]]] = SCRIPTS) -> FunctionCaller:
    """A caller answering each round of a run from the script its ctx names, ``tokens`` input tokens a call."""

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> ScriptedReply:
        name, round_ = _script_of(request)
        return ScriptedReply(
            value=scripts[name][round_ - 1], usage=Usage(requests=1, input_tokens=tokens, output_tokens=1)
        )

    return FunctionCaller(answer)


def loop(caller: FunctionCaller, max_rounds: int = 4) -> ToolLoop[str, BaseModel, Doc, Found]:
    return ToolLoop(caller, Executor[Doc](), [search, send], LoopConfig(max_rounds=max_rounds), answer=Found)


def dataset(*cases: Case[str]) -> Dataset[str]:
    return Dataset(name="unit", cases=cases)


FINDS = Case(
    name="finds",
    ctx="finds",
    expect=Expect(
        outcome=Outcome.APPLIED,
        stop_reason=StopReason.EXECUTOR_DONE,
        retrieved=["a", "b"],
        answer_matches={"text": "found"},
        answer_equals={"cites": ["a"]},
        never_proposes=["send"],
        rounds_at_most=2,
        cites_only_retrieved=["cites"],
    ),
)


async def test_a_case_whose_run_meets_every_expectation_passes_with_each_check_named() -> None:
    report = await evaluate(dataset(FINDS), loop(scripted()).run)
    run = report.case("finds").runs[0]
    assert run.passed
    assert report.passed
    assert [c.name for c in run.checks] == [
        "outcome is applied",
        "stop reason is executor_done",
        "retrieved a, b",
        "answer.cites == ['a']",
        "answer.text ~ /found/",
        "never proposes send",
        "rounds <= 2",
        "cites only retrieved (cites)",
    ]
    assert (run.outcome, run.stop_reason, run.rounds, run.input_tokens) == (
        Outcome.APPLIED,
        StopReason.EXECUTOR_DONE,
        2,
        20,
    )


async def test_a_failed_check_says_what_it_saw() -> None:
    case = Case(
        name="cites-unretrieved",
        ctx="cites-unretrieved",
        expect=Expect(retrieved=["a", "q"], cites_only_retrieved=["cites"], answer_matches={"text": "^found"}),
    )
    run = (await evaluate(dataset(case), loop(scripted()).run)).cases[0].runs[0]
    assert not run.passed
    reasons = {c.name: c.reason for c in run.failed_checks}
    assert reasons == {
        "retrieved a, q": "missing q",
        "answer.text ~ /^found/": "text = 'from z'",
        "cites only retrieved (cites)": "cites z, never retrieved",
    }


async def test_stalemates_proposals_and_their_digests_are_in_the_report() -> None:
    cases = [
        Case(name="stalls", ctx="stalls", expect=Expect(outcome=Outcome.APPLIED)),
        Case(
            name="proposes",
            ctx="proposes",
            expect=Expect(
                stop_reason=StopReason.PROPOSED,
                proposes=[ExpectedProposal(tool="send", args={"to": "ops@example.com"})],
            ),
        ),
    ]
    report = await evaluate(dataset(*cases), loop(scripted()).run)
    stalls, proposed = report.cases
    assert stalls.runs[0].outcome is Outcome.STALEMATE
    assert not stalls.passed
    assert proposed.passed
    assert [p.tool for p in proposed.runs[0].proposals] == ["send"]
    summary = report.summary
    assert summary.stalemate_rate == 0.5
    assert summary.ended_by_executor_rate == 0.0
    assert summary.outcomes == {"applied": 1, "stalemate": 1}
    assert summary.proposal_digests == (proposed.runs[0].proposals[0].digest,)


async def test_python_checks_are_typed_functions_of_the_run_and_a_raising_check_fails_only_itself() -> None:
    def cites_first_item(run: CaseRun[Doc, Found]) -> Verdict:
        assert run.answer is not None
        return Verdict(run.answer.cites[:1] == [run.items[0].id], f"cites {run.answer.cites}")

    def breaks(run: CaseRun[Doc, Found]) -> bool:
        raise ValueError("the check's own bug")

    report = await evaluate(dataset(FINDS), loop(scripted()).run, checks=[cites_first_item, breaks])
    results = {c.name: c for c in report.cases[0].runs[0].checks}
    assert results["cites_first_item"].passed
    assert results["breaks"].error == "ValueError: the check's own bug"
    assert not results["breaks"].passed
    assert results["outcome is applied"].passed  # the other checks ran


async def test_a_run_that_raises_fails_that_run_and_the_others_go_on() -> None:
    plain = loop(scripted())

    async def task(ctx: str) -> Any:
        if ctx == "boom":
            raise RuntimeError("the agent's own bug")
        return await plain.run(ctx)

    report = await evaluate(dataset(FINDS, Case(name="boom", ctx="boom")), task)
    boom = report.case("boom").runs[0]
    assert (boom.passed, boom.outcome, boom.error) == (False, None, "RuntimeError: the agent's own bug")
    assert report.case("finds").passed
    assert report.summary.outcomes == {"applied": 1, "raised": 1}
    assert "raised RuntimeError: the agent's own bug" in report.table()


async def test_repeats_run_every_case_that_many_times_at_most_concurrency_at_once() -> None:
    running = 0
    most = 0
    plain = loop(scripted())

    async def task(ctx: str) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        try:
            return await plain.run(ctx)
        finally:
            running -= 1

    cases = [Case(name=f"finds-{i}", ctx="finds") for i in range(6)]
    report = await evaluate(dataset(*cases), task, repeats=3, concurrency=4)
    assert [len(c.runs) for c in report.cases] == [3] * 6
    assert [r.repeat for r in report.cases[0].runs] == [0, 1, 2]
    assert most == 4
    assert report.summary.runs == 18
    assert report.repeats == 3
    assert report.concurrency == 4


async def test_the_pass_rate_spread_across_repeats_is_reported() -> None:
    calls = 0
    plain = loop(scripted())

    async def flaky(ctx: str) -> Any:
        nonlocal calls
        calls += 1
        return await plain.run("finds" if calls % 2 else "stalls")

    report = await evaluate(dataset(Case(name="x", ctx="?", expect=Expect(outcome=Outcome.APPLIED))), flaky, repeats=2)
    assert (report.summary.pass_rate_min, report.summary.pass_rate_max, report.summary.pass_rate) == (0.0, 1.0, 0.5)


async def test_the_report_round_trips_through_json_and_its_table_has_a_line_per_case(tmp_path: Path) -> None:
    report = await evaluate(dataset(FINDS, Case(name="stalls", ctx="stalls")), loop(scripted()).run, label="v1")
    path = tmp_path / "report.json"
    report.save(path)
    assert EvalReport.load(path) == report
    table = report.table()
    assert table.splitlines()[0] == "dataset unit · 2 cases x 1 repeat(s) · v1"
    assert any(line.startswith("finds ") and "1/1" in line for line in table.splitlines())
    assert "passed 2/2 runs (100%)" in table


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda data: {**data, "version": 2}, "version: Input should be 1"),
        (lambda data: {**data, "cases": "none"}, "cases: Input should be a valid"),
        (lambda data: "not a report", "not an agentkit eval report"),
    ],
)
async def test_a_report_from_another_version_or_edited_by_hand_is_refused(
    tmp_path: Path, edit: Any, message: str
) -> None:
    report = await evaluate(dataset(FINDS), loop(scripted()).run)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(edit(report.model_dump(mode="json"))))
    with pytest.raises(UsageError, match=re.escape(message)):
        EvalReport.load(path)


def test_a_dataset_file_that_does_not_validate_names_the_case_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    path.write_text(
        json.dumps(
            {
                "name": "bad",
                "cases": [
                    {"name": "fine", "ctx": "q"},
                    {"name": "wrong-outcome", "ctx": "q", "expect": {"outcome": "won"}},
                ],
            }
        )
    )
    with pytest.raises(UsageError, match=r"case 'wrong-outcome' \(cases\[1\]\): expect\.outcome"):
        Dataset.from_file(path)
    path.write_text(json.dumps({"name": "bad", "cases": [{"name": "typo", "ctx": "q", "expect": {"retreived": []}}]}))
    with pytest.raises(UsageError, match=r"case 'typo' \(cases\[0\]\): expect\.retreived: Extra inputs"):
        Dataset.from_file(path)
    path.write_text(json.dumps({"name": "bad", "cases": [{"name": "n", "ctx": 3}]}))
    with pytest.raises(UsageError, match=r"case 'n' \(cases\[0\]\): ctx: Input should be a valid string"):
        Dataset.from_file(path, str)
    path.write_text(
        json.dumps({"name": "bad", "cases": [{"name": "re", "ctx": "q", "expect": {"answer_matches": {"a": "("}}}]})
    )
    with pytest.raises(UsageError, match=r"case 're': answer.a: the pattern '\(' is not a regular expression"):
        Dataset.from_file(path)
    path.write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        Dataset.from_file(path)
    with pytest.raises(UsageError, match="cannot read the dataset"):
        Dataset.from_file(tmp_path / "missing.json")


def test_a_dataset_refuses_twice_the_same_case_name_and_no_cases() -> None:
    with pytest.raises(UsageError, match="more than one case 'a'"):
        Dataset(name="d", cases=[Case(name="a", ctx=1), Case(name="a", ctx=2)])
    with pytest.raises(UsageError, match="has no cases"):
        Dataset(name="d", cases=[])


def test_a_dataset_round_trips_through_its_data() -> None:
    again = Dataset.from_data(QUESTIONS.to_data(), str)
    assert again.to_data() == QUESTIONS.to_data()
    assert [again.case_digest(c) for c in again.cases] == [QUESTIONS.case_digest(c) for c in QUESTIONS.cases]


def test_built_in_checks_refuse_bad_arguments_when_made() -> None:
    with pytest.raises(UsageError, match="k >= 1"):
        recall_at_k(["a"], 0)
    with pytest.raises(UsageError, match="fraction"):
        recall_at_k(["a"], 3, minimum=1.5)
    with pytest.raises(UsageError, match="n >= 1"):
        rounds_at_most(0)
    with pytest.raises(UsageError, match="answer fields"):
        cites_only_retrieved()


async def test_each_built_in_check_passes_and_fails_on_what_it_names() -> None:
    result = await loop(scripted()).run("finds")
    run: CaseRun[Doc, Found] = CaseRun(case=FINDS, result=result, repeat=0, seconds=0.0)
    passing: list[Check[Any, Any]] = [
        outcome_is(Outcome.APPLIED, Outcome.SILENT),
        retrieved_contains("b"),
        recall_at_k(["a", "b", "c"], 2, minimum=0.6),
        answer_equals("cites", ["a"]),
        answer_matches("text", "IN A"),
        never_proposes("send"),
        rounds_at_most(2),
    ]
    failing: list[Check[Any, Any]] = [
        outcome_is(Outcome.SILENT),
        retrieved_contains("c"),
        recall_at_k(["a", "b", "c"], 1, minimum=0.5),
        answer_equals("text", "other"),
        answer_equals("missing.field", 1),
        answer_matches("cites", "a"),
        proposes("send"),
        rounds_at_most(1),
    ]
    assert [c.name for c in passing if not c(run).passed] == []
    assert [c.name for c in failing if c(run).passed] == []
    assert answer_equals("missing.field", 1)(run).reason == "the answer has no field 'missing.field'"
    assert recall_at_k(["a", "b", "c"], 1, minimum=0.5)(run).reason == "recall@1 0.33"


async def test_proposes_matches_args_field_by_field_and_by_a_typed_predicate() -> None:
    result = await loop(scripted()).run("proposes")
    run: CaseRun[Doc, Found] = CaseRun(case=FINDS, result=result, repeat=0, seconds=0.0)
    assert proposes("send", args={"to": "ops@example.com"})(run).passed
    assert not proposes("send", args={"to": "all@example.com"})(run).passed
    assert proposes("send", where=lambda args: args.to.endswith("@example.com"))(run).passed
    assert not proposes("send", where=lambda args: args.to.startswith("all"))(run).passed
    assert not never_proposes("send")(run).passed


async def _report(*names: str, tokens: int = 10, label: str = "", repeats: int = 1) -> EvalReport:
    cases = [Case(name=n, ctx=n, expect=Expect(outcome=Outcome.APPLIED)) for n in names]
    return await evaluate(Dataset(name="gate", cases=cases), loop(scripted(tokens)).run, label=label, repeats=repeats)


def _renamed(report: EvalReport, runs_of: dict[str, str]) -> EvalReport:
    """``report`` with the runs of case A replaced by those of case B (as a changed agent would make them)."""
    cases = [c.model_copy(update={"runs": report.case(runs_of.get(c.name, c.name)).runs}) for c in report.cases]
    return EvalReport.build(dataset=report.dataset, label="new", repeats=report.repeats, concurrency=1, cases=cases)


async def test_compare_finds_no_regression_between_equal_reports() -> None:
    base = await _report("finds", "proposes")
    comparison = compare(base, await _report("finds", "proposes"))
    assert comparison.ok
    assert comparison.regressions == ()
    assert "no regressions" in comparison.text()


async def test_compare_lists_a_failing_case_a_new_stalemate_and_the_pass_rate_drop() -> None:
    base = await evaluate(
        Dataset(
            name="gate",
            cases=[Case(name=n, ctx=n, expect=Expect(outcome=Outcome.APPLIED)) for n in ("finds", "stalls")],
        ),
        loop(scripted()).run,
    )
    # The candidate: the "finds" case now stalls too.
    candidate = _renamed(base, {"finds": "stalls"})
    comparison = compare(base, candidate)
    kinds = [(r.kind, r.case) for r in comparison.regressions]
    assert kinds == [
        (RegressionKind.CASE_FAILS, "finds"),
        (RegressionKind.PASS_RATE_DROPPED, None),
        (RegressionKind.NEW_STALEMATE, "finds"),
        (RegressionKind.COST_UP, None),  # a stalled run asks the model more often
    ]
    assert "finds" in comparison.text()
    assert not comparison.ok
    assert compare(candidate, base).improved == ("finds",)


async def test_compare_lists_proposals_whose_digests_changed() -> None:
    base = await _report("proposes", "other-proposal")
    comparison = compare(base, _renamed(base, {"proposes": "other-proposal"}))
    assert [(r.kind, r.case) for r in comparison.regressions] == [(RegressionKind.PROPOSALS_CHANGED, "proposes")]


async def test_compare_flags_cost_up_beyond_the_tolerance_only() -> None:
    base = await _report("finds", tokens=100)
    assert compare(base, await _report("finds", tokens=109)).ok
    up = compare(base, await _report("finds", tokens=150))
    assert [r.kind for r in up.regressions] == [RegressionKind.COST_UP]
    assert compare(base, await _report("finds", tokens=150), cost_tolerance=0.6).ok


async def _priced(*names: str, tokens: int, price: str | None) -> EvalReport:
    """A report of `_report`'s runs, each priced at `price` per million input tokens (unpriced: `None`)."""
    prices = None if price is None else Prices({"m": ModelPrice(input=Decimal(price), output=Decimal(0))})
    priced = ToolLoop(scripted(tokens), Executor[Doc](), [search, send], LoopConfig(prices=prices), answer=Found)
    cases = [Case(name=n, ctx=n, expect=Expect(outcome=Outcome.APPLIED)) for n in names]
    return await evaluate(Dataset(name="gate", cases=cases), priced.run)


async def test_compare_reports_and_judges_cost_in_money_where_every_run_is_priced() -> None:
    """With prices, the report sums each run's cost and `compare` judges the cost per run in money (so a cheaper
    model that spends more tokens is no regression), and says both costs; without them it falls back to tokens."""
    base = await _priced("finds", tokens=1_000_000, price="1")
    assert base.summary.cost == base.summary.runs * base.case("finds").runs[0].cost  # type: ignore[operator]
    assert "cost 2.0000 (2.0000 per run)" in base.table()
    cheaper = await _priced("finds", tokens=1_500_000, price="0.5")
    comparison = compare(base, cheaper)
    assert comparison.ok
    assert comparison.cost_per_run == (Decimal(2), Decimal("1.5"))
    assert "cost per run 2.0000 -> 1.5000" in comparison.text()
    dearer = compare(base, await _priced("finds", tokens=1_000_000, price="2"))
    assert [r.detail for r in dearer.regressions] == ["cost per run 2.0000 -> 4.0000 (+100%, tolerance 10%)"]
    unpriced = compare(base, await _priced("finds", tokens=1_500_000, price=None))
    assert unpriced.cost_per_run is None
    assert [r.kind for r in unpriced.regressions] == [RegressionKind.COST_UP]  # tokens per run, +50%
    assert EvalReport.model_validate_json(base.model_dump_json()).summary.cost == Decimal(2)


async def test_compare_flags_any_spend_over_a_baseline_that_cost_nothing() -> None:
    """A baseline priced at 0 (a free local model) against a candidate that costs money is a cost rise whatever the
    tolerance; two free reports are none."""
    free = await _priced("finds", tokens=1_000, price="0")
    assert free.summary.cost_per_run == 0
    dear = compare(free, await _priced("finds", tokens=1_000, price="1"), cost_tolerance=10.0)
    assert [r.detail for r in dear.regressions] == ["cost per run 0 -> 0.0020"]
    assert compare(free, await _priced("finds", tokens=5_000, price="0")).ok


async def test_compare_allows_a_pass_rate_within_the_spread_seen_across_repeats() -> None:
    calls = 0
    failing: set[int] = set()
    plain = loop(scripted())

    async def flaky(ctx: str) -> Any:
        nonlocal calls
        calls += 1
        return await plain.run("stalls" if calls in failing else "finds")

    cases = [Case(name=f"c{i}", ctx="finds", expect=Expect(outcome=Outcome.APPLIED)) for i in range(4)]
    failing, calls = {1, 2}, 0  # repeat 0 passes 2 of 4, repeat 1 all 4: a spread of 50%
    base = await evaluate(Dataset(name="gate", cases=cases), flaky, repeats=2)
    failing, calls = {1, 5, 6}, 0  # 5 of 8, down from 6 of 8: within the spread
    candidate = await evaluate(Dataset(name="gate", cases=cases), flaky, repeats=2)
    assert (base.summary.pass_rate_min, base.summary.pass_rate_max) == (0.5, 1.0)
    assert (base.summary.pass_rate, candidate.summary.pass_rate) == (0.75, 0.625)
    assert RegressionKind.PASS_RATE_DROPPED not in [r.kind for r in compare(base, candidate).regressions]
    failing, calls = {1, 2, 3, 5, 6, 7, 8}, 0  # 1 of 8: beyond it
    worse = await evaluate(Dataset(name="gate", cases=cases), flaky, repeats=2)
    assert RegressionKind.PASS_RATE_DROPPED in [r.kind for r in compare(base, worse).regressions]


async def test_compare_refuses_reports_of_other_datasets_or_other_cases_naming_them() -> None:
    base = await _report("finds", "stalls")
    with pytest.raises(UsageError, match="different datasets: 'gate' and 'other'"):
        compare(base, base.model_copy(update={"dataset": "other"}))
    with pytest.raises(UsageError, match=r"stalls \(only in the baseline\)"):
        compare(base, await _report("finds"))
    changed = base.model_copy(update={"cases": (base.cases[0].model_copy(update={"digest": "x"}), base.cases[1])})
    with pytest.raises(UsageError, match=r"finds \(changed\)"):
        compare(base, changed)


async def test_evaluate_case_runs_one_case_by_name() -> None:
    report = await evaluate_case(dataset(FINDS), "finds", loop(scripted()).run, repeats=2)
    assert report.passed
    assert len(report.runs) == 2
    with pytest.raises(KeyError):
        await evaluate_case(dataset(FINDS), "nope", loop(scripted()).run)


async def test_evaluate_refuses_repeats_or_concurrency_below_one() -> None:
    with pytest.raises(UsageError, match="at least 1"):
        await evaluate(dataset(FINDS), loop(scripted()).run, repeats=0)


# The demo's datasets, judged against an oracle that searches for the question and answers from the expected
# passage: every case is satisfiable as written, and the checks hold the agent to it.

CORPUS = {p.id: p for p in load_corpus()}
EXPECTED = {c.ctx: c.metadata["passage"] for c in QUESTIONS.cases}


def oracle(*, cite: str | None = None) -> FunctionCaller:
    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        question = request.dynamic.split("Request:\n", 1)[1].split("\n", 1)[0]
        passage = str(EXPECTED[question])
        if f"[{passage}]" not in request.dynamic:
            return {"rationale": "search", "decision": {"done": False, "call": {"query": question}}}
        text = CORPUS[passage].text
        return {
            "rationale": "found",
            "decision": {"done": True, "answer": {"passage_id": cite or passage, "answer": text}},
        }

    return FunctionCaller(answer)


def test_the_shipped_questions_are_at_least_twenty_each_answerable_from_its_passage() -> None:
    assert len(QUESTIONS.cases) >= 20
    for case in QUESTIONS.cases:
        (passage,) = case.expect.retrieved
        assert re.search(case.expect.answer_matches["answer"], CORPUS[passage].text, re.IGNORECASE), case.name


async def test_the_demo_researcher_passes_every_shipped_question_when_it_finds_and_cites_the_passage() -> None:
    report = await evaluate(QUESTIONS, researcher(oracle(), "m"), concurrency=4)
    assert [c.name for c in report.cases if not c.passed] == []
    assert report.summary.ended_by_executor_rate == 1.0


async def test_a_researcher_insisting_on_a_passage_it_never_retrieved_gets_no_answer_and_fails() -> None:
    """The citation is refused by the answer's schema (``Cites``) each time it is given: the run ends without an
    answer, and the case fails on its outcome, its answer and its citation."""
    report = await evaluate_case(QUESTIONS, "liquid-metal", researcher(oracle(cite="geo-01"), "m"))
    run = report.runs[0]
    assert run.stop_reason is StopReason.LLM_ERROR
    assert [c.name for c in run.failed_checks] == [
        "outcome is applied",
        "answer.answer ~ /mercury/",
        "cites only retrieved (passage_id)",
    ]


def test_the_planning_dataset_expects_the_archived_pluto_delete_and_no_delete_otherwise() -> None:
    (first, *rest) = PLANNING.cases
    assert first.expect.proposes == [ExpectedProposal(tool="delete_passage", args={"passage_id": "space-04"})]
    assert all(c.expect.never_proposes == ["delete_passage"] for c in rest)
    assert callable(curator(oracle(), "m"))
    assert GroundedAnswer.model_fields.keys() == {"passage_id", "answer"}


@parametrize(dataset(FINDS, Case(name="finds-again", ctx="finds")))
async def test_a_dataset_runs_as_one_test_per_case(case: Case[str], request: pytest.FixtureRequest) -> None:
    assert request.node.callspec.id == case.name
    (
        await evaluate_case(dataset(FINDS, Case(name="finds-again", ctx="finds")), case, loop(scripted()).run)
    ).assert_passed()


async def test_a_case_whose_step_searches_and_proposes_is_judged_on_both() -> None:
    """Under max_calls_per_step, one step's search is retrieved and its two sends are both in the report's proposals."""
    several = {
        "rationale": "",
        "decision": {
            "done": False,
            "calls": [
                {"tool": "search", "args": {"ids": ["a"]}},
                {"tool": "send", "args": {"to": "ops@example.com"}},
                {"tool": "send", "args": {"to": "dev@example.com"}},
            ],
        },
    }
    config = LoopConfig(max_rounds=4, max_calls_per_step=3)
    runs = ToolLoop(scripted(scripts={"mixed": [several]}), Executor[Doc](), [search, send], config, answer=Found)
    case = Case(
        name="mixed",
        ctx="mixed",
        expect=Expect(
            stop_reason=StopReason.PROPOSED,
            retrieved=["a"],
            proposes=[
                ExpectedProposal(tool="send", args={"to": "ops@example.com"}),
                ExpectedProposal(tool="send", args={"to": "dev@example.com"}),
            ],
        ),
    )
    report = await evaluate(dataset(case), runs.run)
    [judged] = report.cases
    assert judged.passed
    assert [p.tool for p in judged.runs[0].proposals] == ["send", "send"]


async def test_a_run_that_ends_in_an_error_fails_a_case_that_states_no_outcome() -> None:
    """A run that never reached its model does not pass a case by what it did not do: a case stating neither an
    outcome nor a stop reason expects a run that ended without an error; one that states the error's stop reason
    takes it."""

    def unreachable(request: StructuredRequest, schema: type[BaseModel] | None) -> ScriptedReply:
        raise ProviderError("connection refused", transient=False)

    keeps = Case(name="keeps", ctx="keeps", expect=Expect(never_proposes=["send"]))
    expects = Case(name="expects", ctx="expects", expect=Expect(stop_reason=StopReason.LLM_ERROR))
    report = await evaluate(dataset(keeps, expects), loop(FunctionCaller(unreachable)).run)
    (run,) = report.case("keeps").runs
    assert [(c.name, c.passed) for c in run.checks] == [("ends without an error", False), ("never proposes send", True)]
    assert not report.case("keeps").passed
    assert report.case("expects").passed
    quiet = Case(name="finds", ctx="finds", expect=Expect(never_proposes=["send"]))
    assert (await evaluate(dataset(quiet), loop(scripted()).run)).case("finds").passed
