"""The bare-HTTP floor: the same step loop as ``floor`` with no SDK at all.

It posts the same chat-completions JSON as the raw ``openai`` floor through ``httpx2`` (the HTTP
client the ``openai`` package itself ships on), reads the reply with ``json.loads`` and validates
the step with pydantic. No parameter transformation, no response models: the least a Python
client can do per round, so every ratio to it is what the SDK and the framework add.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2

from benchmarks import scenario

MAX_ROUNDS = 6


class HttpxFloor:
    def __init__(self, base_url: str) -> None:
        self.client = httpx2.AsyncClient(
            base_url=base_url,
            headers={"Authorization": "Bearer bench", "Content-Type": "application/json"},
            timeout=600,
            limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
        )
        self.response_format: Any = {
            "type": "json_schema",
            "json_schema": {"name": "Step", "schema": scenario.Step.model_json_schema(), "strict": True},
        }

    async def run(self, run_id: str) -> None:
        question = scenario.question(run_id)
        items: list[scenario.Item] = []
        for round in range(1, MAX_ROUNDS + 1):
            body = {
                "model": scenario.MODEL,
                "messages": [
                    {"role": "system", "content": scenario.SYSTEM},
                    {"role": "user", "content": scenario.step_prompt(question, items, round, MAX_ROUNDS)},
                ],
                "response_format": self.response_format,
            }
            response = await self.client.post("/chat/completions", content=json.dumps(body).encode())
            response.raise_for_status()
            reply = json.loads(response.content)
            step = scenario.Step.model_validate_json(reply["choices"][0]["message"]["content"] or "")
            if step.done or step.call is None:
                break
            items.extend(scenario.search_items(step.call.query))
        scenario.check_items(len(items))

    async def aclose(self) -> None:
        await self.client.aclose()


def make(base_url: str) -> HttpxFloor:
    return HttpxFloor(base_url)
