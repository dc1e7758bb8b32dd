"""Tracing durable runs: temporalio's OpenTelemetry interceptor on the client (and so on its workers), and
the `invoke_agent` span a traced client starts a run in, which every span of the run then descends from.

OpenTelemetry is imported only when a tracer is given: the `temporal` extra does not need it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from temporalio.client import Interceptor

__all__ = ["interceptors", "started"]


def interceptors(tracer: Tracer | None) -> Sequence[Interceptor]:
    """The client's interceptors: temporalio's `TracingInterceptor` over `tracer`, or none."""
    if tracer is None:
        return ()
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return (TracingInterceptor(tracer),)


@contextlib.contextmanager
def started(tracer: Tracer | None, agent: str, run_id: str) -> Iterator[None]:
    """The run's `invoke_agent` span (CLIENT: the agent runs on the workers), current while the client
    starts the workflow, so that the workflow's, its activities' and agentkit's spans in them join its trace."""
    if tracer is None:
        yield
        return
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "_OTHER",
        "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": run_id,
        "agentkit.run_id": run_id,
    }
    with tracer.start_as_current_span(f"invoke_agent {agent}", kind=SpanKind.CLIENT, attributes=attributes):
        yield
