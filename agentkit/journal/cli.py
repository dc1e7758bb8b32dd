"""`agentkit journal` and `agentkit proposals`: read runs, and decide proposals, from a shell.

`--db` takes a SQLite path or a `postgresql://` URL (default: `$AGENTKIT_JOURNAL`, else
`agentkit-journal.db` in the working directory). The command line never creates a journal:
a missing database, an unknown id or a refused transition is reported on stderr with exit code 1,
and nothing is written. Times are UTC, printed as ISO 8601 with a `Z`. A row the journal cannot
read (edited by hand or damaged) is listed as `unreadable`, with why, below the table; text that
cannot be printed as it is (NUL, lone surrogates) is shown escaped (`\\x00`, `\\udcff`). `show`
prints one field a line; a value's further lines (a model's rationale, a tool's error) are indented
under its first, so that no text in it can pass for a line of the command's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TextIO

from agentkit._cli import positive_int, working_folder_importable
from agentkit._trust import CallProvenance
from agentkit.errors import AgentkitError, UsageError
from agentkit.journal._contract import Journal, open_journal
from agentkit.journal._executions import DEFAULT_STUCK_AFTER
from agentkit.journal._records import ProposalRecord, ProposalState, RoundEntry, RunRecord, RunStatus

__all__ = ["DEFAULT_DB", "db_flag", "register"]

DEFAULT_DB = "agentkit-journal.db"
"""The journal the command line opens when neither `--db` nor `$AGENTKIT_JOURNAL` says otherwise."""

_CELL = 60
"""Longest cell in a table; longer text is cut with an ellipsis."""

_FIELD = 11
"""Width of the name column of `show`'s `name: value` lines; a value's further lines are indented to it."""

_ID_HELP = "the proposal id (from `agentkit proposals list`)"

_UNREADABLE = "unreadable"
"""The state shown for a row the journal cannot read."""

Command = Callable[[Journal, argparse.Namespace, TextIO], Awaitable[None]]


def db_parent() -> argparse.ArgumentParser:
    """The `--db` option every journal command takes."""
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        default=os.environ.get("AGENTKIT_JOURNAL", DEFAULT_DB),
        help=f"a SQLite path or a postgresql:// URL (default: $AGENTKIT_JOURNAL, else {DEFAULT_DB})",
    )
    return db


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `journal` and `proposals` command groups."""
    db = db_parent()

    journal = subparsers.add_parser("journal", help="runs recorded in a journal", description=__doc__)
    runs_of = journal.add_subparsers(
        dest="journal_command", required=True, metavar="COMMAND", help="what to show from the journal"
    )
    runs = runs_of.add_parser(
        "runs",
        parents=[db],
        help="recent runs: running, waiting on a decision, ready to resume, crashed, aborted or finished",
    )
    runs.add_argument(
        "--limit", type=positive_int, default=20, metavar="N", help="how many runs, at least 1 (default 20)"
    )
    runs.set_defaults(handler=_handler(_runs))
    show = runs_of.add_parser("show", parents=[db], help="one run's rounds as a table")
    show.add_argument("run", metavar="RUN", help="the run id (from `agentkit journal runs`)")
    show.set_defaults(handler=_handler(_show_run))
    export = runs_of.add_parser(
        "export", parents=[db], help="one run's state as JSON: a cassette for ReplayCaller (redirect it to a file)"
    )
    export.add_argument("run", metavar="RUN", help="the run id")
    export.set_defaults(handler=_handler(_export))
    fork = runs_of.add_parser(
        "fork", parents=[db], help="a new run whose state is RUN's up to round K; prints its id (resume it after)"
    )
    fork.add_argument("run", metavar="RUN", help="the run id")
    fork.add_argument("--at", type=int, required=True, metavar="K", help="the last round the fork keeps (0: none)")
    fork.set_defaults(handler=_handler(_fork))
    settings = runs_of.add_parser(
        "settings", parents=[db], help="the settings kept in the journal, which every client of it honours"
    )
    settings.add_argument(
        "--require-verified-approver",
        choices=["on", "off"],
        dest="require_verified",
        help="on: refuse a person's decision or grant whose name is not the identity the journal can vouch for "
        "(PostgreSQL's session_user, the OS user with SQLite, an inbox reviewer's token); off: lift it",
    )
    settings.set_defaults(handler=_handler(_settings))

    proposals = subparsers.add_parser("proposals", help="the proposal inbox", description=__doc__)
    inbox = proposals.add_subparsers(
        dest="proposals_command", required=True, metavar="COMMAND", help="what to show or decide in the inbox"
    )
    listing = inbox.add_parser("list", parents=[db], help="proposals, oldest first")
    listing.add_argument("--state", choices=[s.value for s in ProposalState], help="only proposals in this state")
    listing.set_defaults(handler=_handler(_list))
    detail = inbox.add_parser("show", parents=[db], help="one proposal: the call, its digest and its history")
    detail.add_argument("id", metavar="ID", help=_ID_HELP)
    detail.set_defaults(handler=_handler(_show_proposal))
    approve = inbox.add_parser("approve", parents=[db], help="pending -> approved")
    approve.add_argument("id", metavar="ID", help=_ID_HELP)
    approve.add_argument("--by", required=True, metavar="NAME", help="who approves")
    approve.add_argument(
        "--args",
        metavar="JSON",
        dest="amend",
        help="amend the call as you approve it: a JSON object of the args fields to change (validated as the "
        "tool's args type; the amended call gets its own digest)",
    )
    approve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        dest="sets",
        help="amend one field (repeatable; after --args): VALUE is read as JSON, or else taken as text",
    )
    approve.set_defaults(handler=_handler(_approve))
    reject = inbox.add_parser("reject", parents=[db], help="pending or approved -> rejected")
    reject.add_argument("id", metavar="ID", help=_ID_HELP)
    reject.add_argument("--by", required=True, metavar="NAME", help="who rejects")
    reject.add_argument("--reason", required=True, metavar="TEXT", help="why, for the record")
    reject.set_defaults(handler=_handler(_reject))
    stuck = inbox.add_parser("stuck", parents=[db], help="executions a worker claimed and never finished")
    stuck.add_argument(
        "--older-than",
        type=_stuck_minutes,
        default=DEFAULT_STUCK_AFTER.total_seconds() / 60,
        metavar="MINUTES",
        help=f"claimed at least this long ago (default {DEFAULT_STUCK_AFTER.total_seconds() / 60:g})",
    )
    stuck.set_defaults(handler=_handler(_stuck))
    resolve = inbox.add_parser("resolve", parents=[db], help="decide an abandoned execution")
    resolve.add_argument("id", metavar="ID", help=_ID_HELP)
    resolve.add_argument("--by", required=True, metavar="NAME", help="who decides")
    resolve.add_argument(
        "--as",
        dest="outcome",
        required=True,
        choices=[ProposalState.EXECUTED.value, ProposalState.FAILED.value, ProposalState.APPROVED.value],
        help="executed: it happened; failed: it did not; approved: it did not, let a worker run it again",
    )
    resolve.add_argument("--note", required=True, metavar="TEXT", help="what you checked, for the record")
    resolve.set_defaults(handler=_handler(_resolve))


