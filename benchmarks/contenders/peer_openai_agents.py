"""The OpenAI Agents SDK: an ``Agent`` with a ``search`` function tool and ``output_type=Answer``.

The model is the SDK's chat-completions model (the benchmark server, like most OpenAI-compatible
servers, speaks chat completions), and tracing is off (it would upload traces to OpenAI).
"""

from __future__ import annotations

import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

from benchmarks import scenario


@function_tool
def search(query: str) -> str:
    """Search the corpus."""
    return scenario.items_json(scenario.search_items(query))


class OpenAIAgents:
    def __init__(self, base_url: str) -> None:
        set_tracing_disabled(True)
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.agent = Agent(
            name="retriever",
            instructions=scenario.SYSTEM,
            tools=[search],
            output_type=scenario.Answer,
            model=OpenAIChatCompletionsModel(model=scenario.MODEL, openai_client=self.client),
        )

    async def run(self, run_id: str) -> None:
        result = await Runner.run(self.agent, scenario.question(run_id))
        scenario.check_answer(result.final_output_as(scenario.Answer, raise_if_incorrect_type=True))

    async def aclose(self) -> None:
        await self.client.close()


def make(base_url: str) -> OpenAIAgents:
    return OpenAIAgents(base_url)
