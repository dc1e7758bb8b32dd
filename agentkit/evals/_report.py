"""An evaluation's report (per case, per run, with the checks' reasons, and a summary), its table, and
`compare`: the regressions between a baseline report and a candidate's."""

from __future__ import annotations

import enum
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentkit._outcome import Outcome, StopReason
from agentkit.errors import UsageError

__all__ = [
    "CaseReport",
    "CheckResult",
    "Comparison",
    "EvalReport",
    "ProposalRef",
    "Regression",
    "RegressionKind",
    "RunReport",
    "Summary",
    "compare",
]

REPORT_VERSION: Literal[1] = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Frozen):
    """One check's judgement of one run."""

    name: str
    passed: bool
    reason: str = ""
    error: str | None = None
    """The check raised: its exception, as `Type: message` (the check counts as failed)."""


class ProposalRef(_Frozen):
    """A call a run proposed: its tool and its digest (the same call has the same digest in every run)."""

    tool: str
    digest: str


class RunReport(_Frozen):
    """One run of a case."""

    repeat: int
    passed: bool
    """Every check passed (and the run itself did not raise)."""
    checks: tuple[CheckResult, ...] = ()
    outcome: Outcome | None = None
    """`None` only when the run raised instead of returning a result (see `error`)."""
    stop_reason: StopReason | None = None
    error: str | None = None
    """The run's error: the result's (an `ERROR` outcome), or what the run raised."""
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    """What the run's model calls cost (`result.cost`, with `LoopConfig.prices`); `None` where unpriced."""
    seconds: float = 0.0
    proposals: tuple[ProposalRef, ...] = ()

    @property
    def ended_by_executor(self) -> bool:
        """The executor said it was done (rather than a ceiling, a guard, a proposal or an error)."""
        return self.stop_reason is StopReason.EXECUTOR_DONE

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def failed_checks(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.passed)


class CaseReport(_Frozen):
    """A case's runs (one per repeat)."""

    name: str
    digest: str
    """The case's ctx and expectations, digested: `compare` refuses reports whose cases differ."""
    runs: tuple[RunReport, ...]

    @property
    def pass_rate(self) -> float:
        return sum(r.passed for r in self.runs) / len(self.runs) if self.runs else 0.0

    @property
    def passed(self) -> bool:
        """More than half of the case's runs passed (every run, with one repeat)."""
        return self.pass_rate > 0.5

    @property
    def proposal_digests(self) -> frozenset[str]:
        return frozenset(p.digest for r in self.runs for p in r.proposals)

    def assert_passed(self) -> None:
        """Raise `AssertionError` naming each failed run's failed checks (or its error) unless the case passed."""
        if self.passed:
            return
        lines = [f"case {self.name!r} passed {sum(r.passed for r in self.runs)} of {len(self.runs)} run(s)"]
        for run in self.runs:
            if run.passed:
                continue
            if run.outcome is None:
                lines.append(f"  run {run.repeat}: raised {run.error}")
                continue
            failed = "; ".join(
                f"{c.name} ({c.error or c.reason})" if c.error or c.reason else c.name for c in run.failed_checks
            )
            lines.append(f"  run {run.repeat}: {run.outcome.value}/{run.stop_reason}: {failed}")
        raise AssertionError("\n".join(lines))


class Summary(_Frozen):
    """What the runs add up to."""

    cases: int
    runs: int
    passed_runs: int
    pass_rate: float
    """Runs passed over runs."""
    pass_rate_min: float
    """The lowest pass rate of one repeat (all cases' runs of that repeat): with `pass_rate_max`,
    the spread across repeats that `compare` allows a candidate."""
    pass_rate_max: float
    cases_passed: int
    outcomes: dict[str, int]
    """Runs by outcome (`raised` for a run that raised instead of returning)."""
    ended_by_executor_rate: float
    stalemate_rate: float
    error_rate: float
    input_tokens: int
    output_tokens: int
    tokens_per_run: float
    seconds_mean: float
    seconds_p50: float
    seconds_p95: float
    proposal_digests: tuple[str, ...]
    """Every distinct call proposed, by digest (sorted)."""
    cost: Decimal | None = None
    """What every run cost together, in the currency of the runs' prices; `None` unless every run was priced."""
    cost_per_run: Decimal | None = None


