"""What a case checks about a run: a verdict per check, the built-in checks, and the run they look at.

A check is a typed function from a `CaseRun` to `bool` or a `Verdict` (a pass with a
reason). The built-ins cover what agents are judged on: how the run ended, what it retrieved, what
it answered, what it proposed, and how long it took.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._outcome import Outcome, StopReason
from agentkit._proposals import ProposedAction
from agentkit._results import TieredLoopResult, ToolLoopResult
from agentkit.errors import UsageError

if TYPE_CHECKING:
    from agentkit.evals._dataset import Case

__all__ = [
    "Check",
    "CheckArg",
    "CaseRun",
    "Verdict",
    "answer_equals",
    "answer_matches",
    "as_check",
    "cites_only_retrieved",
    "ends_without_error",
    "item_key",
    "never_proposes",
    "outcome_is",
    "proposes",
    "recall_at_k",
    "retrieved_contains",
    "rounds_at_most",
    "stop_reason_is",
]

R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=Any)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A check's judgement: passed or not, and why."""

    passed: bool
    reason: str = ""
    """What was seen, in a few words (shown in the report next to a failed check)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseRun(Generic[R, Answer]):
    """One run of one case, as the checks see it."""

    case: Case[Any]
    """The case that was run."""
    result: ToolLoopResult[R, Answer]
    """The run's result."""
    repeat: int
    """Which repeat of the case this run is, from 0."""
    seconds: float
    """How long the run took."""
    key: str = "id"
    """The field of an item that identifies it (the dataset's `key`)."""

    @property
    def items(self) -> list[R]:
        """The items the run gathered."""
        return self.result.items

    @property
    def answer(self) -> Answer | None:
        """The run's typed answer, if it gave one."""
        return self.result.answer

    @property
    def proposed(self) -> list[ProposedAction[Any]]:
        """The calls the run proposed (a tiered run's; none for a plain one)."""
        result = self.result
        return list(result.proposed) if isinstance(result, TieredLoopResult) else []

    @property
    def item_ids(self) -> list[str]:
        """The items' ids (their `key` field), each once, in the order first retrieved."""
        return list(dict.fromkeys(item_key(item, self.key) for item in self.result.items))


CheckFunction = Callable[[CaseRun[R, Answer]], "bool | Verdict"]
"""A user check: a typed function of the run, returning whether it passed (or a `Verdict`)."""


@dataclass(frozen=True, slots=True)
class Check(Generic[R, Answer]):
    """A named check: the function, and the name the report shows for it."""

    name: str
    fn: Callable[[CaseRun[R, Answer]], bool | Verdict] = field(repr=False)

    def __call__(self, run: CaseRun[R, Answer]) -> Verdict:
        """Judge `run`; a bare `bool` becomes a `Verdict` without a reason."""
        verdict = self.fn(run)
        if isinstance(verdict, Verdict):
            return verdict
        if isinstance(verdict, bool):
            return Verdict(verdict)
        raise TypeError(f"check {self.name!r} returned {type(verdict).__name__}, not bool or Verdict")


CheckArg = Check[R, Answer] | Callable[[CaseRun[R, Answer]], bool | Verdict]
"""What `checks=` takes: a `Check`, or a plain function (named by its `__name__`)."""


def as_check(check: CheckArg[R, Answer]) -> Check[R, Answer]:
    """`check` as a `Check`: a plain function is named after itself."""
    if isinstance(check, Check):
        return check
    if not callable(check):
        raise UsageError(f"a check must be a Check or a function of the run, got {type(check).__name__}")
    return Check(getattr(check, "__name__", type(check).__name__), check)


def item_key(item: object, key: str) -> str:
    """An item's id: its `key` attribute or mapping entry; a plain string is its own id."""
    if isinstance(item, str):
        return item
    value = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
    if value is None:
        raise UsageError(f"a {type(item).__name__} item has no {key!r} field to identify it (the dataset's key)")
    return str(value)


def _field(answer: object, path: str) -> object:
    """The value at `path` (dotted) in an answer model or mapping; raises `LookupError` if absent."""
    value = answer
    for part in path.split("."):
        if isinstance(value, Mapping):
            if part not in value:
                raise LookupError(path)
            value = value[part]
        elif isinstance(value, BaseModel) and part in type(value).model_fields:
            value = getattr(value, part)
        else:
            raise LookupError(path)
    return value


def _plain(value: object) -> object:
    """A value as JSON sees it, so an answer's enum or model compares equal to the data written in a file."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    return value


def outcome_is(*outcomes: Outcome) -> Check[Any, Any]:
    """The run's outcome is one of `outcomes`."""
    wanted = frozenset(outcomes)
    names = " or ".join(o.value for o in outcomes)

    def check(run: CaseRun[Any, Any]) -> Verdict:
        got = run.result.outcome
        return Verdict(got in wanted, f"outcome {got.value} (stop: {run.result.stop_reason.value})")

    return Check(f"outcome is {names}", check)


def ends_without_error() -> Check[Any, Any]:
    """The run's outcome is not `Outcome.ERROR` (what a case that states no outcome or stop reason expects)."""

    def check(run: CaseRun[Any, Any]) -> Verdict:
        result = run.result
        if result.outcome is Outcome.ERROR:
            return Verdict(False, f"ended in an error (stop: {result.stop_reason.value}): {result.error}")
        return Verdict(True, "")

    return Check("ends without an error", check)


def stop_reason_is(*reasons: StopReason) -> Check[Any, Any]:
    """The run stopped for one of `reasons`."""
    wanted = frozenset(reasons)
    names = " or ".join(r.value for r in reasons)

    def check(run: CaseRun[Any, Any]) -> Verdict:
        return Verdict(run.result.stop_reason in wanted, f"stopped: {run.result.stop_reason.value}")

    return Check(f"stop reason is {names}", check)


