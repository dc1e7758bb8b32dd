"""Running a dataset: every case, `repeats` times, `concurrency` runs at once, each run judged by its checks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._results import ToolLoopResult
from agentkit.errors import UsageError
from agentkit.evals._checks import CaseRun, Check, CheckArg, as_check
from agentkit.evals._dataset import Case, Dataset
from agentkit.evals._report import CaseReport, CheckResult, EvalReport, ProposalRef, RunReport

__all__ = ["Task", "evaluate", "evaluate_case"]

Ctx = TypeVar("Ctx")
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=Any)

Task = Callable[[Ctx], Awaitable[ToolLoopResult[R, Answer]]]
"""What runs a case: a function of its ctx returning the run's result (`loop.run` of a `ToolLoop`)."""

RunHook = Callable[[str, RunReport], None]
"""Called as each run is judged, with the case's name: a progress bar's hook."""


async def evaluate(
    dataset: Dataset[Ctx],
    task: Task[Ctx, R, Answer],
    *,
    checks: Sequence[CheckArg[R, Answer]] = (),
    repeats: int = 1,
    concurrency: int = 1,
    label: str = "",
    on_run: RunHook | None = None,
) -> EvalReport:
    """Run every case of `dataset` through `task` and judge each run.

    Each run is judged by its case's expectations and checks, the dataset's checks and `checks`.
    A check that raises fails that check, named with the error; a run that raises fails that run;
    the other runs go on either way.

    Args:
        dataset: The cases.
        task: Runs one case: `loop.run` of a `ToolLoop`, or any async function of the ctx that
            returns a loop's result (through any caller: a server, the embedded model, a replay).
        checks: Checks for every run, typed by the task's items and answer.
        repeats: How many times each case runs (a model at a temperature above 0 is not
            deterministic; the report's pass-rate spread across repeats comes from these).
        concurrency: How many runs at once.
        label: What is evaluated (a model, a prompt version), kept in the report.
        on_run: Called as each run is judged (from the event loop's thread).

    Raises:
        UsageError: `repeats` or `concurrency` below 1, or a check that is not one.
    """
    if repeats < 1 or concurrency < 1:
        raise UsageError(f"repeats and concurrency are at least 1, got repeats={repeats}, concurrency={concurrency}")
    common = [*(as_check(c) for c in dataset.checks), *(as_check(c) for c in checks)]
    plans = [(case, _case_checks(case, common)) for case in dataset.cases]
    slots: list[list[RunReport | None]] = [[None] * repeats for _ in plans]
    queue = [(i, repeat) for repeat in range(repeats) for i in range(len(plans))]
    queue.reverse()

    async def worker() -> None:
        while queue:
            i, repeat = queue.pop()
            case, case_checks = plans[i]
            report = await _run_one(case, task, case_checks, repeat, dataset.key)
            slots[i][repeat] = report
            if on_run is not None:
                on_run(case.name, report)

    workers = min(concurrency, len(queue))
    if workers == 1:
        await worker()
    else:
        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(worker())
    cases = [
        CaseReport(name=case.name, digest=dataset.case_digest(case), runs=tuple(r for r in runs if r is not None))
        for (case, _), runs in zip(plans, slots, strict=True)
    ]
    return EvalReport.build(dataset=dataset.name, label=label, repeats=repeats, concurrency=concurrency, cases=cases)


async def evaluate_case(
    dataset: Dataset[Ctx],
    case: Case[Ctx] | str,
    task: Task[Ctx, R, Answer],
    *,
    checks: Sequence[CheckArg[R, Answer]] = (),
    repeats: int = 1,
) -> CaseReport:
    """One case of `dataset` (or the case of that name), run `repeats` times: a test's unit.

    Raises:
        KeyError: no case of that name.
    """
    if isinstance(case, str):
        named = [c for c in dataset.cases if c.name == case]
        if not named:
            raise KeyError(case)
        case = named[0]
    common = [*(as_check(c) for c in dataset.checks), *(as_check(c) for c in checks)]
    case_checks = _case_checks(case, common)
    runs = [await _run_one(case, task, case_checks, repeat, dataset.key) for repeat in range(repeats)]
    return CaseReport(name=case.name, digest=dataset.case_digest(case), runs=tuple(runs))


def _case_checks(case: Case[Any], common: Sequence[Check[Any, Any]]) -> list[Check[Any, Any]]:
    return [*case.expect.checks(), *(as_check(c) for c in case.checks), *common]


async def _run_one(
    case: Case[Any], task: Task[Any, Any, Any], checks: Sequence[Check[Any, Any]], repeat: int, key: str
) -> RunReport:
    started = time.perf_counter()
    try:
        result = await task(case.ctx)
    except Exception as error:  # a run that raises fails; the others go on
        return RunReport(repeat=repeat, passed=False, error=_describe(error), seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if not isinstance(result, ToolLoopResult):
        return RunReport(
            repeat=repeat,
            passed=False,
            error=f"UsageError: the task returned a {type(result).__name__}, not a loop's result",
            seconds=seconds,
        )
    run: CaseRun[Any, Any] = CaseRun(case=case, result=result, repeat=repeat, seconds=seconds, key=key)
    judged = [_judge(check, run) for check in checks]
    usage = result.usage
    return RunReport(
        repeat=repeat,
        passed=all(c.passed for c in judged),
        checks=tuple(judged),
        outcome=result.outcome,
        stop_reason=result.stop_reason,
        error=None if result.error is None else _describe(result.error),
        rounds=result.rounds,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=result.cost,
        seconds=seconds,
        proposals=tuple(ProposalRef(tool=p.tool_name, digest=p.digest) for p in run.proposed),
    )


def _judge(check: Check[Any, Any], run: CaseRun[Any, Any]) -> CheckResult:
    try:
        verdict = check(run)
    except Exception as error:  # a check that raises fails itself, and only itself
        return CheckResult(name=check.name, passed=False, error=_describe(error))
    return CheckResult(name=check.name, passed=verdict.passed, reason=verdict.reason)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
