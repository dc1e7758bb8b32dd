"""`agentkit temporal`: start durable runs on Temporal, list and show them, decide their proposals.

    agentkit temporal start AGENT --task-queue Q [--ctx JSON] [--run-id ID] [--agents MODULE:ATTR]
    agentkit temporal list
    agentkit temporal show RUN_ID
    agentkit temporal approve RUN_ID --round N --digest D --by NAME [--note TEXT]
    agentkit temporal reject RUN_ID --round N --digest D --by NAME [--reason TEXT]
    agentkit temporal resolve RUN_ID --round N --digest D --by NAME (--ran | --not-ran) [--note TEXT]

Each takes `--address` (default `$TEMPORAL_ADDRESS` or `localhost:7233`), `--namespace`
(default `default`) and `--task-queue` (default `agentkit`; only `start` uses it). The worker
is `agentkit worker --temporal ADDRESS --task-queue Q --agents module:attr`. `start --agents`
names the agents (`DurableAgent` or `AgentSpec` values) so that the ctx is validated before the
run starts (exit status 2 naming each error, nothing started); without it the workers validate it,
and a ctx that does not validate fails the run (`show` says why). A refused decision (wrong digest,
no such pending proposal, already decided, a run that has ended) exits with status 1 and changes
nothing. The SDK (extra `temporal`) is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentkit._cli import import_object, otel_observer, positive_int, skip_teardown
from agentkit.errors import AgentkitError, UsageError

if TYPE_CHECKING:
    from agentkit.temporal import AgentSpec, DurableAgent, DurableRuns

__all__ = ["load_agents", "load_specs", "register", "serve_temporal"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `temporal` command group."""
    group = subparsers.add_parser(
        "temporal", help="durable runs on Temporal: start, list, show, decide", description=__doc__
    )
    commands = group.add_subparsers(
        dest="temporal_command", required=True, metavar="COMMAND", help="what to do with durable runs"
    )

    def command(name: str, help: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help)
        parser.add_argument(
            "--address",
            default=os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
            metavar="HOST:PORT",
            help="the Temporal frontend (default: $TEMPORAL_ADDRESS, else localhost:7233)",
        )
        parser.add_argument(
            "--namespace", default="default", help="the Temporal namespace the runs are in (default: default)"
        )
        parser.add_argument(
            "--task-queue",
            default="agentkit",
            metavar="QUEUE",
            help="(start only) the task queue whose workers play the run (default: agentkit)",
        )
        return parser

    start = command("start", "start a run of a durable agent; prints its run id")
    start.add_argument("agent", metavar="AGENT", help="the durable agent's name")
    start.add_argument("--ctx", default="null", metavar="JSON", help="the run's ctx, as JSON")
    start.add_argument("--run-id", metavar="ID", help="the run id (the workflow id); default a fresh one")
    start.add_argument(
        "--agents",
        action="append",
        metavar="MODULE:ATTR",
        help="DurableAgent or AgentSpec values by import path: validate the ctx before the run starts",
    )
    start.set_defaults(handler=_start)
    listed = command("list", "the most recent runs and their status")
    listed.add_argument("--limit", type=positive_int, default=50, metavar="N", help="list at most N runs (default 50)")
    listed.set_defaults(handler=_list)
    show = command("show", "a run's state and pending proposals, as JSON")
    show.add_argument("run_id", metavar="RUN_ID", help="the run (its workflow id)")
    show.set_defaults(handler=_show)
    for name, help in (("approve", "approve a pending proposal"), ("reject", "reject a pending proposal")):
        decide = command(name, help)
        _proposal_arguments(decide)
        if name == "approve":
            decide.add_argument("--note", default="", dest="reason", help="why, for the record (optional)")
        else:
            decide.add_argument("--reason", default="", help="why not: the executor sees it as the call's observation")
        decide.set_defaults(handler=_decide, approve=name == "approve")
    resolve = command("resolve", "say whether an approved call whose outcome is unknown took effect")
    _proposal_arguments(resolve)
    ran = resolve.add_mutually_exclusive_group(required=True)
    ran.add_argument("--ran", action="store_true", dest="ran", default=None, help="the call took effect")
    ran.add_argument("--not-ran", action="store_false", dest="ran", help="the call did not take effect")
    resolve.add_argument("--note", default="", help="what you checked, for the record (optional)")
    resolve.set_defaults(handler=_resolve)


def _proposal_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", help="the run (its workflow id)")
    parser.add_argument("--round", type=int, required=True, help="the proposal's round (its id in the run)")
    parser.add_argument("--digest", required=True, help="the proposal's digest, as `show` prints it")
    parser.add_argument("--by", required=True, metavar="NAME", help="who decides")


async def _runs(args: argparse.Namespace) -> Any:
    from agentkit.temporal import DurableRuns

    try:
        return await DurableRuns.connect(args.address, task_queue=args.task_queue, namespace=args.namespace)
    except ValueError as invalid:
        # The SDK refuses an address it cannot parse (empty, a space in the host) before connecting.
        raise UsageError(
            f"--address {args.address!r} is not an address ({invalid}); give HOST:PORT, such as localhost:7233"
        ) from None


