"""Workers: the workflow and the activities for a set of durable agents, on one task queue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from agentkit._observe import ObserverArg, observers_of
from agentkit.temporal._activities import Activities, record_tools
from agentkit.temporal._agent import DurableAgent, agents_by_name
from agentkit.temporal._tracing import interceptors
from agentkit.temporal._workflow import workflow_for

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["build_worker", "connect", "run_worker"]


async def connect(address: str, *, namespace: str = "default", tracer: Tracer | None = None) -> Client:
    """A Temporal client with the pydantic data converter, which every agentkit value needs.

    With a `tracer`, the client traces through temporalio's OpenTelemetry interceptor
    (`temporalio.contrib.opentelemetry.TracingInterceptor`), and so do the workers built on it: a run's
    workflow and activity spans, and the spans of what its activities do, join the trace the run was
    started in, across workers and legs.
    """
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter, interceptors=interceptors(tracer)
    )


def build_worker(
    client: Client,
    agents: DurableAgent[Any, Any] | Sequence[DurableAgent[Any, Any]],
    *,
    task_queue: str,
    max_concurrent_activities: int | None = None,
    graceful_shutdown: timedelta = timedelta(seconds=30),
    observer: ObserverArg = None,
) -> Worker:
    """A worker (not yet running) that plays the runs of `agents` and runs their model and tool calls.

    Start it with `async with worker:` or `await worker.run()`. `max_concurrent_activities` bounds
    the tool calls it runs as activities at once and, apart from them, its local activities (model calls
    and live READ_ONLY tool calls, run in the workflow tasks it plays). Any number of workers, in any
    number of processes and machines, may serve one task queue: Temporal spreads the runs and
    their activities over them, and a run whose worker dies goes on on another. On shutdown,
    running activities get `graceful_shutdown` to finish before they are cancelled (a cancelled
    approved call is an unknown outcome, never re-run).

    `observer` wraps each model attempt and tool call the worker's activities make (`Observer.around`:
    an `OTelObserver` gives each its `chat` or `execute_tool` span, with the run id, the round and,
    for an approved call, who approved it). Trace the client with `connect(..., tracer=...)` so that
    those spans nest under the activities' own.

    Raises:
        UsageError: two agents of one name, or none.
    """
    named = agents_by_name(agents)
    activities = Activities(named, observers_of(observer))
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow_for(named)],
        activities=[activities.model_call, activities.tool_call, activities.use_grant, record_tools],
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max_concurrent_activities,
        graceful_shutdown_timeout=graceful_shutdown,
    )


async def run_worker(
    address: str,
    agents: DurableAgent[Any, Any] | Sequence[DurableAgent[Any, Any]],
    *,
    task_queue: str,
    namespace: str = "default",
    stop: asyncio.Event | None = None,
    max_concurrent_activities: int | None = None,
    tracer: Tracer | None = None,
    observer: ObserverArg = None,
) -> None:
    """Connect to Temporal at `address` and serve `agents` on `task_queue` until `stop` is set
    (forever without one); running activities then get 30 s to finish. `tracer` as for `connect`,
    `observer` as for `build_worker`."""
    client = await connect(address, namespace=namespace, tracer=tracer)
    worker = build_worker(
        client,
        agents,
        task_queue=task_queue,
        max_concurrent_activities=max_concurrent_activities,
        observer=observer,
    )
    async with worker:
        await (stop or asyncio.Event()).wait()
