"""`agentkit grants add|list|show|revoke`: standing grants kept in a journal.

`add` checks the grant against the tool it names (`--tools MODULE:ATTR`, as `agentkit worker`
takes them): a constraint on a field the tool's args type lacks, or an irreversible tool without
`--allow-irreversible`, is refused before anything is stored; so are two constraints on one field,
NaN or infinity (JSON, where the journal keeps grants, has no form for them), a constraint no call
could meet (a value of another type than its field's, an empty `--prefix`) and an `--expires`
already past. `--prefix` compares text (it lets `/srv/data/../x` through a prefix of `/srv/data/`);
a path takes `--path-prefix`. `list` cuts a long cell with an ellipsis; `show ID` prints one grant in full. A
grant this version cannot read (a newer agentkit's constraint, a damaged row) is listed as
`unreadable`, with why, below the table: it approves nothing here, and `revoke` revokes it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO, assert_never

from pydantic import BaseModel, ValidationError, create_model

from agentkit._cli import import_object, positive_int
from agentkit._grants import Equals, Grant, OneOf, PathPrefix, Prefix, Range
from agentkit._state import json_text
from agentkit.errors import UnknownId, UsageError
from agentkit.journal._contract import Journal
from agentkit.journal._grants import GrantRecord
from agentkit.journal.cli import (
    _cut,
    _field,
    _flagged,
    _handler,
    _printable,
    _table,
    _time,
    db_flag,
    db_parent,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `grants` command group."""
    db = db_parent()
    grants = subparsers.add_parser(
        "grants", help="standing grants: approvals given ahead for calls within limits", description=__doc__
    )
    commands = grants.add_subparsers(dest="grants_command", required=True, metavar="COMMAND", help="what to do")
    add = commands.add_parser("add", parents=[db], help="keep a grant; prints its id")
    add.add_argument(
        "--tools", required=True, metavar="MODULE:ATTR", help="the tools (a tool or a list), to check against"
    )
    add.add_argument("--tool", required=True, metavar="NAME", help="the tool whose calls it approves")
    add.add_argument("--by", required=True, metavar="NAME", help="who grants it")
    add.add_argument("--reason", required=True, metavar="TEXT", help="why, for the record")
    uses = add.add_mutually_exclusive_group()
    uses.add_argument("--max-uses", type=positive_int, metavar="N", help="how many calls it approves at most")
    uses.add_argument("--unlimited", action="store_true", help="no limit on uses (say so explicitly)")
    add.add_argument("--expires", metavar="ISO", help="when it stops approving (ISO 8601 with a zone, e.g. ...Z)")
    add.add_argument("--equals", action="append", default=[], metavar="FIELD=JSON", help="the field is exactly this")
    add.add_argument("--one-of", action="append", default=[], metavar="FIELD=JSON-LIST", help="the field is one of")
    add.add_argument(
        "--prefix",
        action="append",
        default=[],
        metavar="FIELD=TEXT",
        help="the field's text starts with (compares strings: for a path use --path-prefix)",
    )
    add.add_argument(
        "--path-prefix",
        action="append",
        default=[],
        metavar="FIELD=PATH",
        help="the field is a POSIX path inside this folder (segments; '..' refused)",
    )
    add.add_argument(
        "--resolve-symlinks", action="store_true", help="--path-prefix also follows symlinks (realpath inside)"
    )
    add.add_argument("--range", action="append", default=[], metavar="FIELD=MIN:MAX", help="a number in [MIN, MAX]")
    add.add_argument("--allow-irreversible", action="store_true", help="it may approve IRREVERSIBLE calls")
    add.set_defaults(handler=_handler(_add))
    listing = commands.add_parser("list", parents=[db], help="every grant, with its uses and state")
    listing.set_defaults(handler=_handler(_list))
    show = commands.add_parser("show", parents=[db], help="one grant in full: what it allows, uses, state")
    show.add_argument("id", metavar="ID", help="the grant id (from `agentkit grants list`)")
    show.set_defaults(handler=_handler(_show))
    revoke = commands.add_parser("revoke", parents=[db], help="stop a grant approving anything")
    revoke.add_argument("id", metavar="ID", help="the grant id (from `agentkit grants list`)")
    revoke.add_argument("--by", required=True, metavar="NAME", help="who revokes it")
    revoke.add_argument("--reason", required=True, metavar="TEXT", help="why, for the record")
    revoke.set_defaults(handler=_handler(_revoke))


