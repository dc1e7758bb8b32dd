"""The raw ``openai`` client doing the peers' protocol: tool calling over a growing message history.

Two tools are offered (``search`` and ``answer``, whose arguments are the typed final answer);
each search result goes back as a tool message. This is what pydantic-ai, the Agents SDK and
LangGraph do on the wire, written by hand with nothing else around it.
"""

from __future__ import annotations

from typing import Any

import openai

from benchmarks import scenario

MAX_ROUNDS = 6


def _function(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


class RawTools:
    def __init__(self, base_url: str) -> None:
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.tools: Any = [
            _function("search", "Search the corpus.", scenario.SearchArgs.model_json_schema()),
            _function("answer", "Give the final answer.", scenario.Answer.model_json_schema()),
        ]

    async def run(self, run_id: str) -> None:
        messages: list[Any] = [
            {"role": "system", "content": scenario.SYSTEM},
            {"role": "user", "content": scenario.question(run_id)},
        ]
        for _ in range(MAX_ROUNDS):
            response = await self.client.chat.completions.create(
                model=scenario.MODEL, messages=messages, tools=self.tools, tool_choice="required"
            )
            message = response.choices[0].message
            call = (message.tool_calls or [])[0]
            assert call.type == "function"
            if call.function.name == "answer":
                scenario.check_answer(scenario.Answer.model_validate_json(call.function.arguments))
                return
            args = scenario.SearchArgs.model_validate_json(call.function.arguments)
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": "search", "arguments": call.function.arguments},
                        }
                    ],
                }
            )
            items = scenario.search_items(args.query)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": scenario.items_json(items)})
        raise scenario.WrongResult(f"no final answer after {MAX_ROUNDS} rounds")

    async def aclose(self) -> None:
        await self.client.close()


def make(base_url: str) -> RawTools:
    return RawTools(base_url)