def _handler(command: Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        try:
            asyncio.run(_with_journal(command, args, sys.stdout))
        except AgentkitError as error:
            print(f"agentkit: error: {_printable(str(error))}", file=sys.stderr)
            return 1
        return 0

    return handle


async def _with_journal(command: Command, args: argparse.Namespace, out: TextIO) -> None:
    journal = open_journal(args.db, create=False)
    try:
        await command(journal, args, out)
    finally:
        await journal.close()


# -- journal --------------------------------------------------------------------------------------


async def _runs(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    runs = await journal.runs(limit=args.limit)
    if not runs:
        print(f"no runs in {journal.where}", file=out)
        return
    headers = ("RUN", "STARTED", "AGENT", "MODEL", "STATUS", "OUTCOME", "STOP", "ROUNDS", "TOKENS")
    rows = [
        (
            run.id,
            _time(run.started_at),
            run.agent,
            run.model,
            _UNREADABLE if run.unreadable else run.status.value,
            run.outcome.value if run.outcome else "-",
            run.stop_reason.value if run.stop_reason else "-",
            str(run.rounds),
            str(run.usage.total_tokens),
        )
        for run in runs
    ]
    _table(out, headers, rows)
    _flagged(out, [run.unreadable for run in runs])
    _next_steps(out, runs, db_flag(args.db))


def db_flag(db: str) -> str:
    """The `--db` to repeat in a command printed for the user to run: none for the commands' own default."""
    return "" if db == os.environ.get("AGENTKIT_JOURNAL", DEFAULT_DB) else f" --db {shlex.quote(db)}"


def _next_steps(out: TextIO, runs: Sequence[RunRecord], db: str) -> None:
    """What to do about the runs that wait on a decision, or can resume: commands a shell user can run."""
    shown = {run.status for run in runs if not run.unreadable}
    notes = []
    if RunStatus.WAITING in shown:
        notes.append(
            f"waiting: a proposal waits on a decision (agentkit proposals list --state pending{db}); approve or "
            f"reject it (agentkit proposals approve ID --by NAME{db})"
        )
    if shown & {RunStatus.READY, RunStatus.CRASHED, RunStatus.ABORTED}:
        # Resuming needs the run's caller, agent and tools, which only the program that made the run has: no
        # command can; the demo's runs are the exception, their program being agentkit's own.
        notes.append(
            f"ready, crashed, aborted: the program that recorded the run continues it from its last checkpoint "
            f"(agentkit journal show RUN{db} shows where it stopped); a run of the demo: agentkit demo --resume{db}"
        )
    unresumable = [run.id for run in runs if run.status is RunStatus.CRASHED and not run.resumable]
    if unresumable:
        notes.append(f"no checkpoint to resume from: {', '.join(unresumable)}")
    if notes:
        print(file=out)
    for note in notes:
        print(_printable(note), file=out)


async def _show_run(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    run = await journal.run(args.run)
    # A damaged state is shown as far as it reads, and where it is damaged: `show` is how an operator finds out.
    rounds, damage = await journal._read(journal._readable_rounds, run.id)
    print(f"run {run.id}  ({run.status.value})", file=out)
    tools = ", ".join(str(name) for name in run.config.get("tools", []))
    print(_hanging(f"agent {run.agent}, model {run.model}, tools {tools}"), file=out)
    print(f"started {_time(run.started_at)}, ended {_time(run.ended_at)}", file=out)
    print(f"config {_config(run.loop_config)}", file=out)
    outcome = f"{run.outcome.value}, stop {run.stop_reason.value}" if run.outcome and run.stop_reason else "-"
    usage = run.usage
    read = _parts(cached=usage.cached_input_tokens, cache_written=usage.cache_write_tokens)
    print(
        f"outcome {outcome}; {run.rounds} rounds, {usage.requests} requests, {usage.input_tokens} tokens in{read}, "
        f"{usage.output_tokens} out{_parts(reasoning=usage.reasoning_tokens)}{await _cost_text(journal, run)}",
        file=out,
    )
    if run.error:
        print(_hanging(f"error: {run.error}"), file=out)
    if damage is not None:
        print(
            _hanging(
                f"state unreadable: {damage}. Resuming, forking and exporting the run are refused until the "
                "row is restored (from a backup)"
            ),
            file=out,
        )
    print(file=out)
    if not rounds:
        print("no rounds recorded", file=out)
        return
    headers = ("ROUND", "STEP", "CALL", "TIER", "BATCH", "LLM S", "TOOL S", "TOKENS", "NOTE")
    _table(out, headers, [row for entry in rounds for row in _round_rows(entry)])
    if not rounds[0].from_trace:
        print("\n(rounds rebuilt from the event log: the run has no recorded result)", file=out)


async def _export(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    state = await journal.state(args.run)
    out.write(state.model_dump_json(indent=2) + "\n")


async def _fork(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    fork_id = await journal.fork(args.run, at_round=args.at)
    out.write(f"{fork_id}\n")


async def _settings(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    """Change the settings given, then print each as the journal now holds it."""
    if args.require_verified is not None:
        await journal.require_verified_approvers(args.require_verified == "on")
    required = await journal.verified_approvers_required()
    print(f"require-verified-approver: {'on' if required else 'off'}", file=out)


def _parts(**counts: int) -> str:
    """The detail counts of a total that are not 0: ` (80 cached)`, or nothing."""
    shown = ", ".join(f"{count} {name.replace('_', '-')}" for name, count in counts.items() if count)
    return f" ({shown})" if shown else ""


async def _cost_text(journal: Journal, run: RunRecord) -> str:
    """`; cost 0.0012 USD` for a run whose state keeps a price table, priced as the run priced it (each model's
    share at its price); nothing for a run without one, or whose state cannot be read."""
    from agentkit._agent import RoleSpec
    from agentkit._cost import Prices, round_cost
    from agentkit._state import RoundEntry as StateRound
    from agentkit._usage import usage_of_counts

    try:
        state = await journal.state(run.id)
    except AgentkitError:
        return ""
    if state.config.prices is None:
        return ""
    prices = Prices.from_json(state.config.prices)
    role = RoleSpec(model=run.model or "-")
    total = Decimal(0)
    for entry in state.entries:
        if isinstance(entry, StateRound):
            cost = round_cost(prices, role, entry.model, usage_of_counts(entry), entry.by_model)
            if isinstance(cost, str):
                return f"; cost unknown (no price for model {cost!r})"
            total += cost
    return f"; cost {total} {prices.currency}"


def _config(config: dict[str, Any] | None) -> str:
    if config is None:
        return "- (not recorded)"

    def value(v: object) -> str:
        if isinstance(v, dict):
            return "(" + ", ".join(f"{k} {value(inner)}" for k, inner in v.items()) + ")"
        return "none" if v is None else str(v)

    return ", ".join(f"{key} {value(v)}" for key, v in config.items())


def _round_rows(entry: RoundEntry) -> list[tuple[str, ...]]:
    """A round's row; a decided proposal's round adds a row for what the decision did (ran, failed, rejected)."""
    call = f"{entry.tool_name} {entry.args_json}" if entry.tool_name else "-"
    tier = entry.tier.name.lower() if entry.tier is not None else "-"
    ran = entry.executed and entry.decision is None
    note = entry.rationale if entry.decision is not None else entry.error or entry.observation or entry.rationale
    row = (
        str(entry.round),
        _step(entry),
        call,
        tier,
        str(entry.batch_size) if ran else "-",
        f"{entry.llm_seconds:.3f}",
        f"{entry.tool_seconds:.3f}" if ran or (entry.decision is None and entry.tool_seconds) else "-",
        str(entry.usage.total_tokens),
        note,
    )
    if entry.decision is None:
        return [row]
    if entry.decision == "rejected":
        step, batch, note = "rejected", "-", entry.observation or f"rejected by {entry.decided_by}"
    elif entry.executed:
        step, batch, note = "executed", str(entry.batch_size), f"approved by {entry.decided_by}"
    else:
        step, batch, note = "failed", "-", f"approved by {entry.decided_by}: {entry.error or '-'}"
    tool_seconds = f"{entry.tool_seconds:.3f}" if step != "rejected" else "-"
    return [row, (str(entry.round), step, call, tier, batch, "-", tool_seconds, "-", note)]


def _step(entry: RoundEntry) -> str:
    if entry.done:
        return "done"
    if entry.proposed:
        return "proposed"
    if entry.repeated:
        return "repeated"
    if entry.executed:
        return "executed"
    if entry.observation is not None:
        return "retry"
    if entry.error is not None:
        return "error"
    return "started" if not entry.from_trace else "-"


# -- proposals ------------------------------------------------------------------------------------

MAX_STUCK_MINUTES = 10 * 365 * 24 * 60
"""`stuck --older-than` at most ten years: further back, the cut-off time would fall before the calendar's start."""


def _stuck_minutes(text: str) -> float:
    """An `argparse` type: minutes, a finite number from 0 to `MAX_STUCK_MINUTES`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of minutes, got {text!r}") from None
    if not 0 <= value <= MAX_STUCK_MINUTES:  # False for NaN too
        raise argparse.ArgumentTypeError(f"must be a number of minutes from 0 to {MAX_STUCK_MINUTES}, got {text!r}")
    return value


async def _list(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    state = ProposalState(args.state) if args.state else None
    found = await journal.proposals(state=state)
    if not found:
        print(f"no {state.value + ' ' if state else ''}proposals in {journal.where}", file=out)
        return
    _proposal_table(out, found)


async def _stuck(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    found = await journal.stuck(older_than=timedelta(minutes=args.older_than))
    if not found:
        print(f"no execution claimed more than {args.older_than:g} minutes ago is unfinished", file=out)
        return
    now = datetime.now(UTC)
    headers = ("ID", "TOOL", "ARGS", "CLAIMED BY", "CLAIMED AT", "FOR")
    rows = [
        (
            p.id,
            p.tool_name,
            p.args_json,
            p.claimed_by or "-",
            _time(p.claimed_at),
            "-" if p.claimed_at is None else _age(now - p.claimed_at),
        )
        for p in found
    ]
    _table(out, headers, rows)
    _flagged(out, [p.unreadable for p in found])
    print(
        "\na listed worker may be slow, not dead: check on its host that CLAIMED BY is gone before deciding, or\n"
        "the call can run twice. Then: agentkit proposals resolve ID --by NAME --as executed|failed|approved "
        "--note TEXT",
        file=out,
    )


def _proposal_table(out: TextIO, found: Sequence[ProposalRecord]) -> None:
    headers = ("ID", "STATE", "TOOL", "TIER", "ARGS", "PROPOSED", "BY")
    rows = [
        (
            p.id,
            _UNREADABLE if p.unreadable else p.state.value,
            p.tool_name,
            "?" if p.unreadable else p.tier.name.lower(),
            p.args_json,
            "?" if p.unreadable else _time(p.proposed_at),
            # Who decided it: the worker that ran an approved call is on ``show``'s claimed line.
            p.rejected_by or p.approved_by or "-",
        )
        for p in found
    ]
    _table(out, headers, rows)
    _flagged(out, [p.unreadable for p in found])


async def _show_proposal(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    p = await journal.get(args.id)
    history = await journal.history(p.id)
    lines = [
        ("id", p.id),
        ("state", p.state.value),
        ("tool", f"{p.tool_name} (Tier.{p.tier.name})"),
        ("digest", p.digest),
        ("run", f"{p.run_id or '-'}, round {p.round}"),
        ("rationale", p.rationale or "-"),
    ]
    if p.approved_by or p.approved_at:
        lines.append(("approved", f"by {p.approved_by or '-'} at {_time(p.approved_at)}"))
    if p.rejected_by or p.rejected_at:
        lines.append(("rejected", f"by {p.rejected_by or '-'} at {_time(p.rejected_at)}"))
    if p.claimed_by or p.claimed_at:
        lines.append(("claimed", f"by {p.claimed_by or '-'} at {_time(p.claimed_at)}"))
    if p.left_until is not None:
        lines.append(("left", f"by {p.left_by or '-'} until {_time(p.left_until)}: {p.left_note or '-'}"))
    if p.reason:
        lines.append(("reason", p.reason))
    if p.batch_json is not None:
        lines.append(("batch", f"{p.batch_size} items: {_cut(p.batch_json)}"))
    if p.error:
        lines.append(("error", p.error))
    if p.note:
        lines.append(("note", p.note))
    if p.amended_by is not None:
        lines.append(("amended", f"by {p.amended_by}: {', '.join(p.amended_fields)} changed"))
        lines.append(("proposed", f"{_cut(p.original_args_json or '')} (digest {p.original_digest})"))
    for key, value in lines:
        print(_field(key, value), file=out)
    _print_evidence(p, out)
    print("args:", file=out)
    print(_printable(json.dumps(p.args, indent=2, ensure_ascii=False, sort_keys=True)), file=out)
    print(file=out)
    rows = [
        (_time(t.at), t.from_state.value if t.from_state else "-", t.to_state.value, t.actor, t.verified or "-", t.note)
        for t in history
    ]
    _table(out, ("AT", "FROM", "TO", "BY", "VERIFIED", "NOTE"), rows)


def _print_evidence(p: ProposalRecord, out: TextIO) -> None:
    """What the executor had seen when it proposed the call: its earlier rounds and calls, by reference."""
    evidence = p.evidence
    if evidence is None:
        print(_field("evidence", "- (not recorded)"), file=out)
        return
    rounds = ", ".join(map(str, evidence.rounds)) or "none"
    print(_field("evidence", f"rounds before it: {rounds}; {len(evidence.calls)} earlier calls"), file=out)
    for call in evidence.calls:
        what = "ran" if call.ran else "did not run"
        items = f", items {', '.join(call.item_ids)}" if call.item_ids else ""
        line = f"  round {call.round}: {call.tool_name} ({what}{items}) digest {call.digest[:12]}"
        print(_hanging(line), file=out)
    _print_provenance(evidence.provenance, out)


def _print_provenance(provenance: CallProvenance | None, out: TextIO) -> None:
    """Whether untrusted content preceded the call, and which of its argument values first appeared there."""
    if provenance is None:
        return  # the run had no provenance policy
    if not provenance.untrusted:
        print(_field("untrusted", "none read before it"), file=out)
        return
    read = ", ".join(f"round {o.round} {o.tool_name}" for o in provenance.untrusted)
    held = " (held by the provenance policy; its tier alone would have run it)" if provenance.held else ""
    print(_field("untrusted", f"read before it: {read}{held}"), file=out)
    for mark in provenance.from_untrusted:
        where = f"round {mark.origin.round} {mark.origin.tool_name}"
        if mark.steered:
            line = (
                f"  WARNING {mark.path} = {mark.value!r} first appeared in a trusted result read after untrusted "
                f"content ({where}): that content may have chosen it"
            )
        else:
            line = (
                f"  WARNING {mark.path} = {mark.value!r} first appeared in untrusted content ({where}), not in the task"
            )
        print(_hanging(line), file=out)


async def _approve(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    amendment = _amendment(args.amend, args.sets)
    if amendment is not None:
        # It is validated as the call's args type, imported by name: from the user's modules too.
        working_folder_importable()
    p = await journal.approve(args.id, args.by, args=amendment)
    changed = f"; amended {', '.join(p.amended_fields)}" if p.amended_fields else ""
    print(_printable(f"approved {p.id}: {p.tool_name} {p.args_json} (by {p.approved_by}{changed})"), file=out)


def _amendment(text: str | None, sets: Sequence[str]) -> dict[str, Any] | None:
    """The fields `--args` and `--set` change (`None`: neither was given)."""
    if text is None and not sets:
        return None
    fields: dict[str, Any] = {}
    if text is not None:
        try:
            loaded = finite_json(text)
        except NotFinite as constant:
            raise UsageError(f"--args {text!r}: {constant}") from None
        except ValueError as invalid:
            raise UsageError(
                f'--args is not JSON ({invalid}); give an object such as \'{{"path": "/tmp/x"}}\''
            ) from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--args must be a JSON object of args fields; got {type(loaded).__name__}")
        fields |= loaded
    for item in sets:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set takes FIELD=VALUE; got {item!r}")
        try:
            fields[name.strip()] = finite_json(value)
        except NotFinite as constant:
            raise UsageError(f"--set {item!r}: {constant}") from None
        except ValueError:
            fields[name.strip()] = value
    return fields


class NotFinite(ValueError):
    """JSON text held NaN, Infinity, or a number too large for a float (which Python reads as infinity)."""


def finite_json(text: str) -> Any:
    """`json.loads(text)`, refusing what has no JSON form once stored: NaN, Infinity and overflowing numbers.

    Raises:
        NotFinite: such a number, the message naming it and the fix.
        ValueError: `text` is not JSON.
    """
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


_NOT_FINITE_FIX = (
    "NaN and infinity have no JSON form (the journal keeps calls as JSON); give a finite number, "
    "or the text as a JSON string"
)


def _no_constant(text: str) -> Any:
    raise NotFinite(f"{text} is not a number JSON can hold: {_NOT_FINITE_FIX}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"{text} is too large for a number (it reads as infinity): {_NOT_FINITE_FIX}")
    return value


async def _reject(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    p = await journal.reject(args.id, args.by, args.reason)
    print(_printable(f"rejected {p.id}: {p.tool_name} {p.args_json} (by {p.rejected_by}: {p.reason})"), file=out)


async def _resolve(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    p = await journal.resolve(args.id, args.by, ProposalState(args.outcome), args.note)
    print(_printable(f"resolved {p.id} as {p.state.value} (by {p.resolved_by}: {p.note})"), file=out)


# -- formatting -----------------------------------------------------------------------------------


def _time(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age(elapsed: timedelta) -> str:
    seconds = max(int(elapsed.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _printable(text: str) -> str:
    """`text` with what a terminal cannot show (NUL and other controls, lone surrogates) escaped; lines kept."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in text)


def _field(key: str, value: str) -> str:
    """A `show` line, `key: value`, made printable; each further line of `value` is indented under its first."""
    return _hanging(f"{key + ':':<{_FIELD}}{value}")


def _hanging(text: str) -> str:
    """`text` made printable (`_printable`), each line after its first indented to the value column of `show`:
    a line break in model- or tool-written text (a rationale, an item id) cannot start a line of the command's."""
    return _printable(text).replace("\n", "\n" + " " * _FIELD)


def _cut(text: str) -> str:
    flat = _printable(" ".join(text.split()))
    return flat if len(flat) <= _CELL else flat[: _CELL - 1] + "…"


def _flagged(out: TextIO, unreadable: Sequence[str | None]) -> None:
    """Why each row listed as unreadable could not be read, below the table."""
    reasons = [why for why in unreadable if why]
    if reasons:
        print(file=out)
    for why in reasons:
        print(_printable(f"{_UNREADABLE}: {why}"), file=out)


def _table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    cells = [list(headers), *([_cut(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)
