"""pydantic-ai: an ``Agent`` with a ``search`` tool and ``output_type=Answer``."""

from __future__ import annotations

import openai
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from benchmarks import scenario


class PydanticAI:
    def __init__(self, base_url: str) -> None:
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        model = OpenAIChatModel(scenario.MODEL, provider=OpenAIProvider(openai_client=self.client))
        self.agent = Agent(model, output_type=scenario.Answer, system_prompt=scenario.SYSTEM)

        @self.agent.tool_plain
        def search(query: str) -> str:
            """Search the corpus."""
            return scenario.items_json(scenario.search_items(query))

    async def run(self, run_id: str) -> None:
        result = await self.agent.run(scenario.question(run_id))
        scenario.check_answer(result.output)

    async def aclose(self) -> None:
        await self.client.close()


def make(base_url: str) -> PydanticAI:
    return PydanticAI(base_url)
