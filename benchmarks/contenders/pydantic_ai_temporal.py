"""pydantic-ai's ``TemporalAgent`` for ``benchmarks.temporal_rounds``; run in an environment with
``pydantic-ai-slim[openai,temporal]`` (not the project's), against the servers the benchmark started.

    python pydantic_ai_temporal.py MODEL_BASE_URL TEMPORAL_ADDRESS ROUNDS REPEATS

Prints the wall seconds of each run (after one warm-up run) as a JSON list on its last line. The
model server answers ROUNDS ``search`` tool calls, then text, per run.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin, TemporalAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

BASE_URL, ADDRESS, ROUNDS, REPEATS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

agent = Agent(OpenAIChatModel("m", provider=OpenAIProvider(base_url=BASE_URL, api_key="k")), name="bench")


@agent.tool_plain
def search(query: str) -> list[str]:
    """Search."""
    return [query]


durable = TemporalAgent(agent)


@workflow.defn(sandboxed=False)
class BenchWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await durable.run(prompt)
        return result.output


async def main() -> None:
    client = await Client.connect(ADDRESS, plugins=[PydanticAIPlugin()])
    queue = f"pai-{uuid.uuid4().hex[:6]}"
    seconds: list[float] = []
    async with Worker(client, task_queue=queue, workflows=[BenchWorkflow], plugins=[AgentPlugin(durable)]):
        for index in range(REPEATS + 1):
            started = time.perf_counter()
            await client.execute_workflow(BenchWorkflow.run, "t", id=f"{queue}-{index}", task_queue=queue)
            seconds.append(time.perf_counter() - started)
    print(json.dumps(seconds[1:]))


asyncio.run(main())
