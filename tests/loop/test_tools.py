"""@tool and tool-set validation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, Tier, UsageError, run_tool_loop, tool
from agentkit._tools import FunctionTool, declared_tier, validate_tool_names
from agentkit.testing import ScriptedCaller, done_step
from tests.support import Executor


class Args(BaseModel):
    text: str


@tool(tier=Tier.READ_ONLY)
def echo(args: Args) -> list[str]:
    """Echo the text back.

    Longer explanation.
    """
    return [args.text]


@tool(tier=Tier.REVERSIBLE, name="shout", description="Upper-case it.")
async def loud(args: Args) -> Sequence[str]:
    return [args.text.upper()]


async def test_sync_function_becomes_tool() -> None:
    """A sync function keeps its name, docstring, args type and tier, and its call returns the batch."""
    assert echo.name == "echo"
    assert echo.description == "Echo the text back.\n\nLonger explanation."
    assert echo.args_type is Args
    assert echo.tier is Tier.READ_ONLY
    assert await echo.call(Args(text="hi")) == ["hi"]


async def test_async_function_becomes_tool_with_overrides() -> None:
    """An async function is awaited; name and description can be overridden."""
    assert (loud.name, loud.description) == ("shout", "Upper-case it.")
    assert await loud.call(Args(text="hi")) == ["HI"]


async def test_in_thread_runs_blocking_function() -> None:
    """in_thread=True runs a sync function in a worker thread and returns its batch."""

    @tool(tier=Tier.READ_ONLY, in_thread=True)
    def blocking(args: Args) -> list[int]:
        """Blocking call."""
        return [len(args.text)]

    assert await blocking.call(Args(text="abc")) == [3]


def test_tier_must_be_a_tier() -> None:
    """@tool(tier=...) refuses anything that is not a Tier, naming the choices."""
    with pytest.raises(UsageError, match=r"Tier\.IRREVERSIBLE"):
        tool(tier="read_only")  # type: ignore[arg-type]  # the point of the test


def test_parameter_must_be_pydantic_model() -> None:
    """A tool's parameter must be annotated with a pydantic model."""
    with pytest.raises(UsageError, match="pydantic model"):

        @tool(tier=Tier.READ_ONLY)  # type: ignore[type-var, arg-type]  # the point of the test
        def bad(args: str) -> list[str]:
            return [args]


def test_declared_tier_rejects_non_tiers() -> None:
    """declared_tier gives None for a missing tier, None, or a plain int."""

    class NoTier:
        pass

    class IntTier:
        tier = 3

    assert declared_tier(NoTier()) is None
    assert declared_tier(IntTier()) is None
    assert declared_tier(echo) is Tier.READ_ONLY


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "empty name"), ("has space", "not valid"), ("done", "collides"), ("tool", "collides")],
)
def test_bad_tool_names_are_usage_errors(name: str, message: str) -> None:
    """Empty, malformed and reserved names are refused at wiring time."""

    @tool(tier=Tier.READ_ONLY, name=name or None)
    def f(args: Args) -> list[str]:
        return []

    candidate = f if name else type("Nameless", (), {"name": "", "args_type": Args, "tier": Tier.READ_ONLY})()
    with pytest.raises(UsageError, match=message):
        validate_tool_names([candidate])


async def test_a_name_with_a_trailing_newline_is_refused_before_any_model_call() -> None:
    """'wipe\\n' is not a name the model can call: @tool's and FunctionTool's are refused when wired."""

    @tool(tier=Tier.READ_ONLY, name="wipe\n")
    def wipe(args: Args) -> list[str]:
        return []

    def plain(args: Args) -> list[str]:
        return []

    made = FunctionTool(name="wipe\n", description="d", args_type=Args, tier=Tier.READ_ONLY, fn=plain)
    for candidate in (wipe, made):
        with pytest.raises(UsageError, match=r"'wipe\\n' is not valid"):
            validate_tool_names([candidate])
        caller = ScriptedCaller([done_step()])
        with pytest.raises(UsageError, match=r"'wipe\\n' is not valid"):
            await run_tool_loop(caller, Executor[str](), candidate, "ctx", LoopConfig())
        assert caller.requests == []


def test_duplicate_tool_names_are_usage_error() -> None:
    """Two tools with one name are refused."""
    with pytest.raises(UsageError, match="unique"):
        validate_tool_names([echo, echo])


def test_empty_tool_set_is_usage_error() -> None:
    """An empty set of tools is refused."""
    with pytest.raises(UsageError, match="no tools"):
        validate_tool_names([])