async def _add(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    if args.max_uses is None and not args.unlimited:
        raise UsageError("say how many calls the grant approves: --max-uses N or --unlimited")
    found = import_object("--tools", args.tools, "myapp.tools:TOOLS")
    tools = list(found) if isinstance(found, Sequence) and not isinstance(found, str) else [found]
    by_name = {getattr(t, "name", None): t for t in tools}
    tool = by_name.get(args.tool)
    if tool is None:
        raise UsageError(f"--tools {args.tools!r} has no tool {args.tool!r}; it has {sorted(map(str, by_name))}")
    grant = Grant.of(
        tool,  # type: ignore[arg-type]  # an object from --tools; Grant.of reads its name, args type and tier
        where=_constraints(args),
        max_uses=None if args.unlimited else args.max_uses,
        granted_by=args.by,
        reason=args.reason,
        expires_at=_when(args.expires),
        allow_irreversible=args.allow_irreversible,
    )
    _check_can_match(grant, tool.args_type)  # type: ignore[attr-defined]  # Grant.of checked it has one
    kept = await journal.grant(grant, tool=tool)  # type: ignore[arg-type]  # checked by Grant.of above
    print(_printable(f"granted {kept.id}: {_describe(kept.grant)}"), file=out)
    if any(isinstance(rule, Prefix) for rule in kept.grant.where.values()):
        print(
            "note: --prefix compares strings ('/srv/data/../../etc' starts with '/srv/data/'); "
            "for a path use --path-prefix, which refuses '..'",
            file=out,
        )


def _constraints(args: argparse.Namespace) -> dict[str, Equals | OneOf | Prefix | PathPrefix | Range]:
    rules: dict[str, Equals | OneOf | Prefix | PathPrefix | Range] = {}
    given: dict[str, str] = {}
    if args.resolve_symlinks and not args.path_prefix:
        raise UsageError("--resolve-symlinks goes with --path-prefix FIELD=PATH")
    for flag, items in (
        ("--equals", args.equals),
        ("--one-of", args.one_of),
        ("--prefix", args.prefix),
        ("--path-prefix", args.path_prefix),
        ("--range", args.range),
    ):
        for item in items:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise UsageError(f"{flag} takes FIELD=VALUE; got {item!r}")
            field = name.strip()
            if field in given:
                # A grant holds one constraint per field: keeping either would silently drop the other.
                raise UsageError(
                    f"{flag} {item!r}: field {field!r} already has a constraint ({given[field]}); a grant takes one "
                    "constraint per field: give one"
                )
            given[field] = f"{flag} {item!r}"
            try:
                rules[field] = _rule(flag, value, item, resolve_symlinks=args.resolve_symlinks)
            except ValidationError as invalid:
                reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in invalid.errors())
                raise UsageError(f"{flag} {item!r}: {reasons}") from None
    return rules


def _rule(flag: str, value: str, item: str, *, resolve_symlinks: bool) -> Equals | OneOf | Prefix | PathPrefix | Range:
    """The constraint `flag` gives; raises pydantic's `ValidationError` for one its class refuses."""
    if flag == "--prefix":
        return Prefix(prefix=value)
    if flag == "--path-prefix":
        return PathPrefix(prefix=value, resolve_symlinks=resolve_symlinks)
    if flag == "--range":
        low, sep, high = value.partition(":")
        try:
            if not sep:
                raise ValueError(value)
            ends = [float(end) if end else None for end in (low, high)]
        except ValueError:
            raise UsageError(f"--range takes FIELD=MIN:MAX (either end may be empty); got {item!r}") from None
        if any(end is not None and not math.isfinite(end) for end in ends):
            raise UsageError(
                f"--range {item!r}: its ends are finite numbers (NaN and infinity have no JSON form, and the journal "
                "keeps grants as JSON); leave an end empty for no bound"
            )
        return Range(min=ends[0], max=ends[1])
    try:
        # NaN and Infinity are refused, not taken as text (1e999, read as infinity, Equals and OneOf refuse).
        loaded: Any = json.loads(value, parse_constant=_no_constant)
    except _NotFinite:
        raise UsageError(
            f"{flag} {item!r}: NaN and infinity have no JSON form (the journal keeps grants as JSON); give a finite "
            "number, or the text as a JSON string"
        ) from None
    except ValueError:
        loaded = value
    if flag == "--equals":
        return Equals(value=loaded)
    if not isinstance(loaded, list) or not loaded:
        raise UsageError(f'--one-of takes FIELD=JSON-LIST, such as \'mode=["a", "b"]\'; got {item!r}')
    return OneOf(values=tuple(loaded))


