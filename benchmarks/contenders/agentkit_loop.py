"""agentkit: ``run_tool_loop`` through ``OpenAICaller``, in one ``StructuredMode``."""

from __future__ import annotations

from agentkit import LoopConfig, Prompt, RoleSpec, StopReason, Tier, ToolRoundInfo, run_tool_loop, tool
from agentkit.providers.openai import OpenAICaller, StructuredMode
from benchmarks import scenario

CONFIG = LoopConfig(max_rounds=6)


@tool(tier=Tier.READ_ONLY)
def search(args: scenario.SearchArgs) -> list[scenario.Item]:
    """Search the corpus."""
    return scenario.search_items(args.query)


class Retriever:
    """The executor: the same prompt the floor renders."""

    def role(self) -> RoleSpec:
        return RoleSpec(model=scenario.MODEL)

    def render(self, ctx: str, info: ToolRoundInfo[scenario.Item]) -> Prompt:
        items = [item for batch in info.prior_results for item in batch]
        max_rounds = info.max_rounds or 0
        return Prompt(system=scenario.SYSTEM, dynamic=scenario.step_prompt(ctx, items, info.round, max_rounds))


class AgentkitLoop:
    def __init__(self, base_url: str, mode: str) -> None:
        self.caller = OpenAICaller(base_url=base_url, api_key="bench", mode=StructuredMode(mode))
        self.agent = Retriever()

    async def run(self, run_id: str) -> None:
        result = await run_tool_loop(self.caller, self.agent, search, scenario.question(run_id), CONFIG)
        if result.stop_reason is not StopReason.EXECUTOR_DONE:
            raise scenario.WrongResult(f"run ended {result.stop_reason}: {result.error}")
        scenario.check_items(len(result.items))

    async def aclose(self) -> None:
        await self.caller.aclose()


def make(base_url: str, mode: str) -> AgentkitLoop:
    return AgentkitLoop(base_url, mode)
