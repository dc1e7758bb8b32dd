"""The floor: the raw ``openai`` async client in a minimal hand-written step loop.

It does the least work that does the scenario with a typed reply: the JSON schema and the
request extras are built once, each round renders the prompt, makes one call and validates the
reply with pydantic. Every other contender's cost is read against this one.
"""

from __future__ import annotations

from typing import Any

import openai

from benchmarks import scenario

MAX_ROUNDS = 6


class RawFloor:
    def __init__(self, base_url: str) -> None:
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.response_format: Any = {
            "type": "json_schema",
            "json_schema": {"name": "Step", "schema": scenario.Step.model_json_schema(), "strict": True},
        }

    async def run(self, run_id: str) -> None:
        question = scenario.question(run_id)
        items: list[scenario.Item] = []
        for round in range(1, MAX_ROUNDS + 1):
            response = await self.client.chat.completions.create(
                model=scenario.MODEL,
                messages=[
                    {"role": "system", "content": scenario.SYSTEM},
                    {"role": "user", "content": scenario.step_prompt(question, items, round, MAX_ROUNDS)},
                ],
                response_format=self.response_format,
            )
            step = scenario.Step.model_validate_json(response.choices[0].message.content or "")
            if step.done or step.call is None:
                break
            items.extend(scenario.search_items(step.call.query))
        scenario.check_items(len(items))

    async def aclose(self) -> None:
        await self.client.close()


def make(base_url: str) -> RawFloor:
    return RawFloor(base_url)