class _NotFinite(Exception):
    """`json.loads` met NaN, Infinity or -Infinity."""


def _no_constant(text: str) -> Any:
    raise _NotFinite(text)


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--expires takes an ISO 8601 time with a zone, such as 2030-01-31T18:00:00Z; got {text!r}"
        ) from None
    if at.tzinfo is None:
        raise UsageError(f"--expires needs a time zone (end it with Z for UTC); got {text!r}")
    if at <= datetime.now(UTC):
        raise UsageError(f"--expires {text!r} is already past: the grant would approve nothing; give a later time")
    return at


def _check_can_match(grant: Grant, args_type: type[BaseModel]) -> None:
    """Refuse a constraint no call can meet: a value of another type than its field's (`--equals note=1` on a
    text field), `--prefix` on a field that is not text, `--range` on one that is not a number."""
    for name, rule in grant.where.items():
        field = args_type.model_fields[name]
        # The field alone, as the args type validates it: what a call's value of it dumps to, as a grant sees it.
        probe: type[BaseModel] = create_model(
            "Probe", __config__=args_type.model_config, **{name: (field.annotation, field)}
        )  # type: ignore[call-overload]  # one field, named at run time
        flag = _FLAGS[type(rule)]
        match rule:
            case Equals() | OneOf():
                values = [rule.value] if isinstance(rule, Equals) else list(rule.values)
                for value in values:
                    dumped = _as_called(probe, name, value)
                    if dumped is None or json_text(dumped) != json_text(value):
                        fix = "" if dumped is None else f" (a call's {name} reads {json.dumps(dumped)})"
                        raise UsageError(
                            f"{flag} {name}={json.dumps(value)}: no call of {grant.tool_name!r} has {name} equal to it"
                            f"{fix}; give a value of {name}'s type, {_type_name(field.annotation)}"
                        )
            case Prefix() | PathPrefix():
                if not _admits(probe.model_json_schema(), name, {"string"}):
                    raise UsageError(
                        f"{flag} {name}=...: {name} is {_type_name(field.annotation)}, not text, so no call matches; "
                        "use --equals, --one-of or --range for it"
                    )
            case Range():
                if not _admits(probe.model_json_schema(), name, {"number", "integer"}):
                    raise UsageError(
                        f"--range {name}=...: {name} is {_type_name(field.annotation)}, not a number, so no call "
                        "matches; use --equals, --one-of or --prefix for it"
                    )
            case _:
                assert_never(rule)


_FLAGS: dict[type, str] = {
    Equals: "--equals",
    OneOf: "--one-of",
    Prefix: "--prefix",
    PathPrefix: "--path-prefix",
    Range: "--range",
}


def _as_called(probe: type[BaseModel], name: str, value: object) -> object | None:
    """What `value`, as a call's `name`, is once validated and dumped as JSON (`None`: the field refuses it)."""
    try:
        dumped: object = probe.model_validate({name: value}).model_dump(mode="json")[name]
    except ValidationError:
        return None
    return dumped


def _admits(schema: dict[str, Any], name: str, kinds: set[str]) -> bool:
    """Whether the JSON schema of field `name` allows a value of one of the JSON types `kinds` (or any type)."""
    found = _json_types(schema["properties"][name], schema.get("$defs", {}))
    return found is None or bool(found & kinds)


