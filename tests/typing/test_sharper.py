"""assert_type checks for narrowing proposals, call_step by tool, unwrap and linked approvals.

Checked by mypy and basedpyright. A ``# type: ignore[code]`` here is a negative check:
``warn_unused_ignores`` fails the run if mypy stops reporting that error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_type

from pydantic import BaseModel

from agentkit import Observer, ProposedAction, run_tool_loop_tiered
from agentkit._approval import Approval, approve, execute_approved
from agentkit._once import run_once, run_once_text
from agentkit._pair import RulesVerifier, pair
from agentkit.testing import ScriptedCaller, call_step
from tests.typing.models import DeleteArgs, Doc, FetchArgs, Planner, SearchArgs, Triage, Triager, delete, fetch, search


async def narrowing() -> None:
    result = await run_tool_loop_tiered(ScriptedCaller(), Planner(), [search, fetch, delete], "ctx")
    proposal = result.proposed[0]
    assert_type(proposal, ProposedAction[BaseModel])
    deletion = proposal.narrow(delete)
    assert_type(deletion, ProposedAction[DeleteArgs] | None)
    if deletion is not None:
        assert_type(deletion.args, DeleteArgs)
        assert_type(deletion.args.path, str)
        approval = approve(deletion, approved_by="ana")
        assert_type(approval, Approval[DeleteArgs])
        assert_type(await execute_approved(approval, delete), Sequence[Doc])
        assert_type(await execute_approved(approval, delete, observer=[Observer()]), Sequence[Doc])
        await execute_approved(approval, fetch)  # type: ignore[misc]  # approved a deletion, not a fetch
    assert_type(await execute_approved(approve(proposal, approved_by="ana"), fetch), Sequence[Doc])


def steps() -> None:
    assert_type(call_step(SearchArgs(query="q"), tool=search), dict[str, Any])
    assert_type(call_step(SearchArgs(query="q"), tool="search"), dict[str, Any])
    assert_type(call_step({"query": "q"}), dict[str, Any])
    call_step(FetchArgs(doc_id="d"), tool=search)  # type: ignore[misc]  # args of another tool


def labelled(draft: Triage) -> tuple[bool, str]:
    return bool(draft.labels), "label it"


async def unwrapping() -> None:
    caller = ScriptedCaller()
    once = await run_once(caller, Triager(), "ctx", schema=Triage)
    assert_type(once.value, Triage | None)
    assert_type(once.unwrap(), Triage)
    assert_type((await run_once_text(caller, Triager(), "ctx")).unwrap(), str)
    drafted = await pair(caller, Triager(), RulesVerifier(labelled), "ctx", schema=Triage)
    assert_type(drafted.unwrap(), Triage)
