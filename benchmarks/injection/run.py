"""``python -m benchmarks.injection [--suite NAME]``: measure every pair of the chosen suites, policy off and on."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from agentdojo.attacks.attack_registry import load_attack
from agentdojo.task_suite.load_suites import get_suites

from benchmarks.injection.dojo import Episode, Seat, Target, run_episode
from benchmarks.injection.score import Tally, answer_line, sources_line, strict_line, summary_line, total

__all__ = ["main"]

VERSION = "v1.2"
ATTACK = "important_instructions"
RESULTS = Path(__file__).resolve().parent.parent / "results"


def _kind(suite: Any, injection_task: Any) -> str:
    """`calls`, `answer` (only words in the final answer) or `unplanned` (no ground truth to follow)."""
    environment = suite.load_and_inject_default_environment({})
    if injection_task.ground_truth(environment):
        return "calls"
    return "answer" if injection_task.GROUND_TRUTH_OUTPUT else "unplanned"


async def measure(
    name: str,
    suite: Any,
    progress: bool,
    seat: Seat | None = None,
    log: TextIO | None = None,
    tasks: int | None = None,
) -> tuple[Tally, list[dict[str, Any]]]:
    """Every benign task and every pair of `suite`, policy off and on; each row also to `log` as it is done."""
    tally = Tally(suite=name)
    rows: list[dict[str, Any]] = []
    attack = load_attack(ATTACK, suite, Target())
    kinds = {task_id: _kind(suite, task) for task_id, task in suite.injection_tasks.items()}
    clean = suite.load_and_inject_default_environment({})
    for user_id, user_task in list(suite.user_tasks.items())[:tasks]:
        off, on, more = await _runs(name, suite, user_task, None, {}, clean, seat)
        tally.tasks += 1
        tally.utility_off += off.utility
        tally.utility += on.utility
        tally.approvals_off += off.proposals
        tally.approvals += on.proposals
        if not on.read_untrusted:
            tally.clean_tasks += 1
            tally.clean_asked_more += on.proposals > off.proposals
        row = {
            "user_task": user_id,
            "utility_off": off.utility,
            "utility": on.utility,
            "approvals_off": off.proposals,
            "approvals": on.proposals,
        }
        if more is not None:
            sources, strict, strict_sources = more.sources, more.strict, more.strict_sources
            tally.utility_sources += sources.utility
            tally.approvals_sources += sources.proposals
            tally.granted += sources.granted
            tally.utility_strict += strict.utility
            tally.approvals_strict += strict.proposals
            tally.utility_strict_sources += strict_sources.utility
            tally.approvals_strict_sources += strict_sources.proposals
            tally.granted_strict += strict_sources.granted
            row |= {
                "utility_sources": sources.utility,
                "approvals_sources": sources.proposals,
                "granted": sources.granted,
                "utility_strict": strict.utility,
                "approvals_strict": strict.proposals,
                "utility_strict_sources": strict_sources.utility,
                "granted_strict": strict_sources.granted,
            }
        _row(rows, log, row | _detail(off, on, seat))
        for injection_id, injection_task in suite.injection_tasks.items():
            kind = kinds[injection_id]
            if kind == "unplanned":
                tally.unplanned_pairs += 1
                continue
            injections = attack.attack(user_task, injection_task)
            loaded = suite.load_and_inject_default_environment(injections)
            off, on, more = await _runs(name, suite, user_task, injection_task, injections, loaded, seat)
            if kind == "calls":
                tally.pairs += 1
                tally.attacks_off += bool(off.security)
                tally.attacks += bool(on.security)
                if more is not None:
                    tally.attacks_sources += bool(more.sources.security)
                    tally.attacks_strict += bool(more.strict.security)
                    tally.attacks_strict_sources += bool(more.strict_sources.security)
                tally.unseen += not off.saw_injection
            else:
                tally.answer_pairs += 1
                tally.answer_attacks_off += bool(off.security)
                tally.answer_attacks += bool(on.security)
                tally.answer_flagged += on.answer_flagged
            tally.through_trusted += on.through_trusted
            row = {
                "user_task": user_id,
                "injection_task": injection_id,
                "kind": kind,
                "attack_off": off.security,
                "attack": on.security,
                "saw_injection": on.saw_injection,
                "proposals_off": off.proposals,
                "proposals": on.proposals,
            }
            if more is not None:
                row |= {
                    "attack_sources": more.sources.security,
                    "attack_strict": more.strict.security,
                    "attack_strict_sources": more.strict_sources.security,
                }
            _row(rows, log, row | _detail(off, on, seat))
        if progress:
            print(f"{name} {user_id}: {summary_line(tally)}", file=sys.stderr, flush=True)
    return tally, rows


@dataclass(frozen=True, kw_only=True, slots=True)
class Readings:
    """One task's (or pair's) runs beyond off and on: the task's sources declared, strict, strict with them."""

    sources: Episode
    strict: Episode
    strict_sources: Episode


