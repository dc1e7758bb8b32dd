"""A hand-written step loop over instructor's patched ``create`` (what agentkit is measured against).

The client is patched once and the step model is defined once; each round is one
``chat.completions.create(response_model=Step)``, exactly as instructor's documentation shows.
"""

from __future__ import annotations

import instructor
import openai

from benchmarks import scenario

MAX_ROUNDS = 6


class InstructorLoop:
    def __init__(self, base_url: str, mode: str) -> None:
        self.raw = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        self.client = instructor.from_openai(self.raw, mode=instructor.Mode[mode.upper()])

    async def run(self, run_id: str) -> None:
        question = scenario.question(run_id)
        items: list[scenario.Item] = []
        for round in range(1, MAX_ROUNDS + 1):
            step = await self.client.chat.completions.create(
                model=scenario.MODEL,
                response_model=scenario.Step,
                messages=[
                    {"role": "system", "content": scenario.SYSTEM},
                    {"role": "user", "content": scenario.step_prompt(question, items, round, MAX_ROUNDS)},
                ],
            )
            if step.done or step.call is None:
                break
            items.extend(scenario.search_items(step.call.query))
        scenario.check_items(len(items))

    async def aclose(self) -> None:
        await self.raw.close()


def make(base_url: str, mode: str) -> InstructorLoop:
    return InstructorLoop(base_url, mode)
