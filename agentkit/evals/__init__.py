"""Evaluate an agent over a dataset, like code under test: typed cases over a run, built-in and typed
checks, repeats and concurrency through any caller, a JSON report, and `compare` as a regression gate.

Install with the `evals` extra for the command line's progress bar (`rich`); the library itself
needs nothing beyond agentkit. `agentkit eval run` and `agentkit eval compare` run it from a
shell or a CI job.

Example:
    >>> questions = Dataset(name="corpus", cases=[
    ...     Case(name="voyager", ctx="When was Voyager 1 launched?",
    ...          expect=Expect(outcome=Outcome.APPLIED, retrieved=["space-01"])),
    ... ])
    >>> report = await evaluate(questions, loop.run, repeats=3, concurrency=8)
    >>> print(report.table())
    >>> compare(EvalReport.load("baseline.json"), report).ok
"""

from agentkit.evals._checks import (
    CaseRun,
    Check,
    CheckArg,
    Verdict,
    answer_equals,
    answer_matches,
    cites_only_retrieved,
    ends_without_error,
    never_proposes,
    outcome_is,
    proposes,
    recall_at_k,
    retrieved_contains,
    rounds_at_most,
    stop_reason_is,
)
from agentkit.evals._dataset import Case, Dataset, Expect, ExpectedProposal
from agentkit.evals._pytest import parametrize
from agentkit.evals._report import (
    CaseReport,
    CheckResult,
    Comparison,
    EvalReport,
    ProposalRef,
    Regression,
    RegressionKind,
    RunReport,
    Summary,
    compare,
)
from agentkit.evals._run import Task, evaluate, evaluate_case

__all__ = [
    "Case",
    "CaseReport",
    "CaseRun",
    "Check",
    "CheckArg",
    "CheckResult",
    "Comparison",
    "Dataset",
    "EvalReport",
    "Expect",
    "ExpectedProposal",
    "ProposalRef",
    "Regression",
    "RegressionKind",
    "RunReport",
    "Summary",
    "Task",
    "Verdict",
    "answer_equals",
    "answer_matches",
    "cites_only_retrieved",
    "compare",
    "ends_without_error",
    "evaluate",
    "evaluate_case",
    "never_proposes",
    "outcome_is",
    "parametrize",
    "proposes",
    "recall_at_k",
    "retrieved_contains",
    "rounds_at_most",
    "stop_reason_is",
]