class EvalReport(_Frozen):
    """An evaluation: the dataset, how it was run, each case's runs, and the summary. JSON as it is."""

    version: Literal[1] = REPORT_VERSION
    dataset: str
    label: str = ""
    """What was evaluated (a model, a prompt version): free text, shown in the table."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    repeats: int
    concurrency: int
    cases: tuple[CaseReport, ...]
    summary: Summary

    @classmethod
    def build(
        cls, *, dataset: str, label: str, repeats: int, concurrency: int, cases: Sequence[CaseReport]
    ) -> EvalReport:
        """A report over `cases`, its summary worked out from them."""
        return cls(
            dataset=dataset,
            label=label,
            repeats=repeats,
            concurrency=concurrency,
            cases=tuple(cases),
            summary=_summarize(cases, repeats),
        )

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        """Read a report that `save` wrote.

        Raises:
            UsageError: the file is missing, not JSON, from another report version, or edited into
                something that does not validate.
        """
        path = Path(path)
        text = read_file(path, "the report")
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise UsageError(
                f"{path} is not an agentkit eval report (version {REPORT_VERSION}): {where}: {first['msg']}"
            ) from None

    def save(self, path: str | Path) -> None:
        """Write the report as JSON."""
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @property
    def passed(self) -> bool:
        """Every run passed."""
        return self.summary.passed_runs == self.summary.runs

    def case(self, name: str) -> CaseReport:
        """The report of the case named `name`."""
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(name)

    def table(self) -> str:
        """The report as a table for a terminal: a line per case, then the summary."""
        return _table(self)


def read_file(path: Path, what: str) -> str:
    """The text of `path`; a `UsageError` naming `what` it should have been where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {what} {str(path)!r}: {error.strerror or error}") from None


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def _summarize(cases: Sequence[CaseReport], repeats: int) -> Summary:
    runs = [r for c in cases for r in c.runs]
    count = len(runs)
    per_repeat = []
    for repeat in range(repeats):
        these = [r for c in cases for r in c.runs if r.repeat == repeat]
        if these:
            per_repeat.append(sum(r.passed for r in these) / len(these))
    seconds = [r.seconds for r in runs]
    outcomes = Counter(r.outcome.value if r.outcome is not None else "raised" for r in runs)
    input_tokens = sum(r.input_tokens for r in runs)
    output_tokens = sum(r.output_tokens for r in runs)
    passed = sum(r.passed for r in runs)
    costs = [r.cost for r in runs if r.cost is not None]
    cost = sum(costs, Decimal(0)) if runs and len(costs) == count else None

    def rate(n: int) -> float:
        return n / count if count else 0.0

    return Summary(
        cases=len(cases),
        runs=count,
        passed_runs=passed,
        pass_rate=rate(passed),
        pass_rate_min=min(per_repeat, default=0.0),
        pass_rate_max=max(per_repeat, default=0.0),
        cases_passed=sum(c.passed for c in cases),
        outcomes=dict(sorted(outcomes.items())),
        ended_by_executor_rate=rate(sum(r.ended_by_executor for r in runs)),
        stalemate_rate=rate(outcomes.get(Outcome.STALEMATE.value, 0)),
        error_rate=rate(outcomes.get(Outcome.ERROR.value, 0) + outcomes.get("raised", 0)),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tokens_per_run=(input_tokens + output_tokens) / count if count else 0.0,
        seconds_mean=statistics.fmean(seconds) if seconds else 0.0,
        seconds_p50=_percentile(seconds, 0.5),
        seconds_p95=_percentile(seconds, 0.95),
        proposal_digests=tuple(sorted({p.digest for r in runs for p in r.proposals})),
        cost=cost,
        cost_per_run=None if cost is None else cost / count,
    )