def retrieved_contains(*ids: str) -> Check[Any, Any]:
    """Every one of `ids` is among the items the run gathered (by the dataset's key)."""

    def check(run: CaseRun[Any, Any]) -> Verdict:
        have = set(run.item_ids)
        missing = [i for i in ids if i not in have]
        return Verdict(not missing, f"missing {', '.join(missing)}" if missing else f"all {len(ids)} retrieved")

    return Check(f"retrieved {', '.join(ids)}", check)


def recall_at_k(ids: Sequence[str], k: int, *, minimum: float = 1.0) -> Check[Any, Any]:
    """At least `minimum` of `ids` are among the first `k` distinct items the run gathered."""
    if k < 1:
        raise UsageError(f"recall@k needs k >= 1, got {k}")
    if not 0.0 <= minimum <= 1.0:
        raise UsageError(f"recall@k's minimum is a fraction from 0 to 1, got {minimum}")
    if not ids:
        raise UsageError("recall@k needs the ids that should be retrieved")
    wanted = tuple(dict.fromkeys(ids))

    def check(run: CaseRun[Any, Any]) -> Verdict:
        top = set(run.item_ids[:k])
        recall = sum(i in top for i in wanted) / len(wanted)
        return Verdict(recall >= minimum, f"recall@{k} {recall:.2f}")

    return Check(f"recall@{k} >= {minimum:g}", check)


def answer_equals(path: str, value: object) -> Check[Any, Any]:
    """The answer's field at `path` (dotted for nested fields) equals `value` (compared as JSON)."""
    expected = _plain(value)

    def check(run: CaseRun[Any, Any]) -> Verdict:
        if run.answer is None:
            return Verdict(False, "no answer")
        try:
            got = _plain(_field(run.answer, path))
        except LookupError:
            return Verdict(False, f"the answer has no field {path!r}")
        return Verdict(got == expected, f"{path} = {got!r}")

    return Check(f"answer.{path} == {expected!r}", check)


def answer_matches(path: str, pattern: str) -> Check[Any, Any]:
    """The answer's text field at `path` matches the regular expression `pattern` (searched, any case)."""
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as error:
        raise UsageError(f"answer.{path}: the pattern {pattern!r} is not a regular expression: {error}") from None

    def check(run: CaseRun[Any, Any]) -> Verdict:
        if run.answer is None:
            return Verdict(False, "no answer")
        try:
            got = _field(run.answer, path)
        except LookupError:
            return Verdict(False, f"the answer has no field {path!r}")
        if not isinstance(got, str):
            return Verdict(False, f"{path} is a {type(got).__name__}, not text")
        return Verdict(compiled.search(got) is not None, f"{path} = {got[:80]!r}")

    return Check(f"answer.{path} ~ /{pattern}/", check)


def proposes(
    tool: str, *, args: Mapping[str, object] | None = None, where: Callable[[Any], bool] | None = None
) -> Check[Any, Any]:
    """The run proposed a call of `tool` whose args hold `args` (field by field) and satisfy `where`."""
    expected = {k: _plain(v) for k, v in (args or {}).items()}
    described = ", ".join(f"{k}={v!r}" for k, v in expected.items())
    suffix = "" if where is None else f" where {getattr(where, '__name__', 'a predicate')}"

    def check(run: CaseRun[Any, Any]) -> Verdict:
        calls = [p for p in run.proposed if p.tool_name == tool]
        for call in calls:
            dumped = call.args.model_dump(mode="json")
            if all(dumped.get(k) == v for k, v in expected.items()) and (where is None or where(call.args)):
                return Verdict(True, f"proposed {tool} ({call.digest[:12]})")
        seen = ", ".join(p.tool_name for p in run.proposed) or "nothing"
        return Verdict(False, f"{len(calls)} {tool} proposal(s) but none matched" if calls else f"proposed {seen}")

    return Check(f"proposes {tool}({described}){suffix}", check)


def never_proposes(tool: str) -> Check[Any, Any]:
    """The run proposed no call of `tool`."""

    def check(run: CaseRun[Any, Any]) -> Verdict:
        count = sum(p.tool_name == tool for p in run.proposed)
        return Verdict(count == 0, f"proposed {tool} {count} time(s)" if count else "")

    return Check(f"never proposes {tool}", check)


def rounds_at_most(n: int) -> Check[Any, Any]:
    """The run took at most `n` rounds."""
    if n < 1:
        raise UsageError(f"rounds_at_most needs n >= 1, got {n}")

    def check(run: CaseRun[Any, Any]) -> Verdict:
        return Verdict(run.result.rounds <= n, f"{run.result.rounds} rounds")

    return Check(f"rounds <= {n}", check)


def cites_only_retrieved(*paths: str) -> Check[Any, Any]:
    """Each id the answer cites in the fields at `paths` (an id, or a list of ids) is one the run retrieved."""
    if not paths:
        raise UsageError("cites_only_retrieved needs the answer fields that hold the cited ids")

    def check(run: CaseRun[Any, Any]) -> Verdict:
        if run.answer is None:
            return Verdict(False, "no answer")
        have = set(run.item_ids)
        cited: list[str] = []
        for path in paths:
            try:
                value = _plain(_field(run.answer, path))
            except LookupError:
                return Verdict(False, f"the answer has no field {path!r}")
            cited.extend(str(v) for v in (value if isinstance(value, list) else [value]) if v is not None)
        stray = [c for c in cited if c not in have]
        if stray:
            return Verdict(False, f"cites {', '.join(stray)}, never retrieved")
        return Verdict(True, f"cites {', '.join(cited) or 'nothing'}")

    return Check(f"cites only retrieved ({', '.join(paths)})", check)
