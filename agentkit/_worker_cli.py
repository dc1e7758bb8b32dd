"""`agentkit worker`: run approved calls from a journal until stopped.

    agentkit worker --db URL --tools module:attr [--tools module:attr ...] [--concurrency N] ...

`--tools` names a `Tool`, or a sequence of tools, by import path (the working directory is on
the import path, as with `python -m`). The worker claims the next approved proposal whose tool
it has, runs it once and records the outcome, printing one line per call. SIGTERM or Ctrl-C stops
it cleanly: no new claims, running calls finish and are recorded, exit code 0 (SIGTERM) or 130
(Ctrl-C). A second signal cancels the running calls: their claims stay `executing` and show in
`agentkit proposals stuck` once their lease runs out. Signals while it closes and exits change
nothing more: the exit code is the first one's.

The backend is one option of a required group. The other is `--temporal ADDRESS`: serve the
durable agents named by `--agents module:attr` on `--task-queue` (namespace `--namespace`),
playing their runs and running their model and tool calls, until SIGTERM or Ctrl-C (see
docs/temporal.md).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TextIO, cast

from agentkit._cli import import_object, otel_observer, positive_int, process_ends_after_command
from agentkit._tools import Tool, takes_ctx
from agentkit.errors import AgentkitError, UsageError

__all__ = ["load_tools", "register"]

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C, as shells report a process ended by SIGINT."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `worker` command."""
    worker = subparsers.add_parser(
        "worker",
        help="run approved calls from a journal, or serve durable agents on Temporal, until stopped",
        description=__doc__,
    )
    backend = worker.add_argument_group("backend (exactly one)").add_mutually_exclusive_group(required=True)
    backend.add_argument("--db", metavar="URL", help="the journal: a SQLite path or a postgresql:// URL")
    backend.add_argument("--temporal", metavar="ADDRESS", help="a Temporal frontend (host:port): serve --agents")
    worker.add_argument("--namespace", default="default", help="(--temporal) the Temporal namespace (default)")
    worker.add_argument("--task-queue", default="agentkit", metavar="QUEUE", help="(--temporal) task queue (agentkit)")
    worker.add_argument(
        "--agents",
        action="append",
        metavar="MODULE:ATTR",
        help="(--temporal) a DurableAgent or a sequence of them, by import path; repeat for more",
    )
    worker.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTR",
        help="a Tool or a sequence of tools, by import path; repeat for more",
    )
    worker.add_argument(
        "--concurrency", type=positive_int, metavar="N", help="calls run at once (--db: 1; --temporal: activities, 100)"
    )
    worker.add_argument("--name", metavar="NAME", help="the name recorded as claimed_by (default host:pid)")
    worker.add_argument(
        "--lease", type=_positive_float, default=30.0, metavar="SECONDS", help="each claim's lease, renewed (30)"
    )
    worker.add_argument(
        "--poll",
        type=_positive_float,
        metavar="SECONDS",
        help="longest wait between looks: SQLite's poll (0.5), PostgreSQL's safety net besides LISTEN (30)",
    )
    worker.add_argument("--limit", type=positive_int, metavar="N", help="exit after claiming N proposals")
    worker.add_argument("--until-empty", action="store_true", help="exit once nothing is approved for these tools")
    worker.add_argument("--quiet", action="store_true", help="print only the summary")
    worker.add_argument(
        "--otel",
        action="store_true",
        help="trace each call (and, with --temporal, the workflow) through the global OpenTelemetry providers "
        "(extra otel; configure them with opentelemetry-instrument or in your tools' module)",
    )
    worker.set_defaults(handler=_handle)


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def load_tools(paths: Sequence[str]) -> list[Tool[Any, Any]]:
    """The tools named by `module:attr` paths (each a tool or a sequence of tools); `UsageError` otherwise,
    or for a tool that takes the run's ctx (the command has none to give it)."""
    tools: list[Tool[Any, Any]] = []
    for path in paths:
        found = import_object("--tools", path, "myapp.tools:TOOLS")
        items = list(found) if isinstance(found, Sequence) and not isinstance(found, str) else [found]
        for item in items:
            if not all(hasattr(item, name) for name in ("name", "args_type", "call")):
                raise UsageError(f"--tools {path!r}: {item!r} is not a Tool (make it with @tool or implement Tool)")
            if takes_ctx(item):
                raise UsageError(
                    f"--tools {path!r}: tool {getattr(item, 'name', item)!r} takes the run's ctx, which this command "
                    "cannot give; run it in your own process with journal.work(tools, ctx=...)"
                )
            tools.append(cast("Tool[Any, Any]", item))
    return tools