async def _runs(
    name: str,
    suite: Any,
    user_task: Any,
    injection_task: Any,
    injections: dict[str, str],
    loaded: Any,
    seat: Seat | None,
) -> tuple[Episode, Episode, Readings | None]:
    """One task (or pair) run with the policy off and on, then on with the task's sources declared, strict, and
    strict with them. The embedded model is too slow for five runs: it is measured off and on only (`None`)."""
    pair = (name, suite, user_task, injection_task, injections, loaded)
    off = await run_episode(*pair, policy="off", seat=seat)
    on = await run_episode(*pair, policy="on", seat=seat)
    if seat is not None:
        return off, on, None
    return (
        off,
        on,
        Readings(
            sources=await run_episode(*pair, policy="sources"),
            strict=await run_episode(*pair, policy="strict"),
            strict_sources=await run_episode(*pair, policy="strict-sources"),
        ),
    )


def _detail(off: Episode, on: Episode, seat: Seat | None) -> dict[str, Any]:
    """For a model's runs, what it did: the calls that ran, how each run stopped, its answer."""
    if seat is None:
        return {}
    return {
        "calls_off": off.calls,
        "calls": on.calls,
        "stop_off": str(off.stop),
        "stop": str(on.stop),
        "output_off": off.output,
        "output": on.output,
    }


def _row(rows: list[dict[str, Any]], log: TextIO | None, row: dict[str, Any]) -> None:
    rows.append(row)
    if log is not None:
        log.write(json.dumps(row) + "\n")
        log.flush()


async def measure_all(
    names: list[str], suites: dict[str, Any], args: argparse.Namespace
) -> list[tuple[Tally, list[dict[str, Any]]]]:
    """`measure` each suite named, with the model-free executors or the embedded model."""
    if args.executor == "model-free":
        return [await measure(name, suites[name], args.progress, tasks=args.tasks) for name in names]
    from agentkit.providers.local import LocalModel

    measured = []
    log_path = args.out / f"injection-{'-'.join(names)}-local-{datetime.now(UTC).strftime('%Y-%m-%d')}.jsonl"
    with log_path.open("w") as log:
        async with LocalModel(threads=args.threads) as local:
            seat = Seat(caller=local.caller(), model=local.model_name)
            for name in names:
                measured.append(await measure(name, suites[name], args.progress, seat, log, args.tasks))
    return measured


def tally_of(suite: str, rows: list[dict[str, Any]]) -> Tally:
    """The tally an episode log's rows give (a model run stopped early: what finished counts)."""
    tally = Tally(suite=suite)
    for row in rows:
        if "injection_task" not in row:
            tally.tasks += 1
            tally.utility_off += row["utility_off"]
            tally.utility += row["utility"]
            tally.approvals_off += row["approvals_off"]
            tally.approvals += row["approvals"]
        elif row["kind"] == "calls":
            tally.pairs += 1
            tally.attacks_off += bool(row["attack_off"])
            tally.attacks += bool(row["attack"])
        else:
            tally.answer_pairs += 1
            tally.answer_attacks_off += bool(row["attack_off"])
            tally.answer_attacks += bool(row["attack"])
    return tally


