"""Workers: the workflow and the activities for a set of durable agents, on one task queue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from agentkit.temporal._activities import Activities, record_tools
from agentkit.temporal._agent import DurableAgent, agents_by_name
from agentkit.temporal._workflow import workflow_for

__all__ = ["build_worker", "connect", "run_worker"]


async def connect(address: str, *, namespace: str = "default") -> Client:
    """A Temporal client with the pydantic data converter, which every agentkit value needs."""
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)


def build_worker(
    client: Client,
    agents: DurableAgent[Any, Any] | Sequence[DurableAgent[Any, Any]],
    *,
    task_queue: str,
    max_concurrent_activities: int | None = None,
    graceful_shutdown: timedelta = timedelta(seconds=30),
) -> Worker:
    """A worker (not yet running) that plays the runs of ``agents`` and runs their model and tool calls.

    Start it with ``async with worker:`` or ``await worker.run()``. Any number of workers, in any
    number of processes and machines, may serve one task queue: Temporal spreads the runs and
    their activities over them, and a run whose worker dies goes on on another. On shutdown,
    running activities get ``graceful_shutdown`` to finish before they are cancelled (a cancelled
    approved call is an unknown outcome, never re-run).

    Raises:
        UsageError: two agents of one name, or none.
    """
    named = agents_by_name(agents)
    activities = Activities(named)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow_for(named)],
        activities=[activities.model_call, activities.tool_call, record_tools],
        max_concurrent_activities=max_concurrent_activities,
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
) -> None:
    """Connect to Temporal at ``address`` and serve ``agents`` on ``task_queue`` until ``stop`` is set
    (forever without one); running activities then get 30 s to finish."""
    client = await connect(address, namespace=namespace)
    worker = build_worker(client, agents, task_queue=task_queue, max_concurrent_activities=max_concurrent_activities)
    async with worker:
        await (stop or asyncio.Event()).wait()
