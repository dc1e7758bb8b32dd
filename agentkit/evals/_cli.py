"""`agentkit eval run` evaluates a dataset with an agent and writes the report; `agentkit eval compare`
compares two reports and exits 1 on a regression, so that it can gate a change."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from agentkit._cli import import_object, positive_int
from agentkit._runner import ToolLoop
from agentkit._structured import StructuredCaller
from agentkit.errors import UsageError
from agentkit.evals._dataset import Dataset
from agentkit.evals._report import EvalReport, RunReport, compare
from agentkit.evals._run import Task, evaluate

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `eval` command group."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval", help="evaluate an agent over a dataset; compare two reports", description=__doc__
    )
    commands = parser.add_subparsers(dest="eval_command", required=True, metavar="COMMAND", help="the eval command")

    run = commands.add_parser(
        "run",
        help="run every case of a dataset with an agent; print the table, write the report",
        description="Run every case of DATASET with the agent the factory makes, and print the report's table.",
    )
    run.add_argument("dataset", metavar="DATASET", help="MODULE:ATTR naming a Dataset, or a dataset's JSON file")
    run.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:FACTORY",
        help="a function (caller, model) returning loop.run of a ToolLoop (or the ToolLoop) that runs one case",
    )
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server")
    where.add_argument("--local", action="store_true", help="the embedded model (the 'local' extra)")
    run.add_argument("--model", metavar="NAME", help="the model name on --base-url")
    run.add_argument("--api-key", metavar="KEY", help="the API key for --base-url (default: $OPENAI_API_KEY)")
    run.add_argument("--threads", type=positive_int, default=1, metavar="N", help="CPU threads for --local (default 1)")
    run.add_argument("--repeats", type=positive_int, default=1, metavar="N", help="runs per case (default 1)")
    run.add_argument("--concurrency", type=positive_int, default=1, metavar="N", help="runs at once (default 1)")
    run.add_argument("--label", default="", metavar="TEXT", help="what is evaluated (default: the model's name)")
    run.add_argument("--out", type=Path, metavar="PATH", help="write the report here as JSON")
    run.set_defaults(handler=_run)

    comparing = commands.add_parser(
        "compare",
        help="list the regressions from one report to another; exit 1 if there is one",
        description=(
            "Compare CANDIDATE with BASELINE: cases that passed and now fail, a pass rate dropped beyond the spread "
            "across repeats, new stalemates, changed proposals, and cost up. Exit 0 without a regression, 1 with "
            "one, 2 when the reports cannot be compared."
        ),
    )
    comparing.add_argument("baseline", type=Path, metavar="BASELINE", help="the report to compare with")
    comparing.add_argument("candidate", type=Path, metavar="CANDIDATE", help="the report of the change")
    comparing.add_argument(
        "--cost-tolerance", type=_fraction, default=0.10, metavar="F", help="tokens per run may rise by F (0.10)"
    )
    comparing.add_argument(
        "--rate-tolerance",
        type=_fraction,
        default=0.0,
        metavar="F",
        help="the pass rate may drop by F more (0)",
    )
    comparing.set_defaults(handler=_compare)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.1, got {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a fraction >= 0, got {text}")
    return value


def _compare(args: argparse.Namespace) -> int:
    try:
        comparison = compare(
            EvalReport.load(args.baseline),
            EvalReport.load(args.candidate),
            cost_tolerance=args.cost_tolerance,
            rate_tolerance=args.rate_tolerance,
        )
    except UsageError as error:
        print(f"agentkit eval compare: {error}", file=sys.stderr)
        return 2
    print(comparison.text())
    return 0 if comparison.ok else 1


def _run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    if args.base_url and not args.model:
        parser.error("--base-url needs --model, the model name that server serves")
    if args.local and (args.model or args.api_key):
        parser.error("--model and --api-key name a model on --base-url; --local needs neither")
    try:
        if args.out is not None:
            _check_writable(args.out)  # before the evaluation: a report it could not keep would be lost
        dataset = _dataset(args.dataset)
        factory = import_object("--agent", args.agent, "myapp.agents:make_agent")
        if not callable(factory):
            raise UsageError(f"--agent {args.agent!r} is not a function (caller, model) -> task")
        report = asyncio.run(_evaluate(args, dataset, factory))
    except UsageError as error:
        print(f"agentkit eval run: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agentkit eval run: interrupted", file=sys.stderr)
        return 130
    print(report.table())
    if args.out is not None:
        try:
            report.save(args.out)
        except OSError as failed:
            print(
                f"agentkit eval run: the report is above, but --out {str(args.out)!r} could not be written: "
                f"{failed.strerror or failed}",
                file=sys.stderr,
            )
            return 1
        print(f"\nreport written to {args.out}")
    return 0


def _check_writable(out: Path) -> None:
    """Refuse an `--out` path the report could not be written to (a folder, a missing or read-only folder)."""
    folder = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UsageError(f"--out {str(out)!r} is a folder; give a file path, such as {str(out / 'report.json')!r}")
    if not folder.is_dir():
        raise UsageError(f"--out {str(out)!r}: the folder {str(folder)!r} does not exist; create it first")
    if not os.access(out if out.exists() else folder, os.W_OK):
        raise UsageError(f"--out {str(out)!r} cannot be written (no permission); choose another path")


def _dataset(spec: str) -> Dataset[Any]:
    if spec.endswith(".json") or (":" not in spec and Path(spec).exists()):
        return Dataset.from_file(spec)
    found = import_object("DATASET", spec, "myapp.evals:QUESTIONS")
    if not isinstance(found, Dataset):
        raise UsageError(f"{spec!r} is a {type(found).__name__}, not a Dataset")
    return found


@asynccontextmanager
async def _caller(args: argparse.Namespace) -> AsyncIterator[tuple[StructuredCaller, str]]:
    if args.base_url:
        from agentkit.providers.openai import OpenAICaller

        remote = OpenAICaller(
            base_url=args.base_url, api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "none"
        )
        try:
            yield remote, args.model
        finally:
            await remote.aclose()
        return
    from agentkit.providers.local import LocalModel

    print(f"starting the embedded model ({args.threads} thread(s)) ...", file=sys.stderr, flush=True)
    async with LocalModel(threads=args.threads) as local:
        caller = local.caller()
        try:
            yield caller, local.model_name
        finally:
            await caller.aclose()


async def _evaluate(args: argparse.Namespace, dataset: Dataset[Any], factory: Callable[..., Any]) -> EvalReport:
    async with _caller(args) as (caller, model):
        made = factory(caller, model)
        task: Task[Any, Any, Any] = made.run if isinstance(made, ToolLoop) else made
        if not callable(task):
            raise UsageError(f"--agent {args.agent!r} returned a {type(made).__name__}, not a task or a ToolLoop")
        total = len(dataset.cases) * args.repeats
        with _progress(total) as advance:
            return await evaluate(
                dataset,
                task,
                repeats=args.repeats,
                concurrency=args.concurrency,
                label=args.label or model,
                on_run=advance,
            )


@contextmanager
def _progress(total: int) -> Iterator[Callable[[str, RunReport], None] | None]:
    """A progress bar on a terminal's stderr (`rich`, the `evals` extra); nothing elsewhere or without it."""
    try:
        from rich.console import Console
        from rich.progress import Progress
    except ImportError:
        yield None
        return
    if not sys.stderr.isatty():
        yield None
        return
    failed = 0
    with Progress(console=Console(stderr=True), transient=True) as progress:
        bar = progress.add_task("evaluating", total=total)

        def advance(case: str, report: RunReport) -> None:
            nonlocal failed
            failed += not report.passed
            progress.update(bar, advance=1, description=f"{case} ({failed} failed)")

        yield advance