def _handle(args: argparse.Namespace) -> int:
    if args.temporal is not None:
        from agentkit._temporal_cli import serve_temporal

        return serve_temporal(args)
    if not args.tools:
        print(
            "agentkit: error: --db needs --tools MODULE:ATTR (the tools whose approved calls to run)", file=sys.stderr
        )
        return 2
    if args.concurrency is None:
        args.concurrency = 1
    try:
        tools = load_tools(args.tools)
    except AgentkitError as error:
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 2
    stops = _StopSignals()
    try:
        interrupted = asyncio.run(_serve(args, tools, sys.stdout, stops))
    except AgentkitError as error:
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 1
    finally:
        if not process_ends_after_command():
            stops.restore()
    return EXIT_INTERRUPTED if interrupted else 0


class _StopSignals:
    """SIGINT and SIGTERM for the worker, from the moment it serves until the process exits.

    While it serves (its journal open, then closing), each signal is handed to the loop. Once the
    journal is closed, signals are ignored: the process ends with the first one's exit code, however
    many `timeout -s INT` or an impatient operator send while it closes and exits. The default
    handlers are never put back in between (they were, before the journal closed, and a second
    signal then met them: a traceback, a hang, or death by the signal); a command run in a process
    that goes on (`main()`) gives back the handlers it found once it has returned.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._found = {number: signal.getsignal(number) for number in self.SIGNALS}
        self._to: tuple[asyncio.AbstractEventLoop, Callable[[int], None]] | None = None

    def serve(self, loop: asyncio.AbstractEventLoop, on_signal: Callable[[int], None]) -> None:
        """Hand each signal to `on_signal`, on `loop`."""
        self._to = (loop, on_signal)
        for number in self.SIGNALS:
            signal.signal(number, self._caught)

    def done(self) -> None:
        """From now on, a signal changes nothing: it is ignored (a Python handler would not do, as the
        interpreter's finalisation sets the default one back; an ignored signal stays ignored)."""
        self._to = None
        for number in self.SIGNALS:
            signal.signal(number, signal.SIG_IGN)

    def restore(self) -> None:
        """The handlers found before the worker started."""
        self._to = None
        for number, handler in self._found.items():
            signal.signal(number, handler)

    def _caught(self, number: int, frame: object) -> None:
        # Python runs this in the main thread, between the loop's steps: the loop is running or gone.
        to = self._to
        if to is not None and not to[0].is_closed():
            to[0].call_soon_threadsafe(to[1], number)


async def _serve(args: argparse.Namespace, tools: list[Tool[Any, Any]], out: TextIO, stops: _StopSignals) -> bool:
    """Run the worker; `True` when Ctrl-C stopped it."""
    from agentkit.journal import Worked, WorkOutcome, open_journal

    stop = asyncio.Event()
    signals: list[int] = []
    work_task: asyncio.Task[Any] | None = None

    def on_signal(number: int) -> None:
        signals.append(number)
        if len(signals) == 1:
            name = signal.Signals(number).name
            print(f"{name}: stopping; running calls finish (signal again to cancel them)", file=out)
            out.flush()
            stop.set()
        elif work_task is not None:
            work_task.cancel()

    def report(worked: Worked) -> None:
        if args.quiet and worked.outcome is not WorkOutcome.NOT_RECORDED:
            return
        detail = f": {worked.error}" if worked.error else ""
        if worked.outcome is WorkOutcome.EXECUTED and worked.execution is not None:
            detail = f" ({len(worked.execution.batch)} items)"
        print(f"{worked.outcome.value} {worked.proposal_id} {worked.tool_name}{detail}".rstrip(), file=out)
        out.flush()

    stops.serve(asyncio.get_running_loop(), on_signal)
    journal = open_journal(args.db, create=False)
    try:
        names = ", ".join(tool.name for tool in tools)
        print(f"worker on {journal.where}: tools {names}; concurrency {args.concurrency}", file=out)
        out.flush()
        work_task = asyncio.ensure_future(
            journal.work(
                tools,
                limit=args.limit,
                stop=stop,
                concurrency=args.concurrency,
                until_empty=args.until_empty,
                worker=args.name,
                lease=timedelta(seconds=args.lease),
                poll=args.poll,
                report=report,
                observer=otel_observer(args),
            )
        )
        try:
            done = await work_task
        except asyncio.CancelledError:
            # A thread cannot be interrupted: only an async tool's call stops here; a sync tool's runs to its end.
            print(
                "cancelled: running calls of async tools were interrupted; a sync tool's call cannot be, so it runs "
                "to its end and is recorded unless the cancel reached its worker first. A call left unrecorded stays "
                "executing; `agentkit proposals stuck` lists it once its lease runs out",
                file=out,
            )
            return signal.SIGINT in signals
        print(
            f"stopped: {done.executed} executed, {done.failed} failed, {len(done.not_recorded)} not recorded, "
            f"{len(done.left)} left",
            file=out,
        )
        return bool(signals) and signals[0] == signal.SIGINT
    finally:
        # A signal while the journal closes is still handled (the second one cancels nothing left to run).
        await journal.close()
        stops.done()
