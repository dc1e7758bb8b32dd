"""Run-time behaviour of the typed helpers: narrow, call_step by tool, unwrap (types: tests/typing)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from agentkit import (
    Outcome,
    ProposedAction,
    StopReason,
    Tier,
    UsageError,
    run_once,
    run_once_text,
    run_tool_loop_tiered,
    tool,
)
from agentkit._approval import approve, execute_approved
from agentkit._pair import PairConfig, RulesVerifier, pair
from agentkit.errors import AgentkitError, ProviderError, Throttled
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Classifier, Executor, Label, PathArgs


class FetchArgs(BaseModel):
    doc_id: str


@tool(tier=Tier.IRREVERSIBLE)
def remove(args: PathArgs) -> list[str]:
    """Remove a path."""
    return [f"removed {args.path}"]


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: PathArgs) -> list[str]:
    """Wipe a path."""
    return [f"wiped {args.path}"]


@tool(tier=Tier.READ_ONLY)
def fetch(args: FetchArgs) -> list[str]:
    """Fetch a document."""
    return [args.doc_id]


async def proposals() -> list[ProposedAction[BaseModel]]:
    caller = ScriptedCaller(
        [call_step(FetchArgs(doc_id="d1"), tool=fetch), call_step(PathArgs(path="/a"), tool=remove), done_step()]
    )
    result = await run_tool_loop_tiered(caller, Executor[str](), [fetch, remove, wipe], "ctx")
    assert result.items == ["d1"]
    return result.proposed


async def test_call_step_with_the_tool_object_names_it() -> None:
    """call_step(args, tool=<Tool>) builds the same step as the tool's name does."""
    assert call_step(PathArgs(path="/a"), tool=remove) == call_step(PathArgs(path="/a"), tool="remove")
    assert call_step(PathArgs(path="/a"), tool=remove, rationale="r")["call"] == {
        "tool": "remove",
        "args": {"path": "/a"},
    }


async def test_narrow_types_a_proposal_by_its_tool_or_gives_none() -> None:
    """narrow(tool) returns the proposal for a call of that tool, None for any other tool."""
    [proposal] = await proposals()
    narrowed = proposal.narrow(remove)
    assert narrowed is proposal
    assert narrowed.args == PathArgs(path="/a")
    assert proposal.narrow(wipe) is None  # same args type, another tool
    assert proposal.narrow(fetch) is None
    assert await execute_approved(approve(narrowed, approved_by="ana"), remove) == ["removed /a"]


async def test_narrow_revalidates_args_of_another_model_keeping_the_digest() -> None:
    """A proposal holding args of another model narrows to a typed copy that still approves and runs."""

    class Loose(BaseModel):
        path: str

    loose = ProposedAction.create(tool_name="remove", tier=Tier.IRREVERSIBLE, args=Loose(path="/b"), round=1)
    narrowed = loose.narrow(remove)
    assert narrowed is not None
    assert type(narrowed.args) is PathArgs
    assert (narrowed.digest, narrowed.round, narrowed.created_at) == (loose.digest, 1, loose.created_at)
    assert await execute_approved(approve(narrowed, approved_by="ana"), remove) == ["removed /b"]


async def test_narrow_refuses_args_that_do_not_fit_the_named_tool() -> None:
    """A proposal naming the tool whose args do not validate as its args type is a UsageError."""
    odd = ProposedAction.create(tool_name="remove", tier=Tier.IRREVERSIBLE, args=FetchArgs(doc_id="d"), round=1)
    with pytest.raises(UsageError, match="PathArgs"):
        odd.narrow(remove)


async def test_unwrap_returns_the_value_of_a_single_shot() -> None:
    """unwrap() gives run_once's verdict and run_once_text's text."""
    assert (await run_once(ScriptedCaller([{"label": "a"}]), Classifier(), "x", schema=Label)).unwrap() == Label(
        label="a"
    )
    assert (await run_once_text(ScriptedCaller([""]), Classifier(), "x")).unwrap() == ""


async def test_unwrap_raises_the_error_of_a_failed_run() -> None:
    """unwrap() on a failed run raises its error, for run_once, run_once_text and pair."""
    throttled = Throttled()
    failed = await run_once(ScriptedCaller([throttled]), Classifier(), "x", schema=Label)
    with pytest.raises(Throttled) as raised:
        failed.unwrap()
    assert raised.value is throttled
    text = await run_once_text(ScriptedCaller([ProviderError("401", status=401)]), Classifier(), "x")
    with pytest.raises(ProviderError):
        text.unwrap()
    drafted = await pair(ScriptedCaller([Throttled()]), Classifier(), RulesVerifier(accept), "x", schema=Label)
    assert (drafted.outcome, drafted.stop_reason) == (Outcome.ERROR, StopReason.THROTTLED)
    with pytest.raises(AgentkitError):
        drafted.unwrap()


def accept(label: Label) -> tuple[bool, str]:
    return True, ""


async def test_unwrap_of_a_pair_returns_the_draft() -> None:
    """unwrap() on a pair gives its last draft, approved or not."""
    caller = ScriptedCaller([{"label": "a"}])
    drafted = await pair(caller, Classifier(), RulesVerifier(accept), "x", PairConfig(), schema=Label)
    assert drafted.approved
    assert drafted.unwrap() == Label(label="a")
