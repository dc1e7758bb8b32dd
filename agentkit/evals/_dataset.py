"""A dataset: named cases, each a ctx for the run and what is expected of it.

Expectations are data (`Expect`), so a dataset can live in a JSON file next to the tests; a
case written in Python may add checks of its own (typed functions of the run).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from agentkit._outcome import Outcome, StopReason
from agentkit.errors import UsageError
from agentkit.evals import _checks as builtin
from agentkit.evals._checks import Check, CheckArg
from agentkit.evals._report import read_file

__all__ = ["Case", "Dataset", "Expect", "ExpectedProposal"]

Ctx = TypeVar("Ctx")
C = TypeVar("C")


class ExpectedProposal(BaseModel):
    """A call the run should propose: the tool, and args it should hold (field by field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    args: dict[str, JsonValue] = Field(default_factory=dict)


class Expect(BaseModel):
    """What a case expects of its run, as data; each field set becomes one built-in check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outcome: Outcome | list[Outcome] | None = None
    """The run's outcome (or one of several)."""
    stop_reason: StopReason | list[StopReason] | None = None
    """Why the run stopped (or one of several reasons)."""
    retrieved: list[str] = Field(default_factory=list)
    """Ids (the dataset's `key`) the run must gather: all of them, or `min_recall` of them
    within the first `recall_at_k` items."""
    recall_at_k: int | None = Field(default=None, ge=1)
    min_recall: float = Field(default=1.0, ge=0.0, le=1.0)
    answer_equals: dict[str, JsonValue] = Field(default_factory=dict)
    """Answer fields (dotted paths) and the values they must equal."""
    answer_matches: dict[str, str] = Field(default_factory=dict)
    """Answer text fields (dotted paths) and a regular expression each must match (any case)."""
    proposes: list[ExpectedProposal] = Field(default_factory=list)
    """Calls the run must propose."""
    never_proposes: list[str] = Field(default_factory=list)
    """Tools the run must never propose."""
    rounds_at_most: int | None = Field(default=None, ge=1)
    cites_only_retrieved: list[str] = Field(default_factory=list)
    """Answer fields holding cited ids (one or a list): each must be an id the run retrieved."""

    def checks(self) -> list[Check[Any, Any]]:
        """The built-in checks these expectations stand for, in field order. A case that states neither an
        outcome nor a stop reason expects a run that ended without an error: a run that never reached its model
        does not pass a case by what it did not do (`never_proposes`, say)."""
        made: list[Check[Any, Any]] = []
        if self.outcome is not None:
            made.append(builtin.outcome_is(*_listed(self.outcome)))
        elif self.stop_reason is None:
            made.append(builtin.ends_without_error())
        if self.stop_reason is not None:
            made.append(builtin.stop_reason_is(*_listed(self.stop_reason)))
        if self.recall_at_k is not None:
            made.append(builtin.recall_at_k(self.retrieved, self.recall_at_k, minimum=self.min_recall))
        elif self.retrieved:
            made.append(builtin.retrieved_contains(*self.retrieved))
        made.extend(builtin.answer_equals(path, value) for path, value in self.answer_equals.items())
        made.extend(builtin.answer_matches(path, pattern) for path, pattern in self.answer_matches.items())
        made.extend(builtin.proposes(p.tool, args=p.args) for p in self.proposes)
        made.extend(builtin.never_proposes(tool) for tool in self.never_proposes)
        if self.rounds_at_most is not None:
            made.append(builtin.rounds_at_most(self.rounds_at_most))
        if self.cites_only_retrieved:
            made.append(builtin.cites_only_retrieved(*self.cites_only_retrieved))
        return made


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


@dataclass(frozen=True, kw_only=True, slots=True)
class Case(Generic[Ctx]):
    """One case: the ctx a run is given, and what is expected of the run."""

    name: str
    """Unique within its dataset; reports and comparisons match cases by it."""
    ctx: Ctx
    """What the run is given (`loop.run(ctx)`)."""
    expect: Expect = field(default_factory=Expect)
    checks: tuple[CheckArg[Any, Any], ...] = ()
    """Checks of this case's own, beside its expectations and the dataset's checks."""
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    """Anything a check or a reader wants to know about the case (a topic, a difficulty)."""

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise UsageError("a case needs a name")
        try:
            _ = self.expect.checks()
        except UsageError as error:
            raise UsageError(f"case {self.name!r}: {error}") from None
        for check in self.checks:
            _ = builtin.as_check(check)


class _CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    ctx: Any
    expect: Expect = Field(default_factory=Expect)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class _DatasetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    key: str = "id"
    cases: list[_CaseFile]


@dataclass(frozen=True, kw_only=True, slots=True, init=False)
class Dataset(Generic[Ctx]):
    """Named cases, and the checks every case's run gets.

    Example:
        >>> questions = Dataset(
        ...     name="corpus-questions",
        ...     cases=[Case(name="voyager", ctx="When was Voyager 1 launched?",
        ...                 expect=Expect(retrieved=["space-01"], answer_matches={"answer": "1977"}))],
        ... )
    """

    name: str
    cases: tuple[Case[Ctx], ...]
    key: str = "id"
    """The field of an item that identifies it, for `retrieved` and citations (a `str` item is its own id)."""
    checks: tuple[CheckArg[Any, Any], ...] = ()
    """Checks run on every case."""

    def __init__(
        self,
        *,
        name: str,
        cases: Iterable[Case[Ctx]],
        key: str = "id",
        checks: Sequence[CheckArg[Any, Any]] = (),
    ) -> None:
        cases = tuple(cases)
        if not name.strip():
            raise UsageError("a dataset needs a name")
        if not cases:
            raise UsageError(f"dataset {name!r} has no cases")
        counts = Counter(c.name for c in cases)
        twice = [name for name, n in counts.items() if n > 1]
        if twice:
            raise UsageError(f"dataset {name!r} names more than one case {', '.join(map(repr, twice))}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cases", cases)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "checks", tuple(checks))
        for check in self.checks:
            _ = builtin.as_check(check)

    @overload
    @classmethod
    def from_file(cls, path: str | Path, ctx: type[C]) -> Dataset[C]: ...
    @overload
    @classmethod
    def from_file(cls, path: str | Path) -> Dataset[Any]: ...
    @classmethod
    def from_file(cls, path: str | Path, ctx: type[Any] | None = None) -> Dataset[Any]:
        """Load a dataset from a JSON file, each case's `ctx` validated as `ctx` (any JSON without one).

        The file holds `{"name": ..., "key": "id", "cases": [{"name", "ctx", "expect", "metadata"}]}`.

        Raises:
            UsageError: the file is missing or not JSON, or a case does not validate (the message
                names the case and the field).
        """
        path = Path(path)
        text = read_file(path, "the dataset")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: not JSON ({error})") from None
        return cls.from_data(data, ctx, source=str(path))

    @overload
    @classmethod
    def from_data(cls, data: object, ctx: type[C], *, source: str = "dataset") -> Dataset[C]: ...
    @overload
    @classmethod
    def from_data(cls, data: object, ctx: None = None, *, source: str = "dataset") -> Dataset[Any]: ...
    @classmethod
    def from_data(cls, data: object, ctx: type[Any] | None = None, *, source: str = "dataset") -> Dataset[Any]:
        """`from_file` for data already parsed (a dict as the file holds)."""
        try:
            parsed = _DatasetFile.model_validate(data)
        except ValidationError as error:
            raise UsageError(_invalid(source, data, error)) from None
        adapter: TypeAdapter[Any] = TypeAdapter(ctx if ctx is not None else Any)
        cases: list[Case[Any]] = []
        for index, case in enumerate(parsed.cases):
            try:
                value = adapter.validate_python(case.ctx)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(p) for p in ("ctx", *first["loc"]))
                raise UsageError(f"{source}: case {case.name!r} (cases[{index}]): {where}: {first['msg']}") from None
            try:
                cases.append(Case(name=case.name, ctx=value, expect=case.expect, metadata=case.metadata))
            except UsageError as error:
                raise UsageError(f"{source}: {error}") from None
        return cls(name=parsed.name, cases=cases, key=parsed.key)

    def to_data(self) -> dict[str, Any]:
        """The dataset as `from_data` reads it (each ctx as JSON); Python checks are not data and stay out."""
        return {
            "name": self.name,
            "key": self.key,
            "cases": [
                {
                    "name": c.name,
                    "ctx": _json(c.ctx),
                    "expect": c.expect.model_dump(mode="json", exclude_defaults=True),
                    "metadata": dict(c.metadata),
                }
                for c in self.cases
            ],
        }

    def case_digest(self, case: Case[Ctx]) -> str:
        """A digest of what a case is (its ctx and expectations): two reports compare only over equal cases."""
        text = json.dumps(
            {"ctx": _json(case.ctx), "expect": case.expect.model_dump(mode="json", exclude_defaults=True)},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _json(value: object) -> Any:
    return TypeAdapter(type(value)).dump_python(value, mode="json")


def _invalid(source: str, data: object, error: ValidationError) -> str:
    """A dataset's validation error naming the case (by name where it has one) and the field."""
    lines: list[str] = []
    for problem in error.errors()[:5]:
        loc = list(problem["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
            name = _case_name(data, loc[1])
            field_path = ".".join(str(p) for p in loc[2:]) or "(the case)"
            label = f"case {name!r} (cases[{loc[1]}])" if name else f"cases[{loc[1]}]"
            where = f"{label}: {field_path}"
        lines.append(f"{where}: {problem['msg']}")
    more = len(error.errors()) - len(lines)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{source} does not validate: " + "; ".join(lines) + tail


def _case_name(data: object, index: int) -> str | None:
    if not isinstance(data, dict):
        return None
    cases = data.get("cases")
    if isinstance(cases, list) and index < len(cases) and isinstance(cases[index], dict):
        name = cases[index].get("name")
        return name if isinstance(name, str) else None
    return None