def _json_types(schema: dict[str, Any], defs: dict[str, Any]) -> set[str] | None:
    """The JSON types `schema` allows (`None`: any)."""
    if "$ref" in schema:
        return _json_types(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            parts = [_json_types(part, defs) for part in schema[key]]
            return None if any(part is None for part in parts) else set().union(*(p for p in parts if p))
    if "type" in schema:
        kinds = schema["type"]
        return set(kinds) if isinstance(kinds, list) else {kinds}
    return None


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _describe(grant: Grant) -> str:
    where = ", ".join(f"{name} {_rule_text(rule)}" for name, rule in grant.where.items())
    irreversible = ", irreversible allowed" if grant.allow_irreversible else ""
    return f"{grant.tool_name} where {where or 'any args'}{irreversible}"


def _rule_text(rule: Equals | OneOf | Prefix | PathPrefix | Range) -> str:
    match rule:
        case Equals():
            return f"= {json.dumps(rule.value, ensure_ascii=False)}"
        case OneOf():
            return f"in {json.dumps(list(rule.values), ensure_ascii=False)}"
        case Prefix():
            return f"starts with the text {json.dumps(rule.prefix, ensure_ascii=False)}"
        case PathPrefix():
            symlinks = ", symlinks resolved" if rule.resolve_symlinks else ""
            return f"is a path inside {json.dumps(rule.prefix, ensure_ascii=False)} (no '..'{symlinks})"
        case Range():
            return f"in [{'-' if rule.min is None else rule.min}, {'-' if rule.max is None else rule.max}]"
        case _:
            assert_never(rule)


async def _list(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    records = await journal.grants()
    if not records:
        print("no grants", file=out)
        return
    rows = [
        (
            r.id,
            r.state.value,
            _uses(r),
            "?" if r.unreadable else _time(r.grant.expires_at),
            r.grant.granted_by,
            # Never the stand-in's "any args": what an unreadable row allows is not known.
            "?" if r.unreadable else _describe(r.grant),
            r.grant.reason,
        )
        for r in records
    ]
    _table(out, ("ID", "STATE", "USES", "EXPIRES", "BY", "ALLOWS", "REASON"), rows)
    _flagged(out, [r.unreadable for r in records])
    if any(_cut(cell) != cell for row in rows for cell in row):
        print(
            f"\na cell ending in … is cut short: agentkit grants show ID{db_flag(args.db)} prints a grant in full",
            file=out,
        )


def _uses(record: GrantRecord) -> str:
    limit = "?" if record.unreadable else "-" if record.grant.max_uses is None else record.grant.max_uses
    return f"{record.uses}/{limit}"


async def _show(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    found = [r for r in await journal.grants() if r.id == args.id]
    if not found:
        raise UnknownId(
            f"no grant {args.id!r} in the journal at {journal.where}; list them with `agentkit grants list`", id=args.id
        )
    [record] = found
    grant = record.grant
    lines = [("id", grant.id), ("state", record.state.value), ("tool", grant.tool_name)]
    if record.unreadable:
        lines.append(("allows", "? (this version cannot read what it allows; it approves nothing here)"))
    else:
        rules = [f"{name} {_rule_text(rule)}" for name, rule in grant.where.items()]
        lines.append(("allows", "\n".join(rules) or "any args"))
        lines.append(("tiers", "irreversible calls too" if grant.allow_irreversible else "not irreversible calls"))
        untrusted = [f"{name} from {', '.join(tools)}" for name, tools in grant.from_untrusted.items()]
        lines.append(
            (
                "untrusted",
                "\n".join(untrusted)
                or "- (a value first seen in untrusted content passes only a field = or in a list)",
            )
        )
        lines.append(("expires", _time(grant.expires_at)))
    lines += [("uses", _uses(record)), ("granted", f"by {grant.granted_by} at {_time(grant.granted_at)}")]
    lines.append(("reason", grant.reason))
    if record.revoked_by or record.revoked_at:
        lines.append(
            ("revoked", f"by {record.revoked_by or '-'} at {_time(record.revoked_at)}: {record.revoked_because}")
        )
    for key, value in lines:
        print(_field(key, value), file=out)
    _flagged(out, [record.unreadable])


async def _revoke(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    record = await journal.revoke_grant(args.id, args.by, args.reason)
    print(_printable(f"revoked {record.id} (by {record.revoked_by}: {record.revoked_because})"), file=out)
