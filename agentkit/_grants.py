"""Standing grants: a human's approval, given ahead, of calls of one tool whose args meet stated constraints.

A `Grant` is data (stored, listed, revoked): the tool, one constraint per args field it limits
(`Equals`, `OneOf`, `Prefix`, `PathPrefix`, `Range`), how many calls it may approve, until when,
who gave it and why. A proposal that matches a live grant is approved by it, recorded as `grant:<id>`,
counts one use, and runs exactly once, as any approved call does. A grant never raises a call's
tier: an `IRREVERSIBLE` call is granted only by a grant that says `allow_irreversible=True`.

In process, `Grants` holds grants and counts their uses (`run_tool_loop_tiered(..., grants=...)`);
the journal keeps its own, counted in the database (`journal.grant`).
"""

from __future__ import annotations

import os
import posixpath
import threading
import unicodedata
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from agentkit._proposals import ProposedAction, finite
from agentkit._state import json_text
from agentkit._tiers import Tier
from agentkit._tools import AnyTool
from agentkit._trust import ArgOrigin
from agentkit.errors import UsageError

__all__ = ["Constraint", "Equals", "Grant", "Grants", "OneOf", "PathPrefix", "Prefix", "Range", "grant_actor"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _same(a: object, b: object) -> bool:
    # JSON text, not ==: in Python True == 1 == 1.0, and a grant for 1 must not allow true.
    return json_text(a) == json_text(b)


_NOT_FINITE = "NaN and infinity have no JSON form (the journal would keep them as null)"


class Equals(BaseModel):
    """The field's value is exactly `value` (as JSON: `1` is not `1.0` nor `true`; NaN and infinity,
    which JSON cannot hold, are refused)."""

    model_config = _FROZEN
    kind: Literal["equals"] = "equals"
    value: JsonValue

    @model_validator(mode="after")
    def _json(self) -> Equals:
        if not finite(self.value):
            raise ValueError(f"an Equals value is finite: {_NOT_FINITE}; got {self.value!r}")
        return self

    def allows(self, value: object) -> bool:
        return _same(value, self.value)


class OneOf(BaseModel):
    """The field's value is one of `values` (each compared as `Equals` does; NaN and infinity are refused)."""

    model_config = _FROZEN
    kind: Literal["one_of"] = "one_of"
    values: tuple[JsonValue, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _json(self) -> OneOf:
        if not finite(self.values):
            raise ValueError(f"a OneOf's values are finite: {_NOT_FINITE}; got {list(self.values)!r}")
        return self

    def allows(self, value: object) -> bool:
        return any(_same(value, allowed) for allowed in self.values)


class Prefix(BaseModel):
    """The field is text that starts with `prefix`, compared as strings: for paths use `PathPrefix`.

    `Prefix(prefix="/srv/data/")` allows `"/srv/data/../../etc/passwd"`: the text starts with the
    prefix, and the path it names is outside. `PathPrefix` compares a path by its segments and refuses
    `..`.
    """

    model_config = _FROZEN
    kind: Literal["prefix"] = "prefix"
    prefix: str

    @model_validator(mode="after")
    def _not_empty(self) -> Prefix:
        if not self.prefix:
            raise ValueError(
                "a prefix is not empty (every text starts with ''); to allow any value, leave the field out"
            )
        return self

    def allows(self, value: object) -> bool:
        return isinstance(value, str) and value.startswith(self.prefix)


def _lookalikes(text: str) -> str:
    # Characters NFKC leaves alone that still read as a separator or a dot to a person or a lax layer.
    return text.translate(_LOOKALIKES)


_LOOKALIKES = str.maketrans(
    {
        "\u2215": "/",
        "\u2044": "/",
        "\u29f8": "/",
        "\u29f5": "\\",
        "\u29f9": "\\",
        "\u2216": "\\",
        "\u3002": ".",
        "\uff61": ".",
    }
)

_READINGS: tuple[Callable[[str], str], ...] = (
    lambda text: text.replace("\\", "/"),  # a layer that takes a backslash as a separator
    urllib.parse.unquote,  # one that percent-decodes (once per step: %252e is read as %2e, then as .)
    lambda text: unicodedata.normalize("NFKC", text),  # one that folds compatibility forms: U+FF0F is /
    _lookalikes,
)
_MOST_READINGS = 64


def _readings(text: str) -> set[str] | None:
    """`text` and what every chain of `_READINGS` makes of it; `None`: too many to check (fail closed)."""
    seen, frontier = {text}, {text}
    while frontier:
        frontier = {read(form) for form in frontier for read in _READINGS} - seen
        seen |= frontier
        if len(seen) > _MOST_READINGS:
            return None
    return seen


def _segments(path: str) -> tuple[str, ...] | None:
    """`path`'s segments, empty and `.` ones dropped; `None` for a path with a `..` segment or a NUL."""
    if "\x00" in path:
        return None
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    return None if ".." in parts else parts


def _within(path: str, root: tuple[str, ...], absolute: bool) -> bool:
    # A leading // (exactly two) is implementation-defined in POSIX; it is refused rather than guessed.
    if not path or path.startswith("/") is not absolute or (path.startswith("//") and not path.startswith("///")):
        return False
    parts = _segments(path)
    return parts is not None and parts[: len(root)] == root


class PathPrefix(BaseModel):
    """The field is a POSIX path inside the folder `prefix` (or that folder itself), checked by segments.

    The value is read lexically, as the OS reads it: `//` and `.` segments collapse. It is refused
    when it has a `..` segment anywhere (after a symlink, `a/..` is not where its text says, so no
    `..` is resolved by text), a NUL, a leading `//`, is relative where `prefix` is absolute (or the
    reverse), or is empty. Backslashes, percent signs and Unicode look-alikes (U+FF0F, U+2215, U+2024
    ...) are plain characters of a name to POSIX, never separators; yet the value is allowed only if
    it is also inside under every reading a layer below might make of it: backslashes as separators,
    percent-decoded (any number of times), NFKC-folded and look-alikes taken for `/`, `\\` and `.`.
    So `/srv/data/%2e%2e/x` and `/srv/data/\u2025/x` are refused. The tool still gets the value as
    written, and should open it as written.

    `resolve_symlinks=True` also requires the `os.path.realpath` of the path, under each of those
    readings, to lie inside the prefix's, on the filesystem of the process that applies the grant,
    when it applies it; `prefix` must then be absolute. A link changed after that check is the tool's
    to guard against (`O_NOFOLLOW`, `openat2` with `RESOLVE_BENEATH`).
    """

    model_config = _FROZEN
    kind: Literal["path_prefix"] = "path_prefix"
    prefix: str
    """The folder, POSIX style (`/srv/data` and `/srv/data/` are one folder)."""
    resolve_symlinks: bool = False
    """Also require the value's real path (symlinks followed), under every reading, to lie inside the prefix's."""

    @model_validator(mode="after")
    def _plain(self) -> PathPrefix:
        prefix = self.prefix
        if not prefix or _segments(prefix) is None or (prefix.startswith("//") and not prefix.startswith("///")):
            raise ValueError(
                f"a path prefix is a POSIX folder without '..' segments, NUL or a leading '//'; got {prefix!r}"
            )
        if _readings(prefix) != {prefix}:
            raise ValueError(
                f"a path prefix is written plainly: no backslash, percent sign, or Unicode compatibility or "
                f"look-alike character (write it in NFKC form); got {prefix!r}"
            )
        if self.resolve_symlinks and not prefix.startswith("/"):
            raise ValueError(
                f"resolve_symlinks needs an absolute prefix (a relative one depends on the cwd); got {prefix!r}"
            )
        return self

    def allows(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        absolute, root = self.prefix.startswith("/"), _segments(self.prefix) or ()
        readings = _readings(value)
        if readings is None or not all(_within(form, root, absolute) for form in readings):
            return False
        return not self.resolve_symlinks or self._resolves_inside(readings)

    def _resolves_inside(self, readings: set[str]) -> bool:
        # Every reading, not the value alone: a layer that takes `out\\key` as `out/key` follows the link `out`.
        try:
            real_root = os.path.realpath(self.prefix)
            return all(posixpath.commonpath([os.path.realpath(form), real_root]) == real_root for form in readings)
        except (OSError, ValueError):
            return False  # a path the filesystem cannot resolve is not shown to be inside


class Range(BaseModel):
    """The field is a number (not a boolean) within `[min, max]`; an open end is `None` (never infinity,
    nor NaN: JSON cannot hold them)."""

    model_config = _FROZEN
    kind: Literal["range"] = "range"
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Range:
        if not finite([self.min, self.max]):
            raise ValueError(
                f"a range's ends are finite numbers: {_NOT_FINITE}; leave an open end None; "
                f"got min={self.min!r}, max={self.max!r}"
            )
        if self.min is None and self.max is None:
            raise ValueError("a range needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"a range's min ({self.min}) is above its max ({self.max})")
        return self

    def allows(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


Constraint = Annotated[Equals | OneOf | Prefix | PathPrefix | Range, Field(discriminator="kind")]
"""One args field's constraint in a grant."""


def grant_actor(grant_id: str) -> str:
    """Who an approval by a grant is recorded as: `grant:<id>`."""
    return f"grant:{grant_id}"


class Grant(BaseModel):
    """A standing approval of calls of one tool whose args meet `where`; frozen and JSON round-trippable.

    Fields `where` does not name may hold anything: a grant without constraints allows every call
    of the tool, up to `max_uses`.
    """

    model_config = _FROZEN

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    """The grant's id; its approvals are recorded as `grant:<id>`."""
    tool_name: str
    """The one tool whose calls it approves."""
    where: dict[str, Constraint] = Field(default_factory=dict)
    """Per args field, what its value must be."""
    max_uses: int | None = Field(ge=1)
    """How many calls it approves at most; `None`: no limit (say so explicitly)."""
    expires_at: datetime | None = None
    """After this (UTC), it approves nothing; `None`: no expiry."""
    granted_by: str
    """Who gave it."""
    reason: str
    """Why, for the record."""
    allow_irreversible: bool = False
    """Whether it may approve `IRREVERSIBLE` calls (it never does otherwise)."""
    granted_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    from_untrusted: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Per args field, the tools whose untrusted results its value may have come from. A grant never
    approves a call one of whose argument values first appeared in untrusted content (the proposal's
    `evidence.provenance.from_untrusted`) unless it allows that field from that tool here, or pins the
    field's value itself (`Equals`, `OneOf`): the provenance policy is widened only explicitly, field by
    field (see docs/provenance.md)."""

    @model_validator(mode="after")
    def _complete(self) -> Grant:
        if not self.tool_name.strip():
            raise ValueError("a grant names the tool whose calls it approves (tool_name); got none")
        for name, text in (("granted_by", self.granted_by), ("reason", self.reason)):
            if not text.strip():
                raise ValueError(f"a grant says {'who gave it' if name == 'granted_by' else 'why'} ({name}); got none")
        if self.expires_at is not None and self.expires_at.tzinfo is None:
            raise ValueError("expires_at must carry a time zone (UTC, say)")
        for name, tools in self.from_untrusted.items():
            if not tools or not all(isinstance(t, str) and t.strip() for t in tools):
                raise ValueError(
                    f"from_untrusted[{name!r}] names the tools its value may come from; got {tools!r} (a grant "
                    "allows untrusted values only from the tools it names)"
                )
        return self

    @classmethod
    def of(
        cls,
        tool: AnyTool,
        *,
        where: Mapping[str, Equals | OneOf | Prefix | PathPrefix | Range] | None = None,
        max_uses: int | None,
        granted_by: str,
        reason: str,
        expires_at: datetime | None = None,
        allow_irreversible: bool = False,
        from_untrusted: Mapping[str, Iterable[str]] | None = None,
    ) -> Grant:
        """A grant for `tool`'s calls, checked against it (`check`).

        Raises:
            UsageError: a missing tool name, who or why; a constraint on a field the tool's args type
                lacks; an irreversible tool without `allow_irreversible=True`.
        """
        try:
            made = cls(
                tool_name=tool.name,
                where=dict(where or {}),
                max_uses=max_uses,
                granted_by=granted_by,
                reason=reason,
                expires_at=expires_at,
                allow_irreversible=allow_irreversible,
                from_untrusted={name: tuple(tools) for name, tools in (from_untrusted or {}).items()},
            )
        except ValidationError as invalid:
            raise UsageError(f"invalid grant for {tool.name!r}: {invalid}") from None
        made.check(tool)
        return made

    def check(self, tool: AnyTool) -> None:
        """Refuse a grant that could not mean what it says for `tool`.

        Raises:
            UsageError: `tool` is another tool; `where` constrains a field its args type lacks; the
                tool is irreversible and the grant does not say `allow_irreversible=True`.
        """
        if tool.name != self.tool_name:
            raise UsageError(f"grant {self.id} is for tool {self.tool_name!r}, not {tool.name!r}")
        fields = tool.args_type.model_fields
        unknown = sorted(name for name in {*self.where, *self.from_untrusted} if name not in fields)
        if unknown:
            raise UsageError(
                f"grant {self.id} constrains {', '.join(map(repr, unknown))}, which {tool.args_type.__name__} "
                f"(the args of {tool.name!r}) does not declare; its fields: {', '.join(sorted(fields))}"
            )
        tier = getattr(tool, "tier", None)
        if tier is Tier.IRREVERSIBLE and not self.allow_irreversible:
            raise UsageError(
                f"grant {self.id}: {tool.name!r} is Tier.IRREVERSIBLE; a grant approves irreversible calls only "
                "with allow_irreversible=True"
            )

    def live(self, at: datetime, uses: int) -> bool:
        """Whether it still approves anything: not expired at `at` and, after `uses`, not spent."""
        expired = self.expires_at is not None and at >= self.expires_at
        return not expired and (self.max_uses is None or uses < self.max_uses)

    def matches(self, proposal: ProposedAction[Any]) -> bool:
        """Whether `proposal` is a call this grant covers (its tool, tier and every constrained field).

        Whether it is still live is `live`'s question.
        """
        if proposal.tool_name != self.tool_name:
            return False
        if proposal.tier is Tier.IRREVERSIBLE and not self.allow_irreversible:
            return False
        args = proposal.args.model_dump(mode="json")
        if not all(name in args and rule.allows(args[name]) for name, rule in self.where.items()):
            return False
        return all(self.allows_origin(mark) for mark in untrusted_marks(proposal))

    def allows_origin(self, mark: ArgOrigin) -> bool:
        """Whether this grant explicitly allows an argument value that first appeared in untrusted content:
        its field is pinned by an `Equals` or `OneOf` constraint, or `from_untrusted` names the field with the
        tool it came from."""
        field = mark.path.split(".", 1)[0]
        if isinstance(self.where.get(field), Equals | OneOf):
            return True
        return mark.origin.tool_name in self.from_untrusted.get(field, ())


def untrusted_marks(proposal: ProposedAction[Any]) -> tuple[ArgOrigin, ...]:
    """The argument values of a proposal that first appeared in untrusted content (none recorded: empty)."""
    evidence = proposal.evidence
    if evidence is None or evidence.provenance is None:
        return ()
    return evidence.provenance.from_untrusted


class Grants:
    """Grants in process, with the uses each has had; thread-safe, shared by every run given it.

    Example:
        >>> grants = Grants([Grant.of(send, where={"to": Prefix(prefix="team-")}, max_uses=5,
        ...                           granted_by="ops", reason="team notices")])
        >>> result = await run_tool_loop_tiered(caller, agent, tools, ctx, grants=grants)
    """

    def __init__(self, grants: Iterable[Grant] = ()) -> None:
        self._lock = threading.Lock()
        self._grants: dict[str, Grant] = {}
        self._uses: dict[str, int] = {}
        self._keys: dict[str, str] = {}
        self._revoked: set[str] = set()
        for given in grants:
            self.add(given)

    def add(self, grant: Grant) -> None:
        """Hold `grant` too. Raises `UsageError` for a second grant of one id, or the id of a revoked one."""
        with self._lock:
            if grant.id in self._revoked:
                # Added again, it would start from no uses: a max_uses=1 grant would approve twice.
                raise UsageError(
                    f"grant {grant.id!r} was revoked, and a revoked grant does not come back; give the new grant a new "
                    "id (a Grant made without one gets a fresh id), as the journal refuses a second grant of one id"
                )
            if grant.id in self._grants:
                raise UsageError(f"two grants with id {grant.id!r}; give each its own")
            self._grants[grant.id], self._uses[grant.id] = grant, 0

    def revoke(self, id: str) -> None:
        """Stop `id` approving anything, for good: it cannot be added again. Raises `UsageError` for an id
        it does not hold."""
        with self._lock:
            if self._grants.pop(id, None) is None:
                already = " (it was already revoked)" if id in self._revoked else ""
                raise UsageError(f"no grant {id!r} to revoke{already}; held: {sorted(self._grants)}")
            self._revoked.add(id)

    def uses(self, id: str) -> int:
        """How many calls `id` approved."""
        return self._uses.get(id, 0)

    def __iter__(self) -> Iterator[Grant]:
        with self._lock:
            return iter(list(self._grants.values()))

    def check(self, tools: Mapping[str, AnyTool]) -> None:
        """Refuse grants that could not mean what they say for the tools of their names (`Grant.check`)."""
        for held in self:
            if held.tool_name in tools:
                held.check(tools[held.tool_name])

    def use(self, proposal: ProposedAction[Any], *, at: datetime | None = None, key: str | None = None) -> Grant | None:
        """The first live grant that matches `proposal`, its use counted; `None`: the call waits for a human.

        `key` names the call (its run, round and digest): asked again under a key whose use was counted
        (a retried activity), it answers the same grant, if still held, without counting another use.
        """
        now = at or datetime.now(UTC)
        with self._lock:
            if key is not None and key in self._keys:
                return self._grants.get(self._keys[key])
            for held in self._grants.values():
                if held.matches(proposal) and held.live(now, self._uses[held.id]):
                    self._uses[held.id] += 1
                    if key is not None:
                        self._keys[key] = held.id
                    return held
        return None