def _table(report: EvalReport) -> str:
    header = ("case", "pass", "outcome", "stop", "rounds", "tokens", "seconds", "failed checks")
    rows: list[tuple[str, ...]] = []
    for case in report.cases:
        outcomes = Counter(r.outcome.value if r.outcome else "raised" for r in case.runs)
        stops = Counter(r.stop_reason.value if r.stop_reason else "-" for r in case.runs)
        failed = dict.fromkeys(
            f"{c.name}: {c.error or c.reason}" if (c.error or c.reason) else c.name
            for r in case.runs
            for c in r.failed_checks
        )
        raised = dict.fromkeys(f"raised {r.error}" for r in case.runs if r.outcome is None)
        rows.append(
            (
                case.name,
                f"{sum(r.passed for r in case.runs)}/{len(case.runs)}",
                _most(outcomes),
                _most(stops),
                f"{statistics.fmean(r.rounds for r in case.runs):.3g}",
                f"{round(statistics.fmean(r.tokens for r in case.runs)):,}",
                f"{statistics.fmean(r.seconds for r in case.runs):.2f}",
                "; ".join([*raised, *failed])[:120],
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in (header, *rows)]
    s = report.summary
    label = f" · {report.label}" if report.label else ""
    spread = f" (repeats {s.pass_rate_min:.0%}-{s.pass_rate_max:.0%})" if report.repeats > 1 else ""
    outcomes_line = ", ".join(f"{name} {n}" for name, n in s.outcomes.items())
    return "\n".join(
        [
            f"dataset {report.dataset} · {s.cases} cases x {report.repeats} repeat(s){label}",
            "",
            *lines,
            "",
            f"passed {s.passed_runs}/{s.runs} runs ({s.pass_rate:.0%}){spread}, {s.cases_passed}/{s.cases} cases",
            f"outcomes: {outcomes_line}; the executor ended {s.ended_by_executor_rate:.0%}, "
            f"stalemate {s.stalemate_rate:.0%}, error {s.error_rate:.0%}",
            f"tokens {s.input_tokens + s.output_tokens:,} ({s.tokens_per_run:,.0f} per run); seconds per run "
            f"mean {s.seconds_mean:.2f}, p50 {s.seconds_p50:.2f}, p95 {s.seconds_p95:.2f}; "
            f"{len(s.proposal_digests)} distinct proposal(s)",
            *_cost_line(s),
        ]
    )


def _cost_line(summary: Summary) -> list[str]:
    if summary.cost is None or summary.cost_per_run is None:
        return []
    return [f"cost {_money(summary.cost)} ({_money(summary.cost_per_run)} per run)"]


def _money(value: Decimal) -> str:
    """An amount of money to four significant places past the point (`0.0123`), never in exponent form."""
    return f"{value.quantize(Decimal('0.0001')) if abs(value) >= Decimal('0.0001') else value.normalize():f}"


def _most(counts: Counter[str]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return " ".join(f"{name}:{n}" for name, n in counts.most_common())


class RegressionKind(enum.StrEnum):
    """What got worse from a baseline to a candidate."""

    CASE_FAILS = "case_fails"
    """A case that passed now fails (by majority of its runs)."""
    PASS_RATE_DROPPED = "pass_rate_dropped"
    """The pass rate fell by more than the spread seen across either report's repeats."""
    NEW_STALEMATE = "new_stalemate"
    """A case has a STALEMATE run that it never had."""
    PROPOSALS_CHANGED = "proposals_changed"
    """A case proposes other calls (the set of proposal digests differs)."""
    COST_UP = "cost_up"
    """The cost per run rose by more than the tolerance: in money where both reports priced every run, else in
    tokens per run."""


class Regression(_Frozen):
    """One regression: its kind, the case (none for the whole report), and what changed."""

    kind: RegressionKind
    case: str | None = None
    detail: str


class Comparison(_Frozen):
    """`compare`'s answer: the regressions, worst kinds first; `ok` when there are none."""

    dataset: str
    baseline: str
    candidate: str
    regressions: tuple[Regression, ...]
    improved: tuple[str, ...] = ()
    """Cases that failed in the baseline and pass in the candidate."""
    cost_per_run: tuple[Decimal, Decimal] | None = None
    """The baseline's and the candidate's cost per run in money, where both priced every run."""

    @property
    def ok(self) -> bool:
        return not self.regressions

    def text(self) -> str:
        """The comparison for a terminal: one line per regression, or that there is none."""
        head = f"compare {self.dataset}: {self.baseline or 'baseline'} -> {self.candidate or 'candidate'}"
        better = [f"improved: {', '.join(self.improved)}"] if self.improved else []
        if self.cost_per_run is not None:
            was, now = self.cost_per_run
            better.append(f"cost per run {_money(was)} -> {_money(now)}")
        if self.ok:
            return "\n".join([head, "no regressions", *better])
        lines = [f"  {r.kind.value}{f' [{r.case}]' if r.case else ''}: {r.detail}" for r in self.regressions]
        return "\n".join([head, f"{len(self.regressions)} regression(s):", *lines, *better])


def compare(
    baseline: EvalReport, candidate: EvalReport, *, cost_tolerance: float = 0.10, rate_tolerance: float = 0.0
) -> Comparison:
    """The regressions from `baseline` to `candidate`: failing cases, a pass rate dropped beyond the
    spread across repeats (plus `rate_tolerance`), new STALEMATEs, changed proposals, and tokens per
    run up by more than `cost_tolerance` (a fraction).

    Raises:
        UsageError: the reports are of different datasets, or of different cases (each named).
    """
    if cost_tolerance < 0 or rate_tolerance < 0:
        raise UsageError("the tolerances are fractions >= 0")
    if baseline.dataset != candidate.dataset:
        raise UsageError(f"the reports are of different datasets: {baseline.dataset!r} and {candidate.dataset!r}")
    base = {c.name: c for c in baseline.cases}
    cand = {c.name: c for c in candidate.cases}
    differ = sorted(
        [f"{n} (only in the baseline)" for n in base.keys() - cand.keys()]
        + [f"{n} (only in the candidate)" for n in cand.keys() - base.keys()]
        + [f"{n} (changed)" for n in base.keys() & cand.keys() if base[n].digest != cand[n].digest]
    )
    if differ:
        raise UsageError(f"the reports are of different cases of {baseline.dataset!r}: {', '.join(differ)}")
    found: list[Regression] = []
    improved: list[str] = []
    for name, was in base.items():
        now = cand[name]
        if was.passed and not now.passed:
            failed = dict.fromkeys(c.name for r in now.runs for c in r.failed_checks)
            why = f"failed: {', '.join(failed)}" if failed else "its runs raised"
            found.append(
                Regression(
                    kind=RegressionKind.CASE_FAILS,
                    case=name,
                    detail=f"{was.pass_rate:.0%} -> {now.pass_rate:.0%}; {why}",
                )
            )
        elif now.passed and not was.passed:
            improved.append(name)
        stalemates = sum(r.outcome is Outcome.STALEMATE for r in now.runs)
        if stalemates and not any(r.outcome is Outcome.STALEMATE for r in was.runs):
            found.append(
                Regression(kind=RegressionKind.NEW_STALEMATE, case=name, detail=f"{stalemates} of {len(now.runs)} runs")
            )
        if was.proposal_digests != now.proposal_digests:
            gone = sorted(was.proposal_digests - now.proposal_digests)
            new = sorted(now.proposal_digests - was.proposal_digests)
            found.append(
                Regression(
                    kind=RegressionKind.PROPOSALS_CHANGED,
                    case=name,
                    detail=f"no longer proposed {_digests(gone)}; newly proposed {_digests(new)}",
                )
            )
    b, c = baseline.summary, candidate.summary
    spread = max(b.pass_rate_max - b.pass_rate_min, c.pass_rate_max - c.pass_rate_min)
    if c.pass_rate < b.pass_rate - spread - rate_tolerance - 1e-9:
        found.append(
            Regression(
                kind=RegressionKind.PASS_RATE_DROPPED,
                detail=f"{b.pass_rate:.1%} -> {c.pass_rate:.1%} (spread across repeats {spread:.1%})",
            )
        )
    money = None if b.cost_per_run is None or c.cost_per_run is None else (b.cost_per_run, c.cost_per_run)
    found.extend(_cost_up(b, c, money, cost_tolerance))
    order = list(RegressionKind)
    found.sort(key=lambda r: order.index(r.kind))
    return Comparison(
        dataset=baseline.dataset,
        baseline=baseline.label,
        candidate=candidate.label,
        regressions=tuple(found),
        improved=tuple(improved),
        cost_per_run=money,
    )


def _cost_up(b: Summary, c: Summary, money: tuple[Decimal, Decimal] | None, tolerance: float) -> list[Regression]:
    """The cost per run risen beyond `tolerance`: in money where both reports priced every run, else in tokens."""
    if money is not None:
        was, now = money
        if was == 0 < now:  # a free baseline (a local model priced at 0): any spend is a rise no tolerance covers
            return [Regression(kind=RegressionKind.COST_UP, detail=f"cost per run {_money(was)} -> {_money(now)}")]
        if was > 0 and now > was * (1 + Decimal(str(tolerance))):
            detail = (
                f"cost per run {_money(was)} -> {_money(now)} (+{float(now / was) - 1:.0%}, tolerance {tolerance:.0%})"
            )
            return [Regression(kind=RegressionKind.COST_UP, detail=detail)]
        return []
    if b.tokens_per_run > 0 and c.tokens_per_run > b.tokens_per_run * (1 + tolerance):
        detail = (
            f"tokens per run {b.tokens_per_run:,.0f} -> {c.tokens_per_run:,.0f} "
            f"(+{c.tokens_per_run / b.tokens_per_run - 1:.0%}, tolerance {tolerance:.0%})"
        )
        return [Regression(kind=RegressionKind.COST_UP, detail=detail)]
    return []


def _digests(digests: Sequence[str]) -> str:
    return ", ".join(d[:12] for d in digests) if digests else "nothing"