def _run(work: Any) -> int:
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    skip_teardown()  # Temporal's client threads must not meet the interpreter's finalisation
    try:
        asyncio.run(work)
    except WorkflowUpdateFailedError as refused:
        cause = refused.cause
        print(f"agentkit: refused: {getattr(cause, 'message', None) or cause or refused}", file=sys.stderr)
        return 1
    except (RPCError, AgentkitError, RuntimeError) as error:
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 1
    return 0


def _start(args: argparse.Namespace) -> int:
    try:
        ctx = json.loads(args.ctx)
    except ValueError as wrong:
        print(f"agentkit: error: --ctx is not JSON: {wrong}", file=sys.stderr)
        return 2
    try:
        agent: AgentSpec[Any, Any] | str = _spec(args.agent, args.agents) if args.agents else args.agent
        if not isinstance(agent, str):
            agent.ctx_json(ctx)  # refused here, before connecting: nothing is started
    except AgentkitError as error:
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 2

    async def work() -> None:
        runs: DurableRuns = await _runs(args)
        print((await runs.start(agent, ctx, run_id=args.run_id)).run_id)

    return _run(work())


def _spec(name: str, paths: Sequence[str]) -> AgentSpec[Any, Any]:
    specs = {spec.name: spec for spec in load_specs(paths)}
    if name not in specs:
        raise UsageError(f"--agents names no agent {name!r} (it names {sorted(specs)}); start one of those")
    return specs[name]


def _list(args: argparse.Namespace) -> int:
    async def work() -> None:
        runs: DurableRuns = await _runs(args)
        for run in await runs.list(limit=args.limit):
            started = run.started_at.isoformat(timespec="seconds") if run.started_at else "-"
            print(f"{run.run_id}  {run.status}  {started}")

    return _run(work())


def _show(args: argparse.Namespace) -> int:
    async def work() -> None:
        runs: DurableRuns = await _runs(args)
        print((await runs.state(args.run_id)).model_dump_json(indent=2))

    return _run(work())


def _decide(args: argparse.Namespace) -> int:
    from agentkit.temporal import Decision

    decision = Decision(round=args.round, digest=args.digest, approve=args.approve, by=args.by, reason=args.reason)

    async def work() -> None:
        runs: DurableRuns = await _runs(args)
        state = await runs.decide(args.run_id, decision)
        verb = "approved" if args.approve else "rejected"
        print(f"{verb} round {args.round} of {args.run_id}; run is {state.status.value}")

    return _run(work())


def _resolve(args: argparse.Namespace) -> int:
    async def work() -> None:
        runs: DurableRuns = await _runs(args)
        state = await runs.resolve(args.run_id, args.round, args.digest, ran=args.ran, by=args.by, note=args.note)
        print(f"resolved round {args.round} of {args.run_id}; run is {state.status.value}")

    return _run(work())


def load_agents(paths: Sequence[str]) -> list[DurableAgent[Any, Any]]:
    """The durable agents named by `module:attr` paths (each one agent or a sequence of them)."""
    from agentkit.temporal import DurableAgent

    agents: list[DurableAgent[Any, Any]] = []
    for path, item in _load(paths):
        if not isinstance(item, DurableAgent):
            raise UsageError(f"--agents {path!r}: {item!r} is not a DurableAgent")
        agents.append(item)
    return agents


def load_specs(paths: Sequence[str]) -> list[AgentSpec[Any, Any]]:
    """The specs named by `module:attr` paths: `AgentSpec` values, or `DurableAgent` values (their spec)."""
    from agentkit.temporal import AgentSpec, DurableAgent

    specs: list[AgentSpec[Any, Any]] = []
    for path, item in _load(paths):
        if isinstance(item, DurableAgent):
            specs.append(item.spec)
        elif isinstance(item, AgentSpec):
            specs.append(item)
        else:
            raise UsageError(f"--agents {path!r}: {item!r} is neither an AgentSpec nor a DurableAgent")
    return specs


def _load(paths: Sequence[str]) -> list[tuple[str, object]]:
    """What each `module:attr` path names (one value, or each of a sequence), with its path."""
    loaded: list[tuple[str, object]] = []
    for path in paths:
        found = import_object("--agents", path, "myapp.agents:AGENTS")
        items = list(found) if isinstance(found, Sequence) and not isinstance(found, str) else [found]
        loaded.extend((path, item) for item in items)
    return loaded


def serve_temporal(args: argparse.Namespace) -> int:
    """`agentkit worker --temporal ADDRESS`: serve the agents on the task queue until SIGTERM or Ctrl-C."""
    if not args.agents:
        print("agentkit: error: --temporal needs --agents MODULE:ATTR (the durable agents to serve)", file=sys.stderr)
        return 2
    try:
        agents = load_agents(args.agents)
    except AgentkitError as error:
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 2

    async def serve() -> None:
        from agentkit.temporal import run_worker

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stop.set)
        names = ", ".join(a.name for a in agents)
        print(f"serving {names} on task queue {args.task_queue!r} at {args.temporal}", flush=True)
        await run_worker(
            args.temporal,
            agents,
            task_queue=args.task_queue,
            namespace=args.namespace,
            stop=stop,
            max_concurrent_activities=args.concurrency,
            tracer=tracer,
            observer=observer,
        )

    observer = otel_observer(args)
    tracer = observer.tracer if observer is not None else None
    return _run(serve())