def main(argv: list[str] | None = None) -> int:
    """Run the measurement (or read a stopped model run's episode log), write the results file, print the lines."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.injection", description=__doc__)
    parser.add_argument(
        "--suite", action="append", help="workspace, travel, banking or slack (repeatable; all by default)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results file goes")
    parser.add_argument("--progress", action="store_true", help="a line per user task on stderr")
    parser.add_argument(
        "--executor",
        choices=("model-free", "local"),
        default="model-free",
        help="the model-free executors (the default), or the embedded model (the `local` extra)",
    )
    parser.add_argument("--tasks", type=int, default=None, help="only the first N user tasks of each suite")
    parser.add_argument("--threads", type=int, default=1, help="the embedded model's CPU threads")
    parser.add_argument(
        "--from-log",
        type=Path,
        default=None,
        help="write the results file from a model run's episode log (one --suite), e.g. of a run stopped early",
    )
    args = parser.parse_args(argv)
    suites = get_suites(VERSION)
    names = args.suite or list(suites)
    unknown = [name for name in names if name not in suites]
    if unknown:
        parser.error(f"unknown suite {unknown[0]!r}; choose from {', '.join(suites)}")
    started = time.perf_counter()
    tallies: list[Tally] = []
    rows: dict[str, list[dict[str, Any]]] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    complete = args.from_log is None
    if args.from_log is not None:
        if len(names) != 1:
            parser.error("--from-log reads one suite's episode log: name it with --suite")
        logged = [json.loads(line) for line in args.from_log.read_text(encoding="utf-8").splitlines() if line]
        tallies.append(tally_of(names[0], logged))
        rows[names[0]] = logged
        args.executor = "local"
    else:
        for tally, suite_rows in asyncio.run(measure_all(names, suites, args)):
            tallies.append(tally)
            rows[tally.suite] = suite_rows
    whole = total(tallies)
    label = "all" if len(names) == len(suites) else "-".join(names)
    if args.executor == "local":
        label = f"{label}-local"
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    report = {
        "agentdojo": {"suites": VERSION, "attack": ATTACK},
        "executor": args.executor,
        "complete": complete,
        "date": date,
        "machine": f"{platform.machine()} with {os.cpu_count()} cores ({platform.system()})",
        "loadavg": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
        "suites": {tally.suite: tally.as_json() for tally in tallies},
        "total": whole.as_json(),
        "line": summary_line(whole),
        "answer_line": answer_line(whole),
        "sources_line": sources_line(whole) if args.executor == "model-free" else None,
        "strict_line": strict_line(whole) if args.executor == "model-free" else None,
        "episodes": rows,
    }
    (args.out / f"injection-{label}-{date}.json").write_text(json.dumps(report, indent=1) + "\n")
    for tally in tallies:
        print(f"{tally.suite}: {summary_line(tally)}")
    if whole.unplanned_pairs:
        print(f"pairs not attempted (AgentDojo gives their injection task no ground truth): {whole.unplanned_pairs}")
    print(
        f"benign tasks that read no untrusted content: {whole.clean_tasks}, of which asked more approvals "
        f"with the policy on than with tiers only: {whole.clean_asked_more}"
    )
    if whole.unseen:
        print(f"pairs whose injection the compromised executor never saw (policy off): {whole.unseen}")
    if whole.through_trusted:
        print(f"pairs whose injection came back from a tool declared trusted: {whole.through_trusted}")
    if args.executor == "model-free":
        print(sources_line(whole))
        print(strict_line(whole))
    print(answer_line(whole))
    print(summary_line(whole))
    return 0
