"""assert_type checks for the core API (mypy only)."""

from __future__ import annotations

from typing import Any, Literal, assert_type

from agentkit import (
    FunctionTool,
    LoopConfig,
    Outcome,
    PriorCall,
    RepeatPolicy,
    RoundRecord,
    StopReason,
    StructuredRequest,
    Tier,
    TieredLoopResult,
    Tool,
    ToolLoopResult,
    ToolStep,
    Usage,
    generate_structured,
    parse_tier,
    run_tool_loop,
    run_tool_loop_sync,
    run_tool_loop_tiered,
    tool_set,
)
from agentkit._degeneration import repeat_of
from agentkit._structured import Completion
from agentkit.errors import AgentkitError, ProviderError, TierParseError, Truncated
from agentkit.events import DegenerationDetected
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, Finder, SearchArgs, asearch, delete, search


async def check() -> None:
    assert_type(search, FunctionTool[SearchArgs, Doc])
    assert_type(asearch, FunctionTool[SearchArgs, Doc])
    caller = ScriptedCaller()

    result = await run_tool_loop(caller, Finder(), search, "ctx")
    assert_type(result, ToolLoopResult[Doc])
    assert_type(result.items, list[Doc])
    assert_type(result.outcome, Outcome)
    assert_type(result.stop_reason, StopReason)
    assert_type(result.error, AgentkitError | None)
    assert_type(result.usage, Usage)
    assert_type(result.trace, tuple[RoundRecord, ...])
    assert_type(result.raise_for_error(), ToolLoopResult[Doc])

    assert_type(await run_tool_loop(caller, Finder(), asearch, "ctx", LoopConfig(max_rounds=None)), ToolLoopResult[Doc])
    assert_type(run_tool_loop_sync(caller, Finder(), search, "ctx"), ToolLoopResult[Doc])

    tiered = await run_tool_loop_tiered(caller, Finder(), delete, "ctx")
    assert_type(tiered, TieredLoopResult[DeleteArgs, Doc])
    assert_type(tiered.proposed[0].args, DeleteArgs)
    assert_type(tiered.items, list[Doc])

    mixed = await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx")
    assert_type(mixed.items, list[Doc])
    kept = tool_set(search, delete)
    assert_type(kept, tuple[Tool[Any, Doc], ...])
    assert_type((await run_tool_loop_tiered(caller, Finder(), kept, "ctx")).items, list[Doc])

    completion = await generate_structured(caller, StructuredRequest(system="", dynamic="", model="m"), SearchArgs)
    assert_type(completion, Completion[SearchArgs])
    assert_type(completion.value, SearchArgs)
    assert_type(ToolStep[SearchArgs].model_validate({}).call, SearchArgs | None)
    assert_type(parse_tier("x"), tuple[Tier, TierParseError | None])
    assert_type(ProviderError("x").usage, Usage | None)

    cut = Truncated("cut", raw="{", max_tokens=5)
    assert_type(cut.max_tokens, int | None)
    assert_type(cut.raw, str | None)
    assert_type(cut.schema_name, str)
    assert_type(StopReason.MAX_TOKENS, Literal[StopReason.MAX_TOKENS])


def repeat_policy() -> None:
    config = LoopConfig(on_repeat=RepeatPolicy.REFUSE, repeat_refusals=3)
    assert_type(config.on_repeat, RepeatPolicy)
    assert_type(config.repeat_refusals, int)
    assert_type(PriorCall(round=2, tool_name="search", args=SearchArgs(query="q"), repeats=1).repeats, int | None)
    event = DegenerationDetected(run_id="r", round=2, tool_name="search", args=SearchArgs(query="q"), refused=True)
    assert_type(event.refused, bool)
    assert_type(repeat_of("search", SearchArgs(query="q"), [("search", SearchArgs(query="q"))], None, 3), int | None)
    LoopConfig(on_repeat="refuse")  # type: ignore[arg-type]  # a RepeatPolicy, not a string
