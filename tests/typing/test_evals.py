"""assert_type checks for ``agentkit.evals`` (mypy and basedpyright): a dataset's ctx type, checks typed by the
task's items and answer, and the report's fields.

A ``# type: ignore[code]`` here is a negative check: ``warn_unused_ignores`` fails the run if
mypy stops reporting that error.
"""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, StopReason, StructuredCaller, ToolLoop, ToolLoopResult
from agentkit._proposals import ProposedAction
from agentkit.evals import (
    Case,
    CaseReport,
    CaseRun,
    Check,
    Comparison,
    Dataset,
    EvalReport,
    Expect,
    Regression,
    RunReport,
    Task,
    Verdict,
    compare,
    ends_without_error,
    evaluate,
    evaluate_case,
    outcome_is,
)
from tests.typing.models import Doc, Finder, search


class Reply(BaseModel):
    text: str
    cites: list[str]


def cites_something(run: CaseRun[Doc, Reply]) -> bool:
    return run.answer is not None and bool(run.answer.cites)


def wants_ints(run: CaseRun[int, Reply]) -> bool:
    return True


async def run_task(task: Task[str, Doc, Reply]) -> None:
    assert_type(await task("q"), ToolLoopResult[Doc, Reply])


async def check(caller: StructuredCaller) -> None:
    case = Case(name="q", ctx="question", expect=Expect(outcome=Outcome.APPLIED, stop_reason=[StopReason.PROPOSED]))
    assert_type(case, Case[str])
    assert_type(case.ctx, str)
    questions = Dataset(name="d", cases=[case])
    assert_type(questions, Dataset[str])
    assert_type(Dataset.from_file("cases.json", str), Dataset[str])
    assert_type(Dataset.from_file("cases.json"), Dataset[Any])

    loop = ToolLoop(caller, Finder(), search, LoopConfig(), answer=Reply)
    assert_type(ends_without_error(), Check[Any, Any])
    report = await evaluate(questions, loop.run, checks=[cites_something, outcome_is(Outcome.APPLIED)], repeats=2)
    assert_type(report, EvalReport)
    assert_type(report.cases, tuple[CaseReport, ...])
    assert_type(report.cases[0].runs, tuple[RunReport, ...])
    assert_type(report.cases[0].runs[0].outcome, Outcome | None)
    assert_type(report.summary.pass_rate, float)
    assert_type(await evaluate_case(questions, "q", loop.run), CaseReport)

    comparison = compare(report, report)
    assert_type(comparison, Comparison)
    assert_type(comparison.regressions, tuple[Regression, ...])
    assert_type(comparison.ok, bool)

    def typed(run: CaseRun[Doc, Reply]) -> Verdict:
        assert_type(run.items, list[Doc])
        assert_type(run.answer, Reply | None)
        assert_type(run.proposed, list[ProposedAction[Any]])
        return Verdict(True)

    assert_type(Check("typed", typed), Check[Doc, Reply])
    await run_task(loop.run)  # a ToolLoop's run is a task

    await evaluate(questions, loop.run, checks=[wants_ints])  # type: ignore[misc]  # a check of other items
    await evaluate(Dataset(name="n", cases=[Case(name="x", ctx=3)]), loop.run)  # type: ignore[arg-type]  # ctx is str
