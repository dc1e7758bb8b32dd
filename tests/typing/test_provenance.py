"""assert_type checks for provenance: declarations on tools, the policy, what proposals and results record,
grants that allow untrusted values, and a FunctionCaller that gets the round (mypy only)."""

from __future__ import annotations

from typing import Any, assert_type

from agentkit import FunctionTool, LoopConfig, StructuredRequest, Tier, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.decisions import Grant
from agentkit.provenance import (
    ArgOrigin,
    CallProvenance,
    ItemOrigin,
    Origin,
    ProvenancePolicy,
    RunProvenance,
    Trust,
)
from agentkit.testing import FunctionCaller, ScriptedCaller
from tests.typing.models import Doc, Planner, SearchArgs, delete


@tool(tier=Tier.READ_ONLY, trust=Trust.UNTRUSTED, egress=True)
def fetch_page(args: SearchArgs) -> list[Doc]:
    """Fetch a page a third party wrote."""
    return []


def made_at_run_time(args: Any) -> list[Doc]:
    return []


async def declarations() -> None:
    assert_type(fetch_page, FunctionTool[SearchArgs, Doc])
    assert_type(fetch_page.trust, Trust)
    assert_type(fetch_page.egress, bool)
    wrapped = tool(tier=Tier.READ_ONLY, args_type=SearchArgs, result_type=Doc)(made_at_run_time)
    assert_type(wrapped, FunctionTool[Any, Doc])
    assert_type(wrapped.result_type, object)


async def policy_and_records() -> None:
    policy = ProvenancePolicy(ceiling=Tier.READ_ONLY, min_match=10)
    config = LoopConfig(provenance=policy, repeat_exempt=frozenset({"fetch_page"}))
    assert_type(config.provenance, ProvenancePolicy | None)
    assert_type(config.repeat_exempt, frozenset[str])
    result = await run_tool_loop_tiered(ScriptedCaller(), Planner(), delete, "ctx", config)
    assert_type(result.provenance, RunProvenance | None)
    if result.provenance is not None:
        assert_type(result.provenance.untrusted, tuple[Origin, ...])
        assert_type(result.provenance.items, tuple[ItemOrigin, ...])
        assert_type(result.provenance.answer_after_untrusted, bool)
        assert_type(result.provenance.answer_from_untrusted, tuple[ArgOrigin, ...])
    proposal = result.proposed[0]
    if proposal.evidence is not None:
        assert_type(proposal.evidence.provenance, CallProvenance | None)
        if proposal.evidence.provenance is not None:
            assert_type(proposal.evidence.provenance.from_untrusted, tuple[ArgOrigin, ...])
            assert_type(proposal.evidence.provenance.held, bool)
            assert_type(proposal.evidence.provenance.tainted, bool)


def grants() -> None:
    grant = Grant.of(
        delete,
        max_uses=1,
        granted_by="alice",
        reason="bills",
        allow_irreversible=True,
        from_untrusted={"path": ["fetch_page"]},
    )
    assert_type(grant.from_untrusted, dict[str, tuple[str, ...]])


def round_aware(request: StructuredRequest, schema: object, info: ToolRoundInfo[Any] | None) -> dict[str, Any]:
    return {"done": True, "call": None, "rationale": ""}


def function_caller() -> None:
    caller = FunctionCaller(round_aware)
    assert_type(caller.rounds, list[ToolRoundInfo[Any] | None])
