"""MCP tools through every path a Tool takes: program gating, approval, the SQLite journal, and OpenAI's strict mode.

The servers are the real ones of tests/mcp/servers.py, over stdio; each mutating call leaves a
line in a log file, so "executed exactly once" is counted on the server's side.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    ProposedAction,
    RetryPolicy,
    RoleSpec,
    StopReason,
    Tier,
    ToolRoundInfo,
    approve,
    execute_approved,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit._approval import ApprovalError
from agentkit.errors import TierChanged, UsageError
from agentkit.journal import JournalObserver, ProposalState, SQLiteJournal, TransitionRefused
from agentkit.mcp import McpConnection, McpItem, McpTool, connect_stdio
from agentkit.program import Capability, CapabilitySet, apply_plan, gate_program
from agentkit.provenance import Trust, declared_egress, declared_trust
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, ScriptedCaller, call_step, done_step

SERVERS = Path(__file__).with_name("servers.py")
FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))
TIERS = {"search": Tier.READ_ONLY, "delete_file": Tier.IRREVERSIBLE, "bounded": Tier.REVERSIBLE}


class Agent:
    def role(self) -> RoleSpec:
        return RoleSpec(model="executor")

    def render(self, ctx: str, info: ToolRoundInfo[McpItem]) -> Prompt:
        return Prompt(system="tidy the files", dynamic=f"{ctx} round {info.round}")


def files_server(log: Path) -> McpConnection:
    return connect_stdio(sys.executable, ["-P", str(SERVERS), "files"], name="files", env={"MCP_TEST_LOG": str(log)})


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "calls.log"


@pytest.fixture
async def tools(log: Path) -> AsyncIterator[dict[str, McpTool]]:
    """The files server's search, delete_file and bounded tools, wired with the callers' tiers."""
    async with files_server(log) as server:
        wired = await server.tools(tiers=TIERS, include=list(TIERS))
        yield {tool.name: tool for tool in wired}


def capability(tool: McpTool) -> Capability[Any, McpItem]:
    """A program capability from an MCP tool, its trust and egress carried over: live-runnable tiers get the
    tool's call as handler."""
    live = tool.tier <= Tier.REVERSIBLE
    return Capability(
        name=tool.name,
        description=tool.description,
        tier=tool.tier,
        args_type=tool.args_type,
        handler=tool.call if live else None,
        trust=tool.trust,
        egress=tool.egress,
    )


# --- program gating --------------------------------------------------------------------------------


async def test_a_program_of_mcp_calls_is_gated_whole_then_applied_and_proposed(
    tools: dict[str, McpTool], log: Path
) -> None:
    """Live-runnable MCP calls are applied against the server; the irreversible one becomes a proposal."""
    capabilities = CapabilitySet(*(capability(tool) for tool in tools.values()))
    program = [
        {"tool": "search", "args": {"query": "old"}},
        {"tool": "bounded", "args": {"name": "ab", "count": 2}},
        {"tool": "delete_file", "args": {"path": "/old"}},
    ]
    plan = gate_program(program, Tier.REVERSIBLE, capabilities=capabilities)
    assert [call.tool_name for call in plan.apply] == ["search", "bounded"]
    assert [(p.tool_name, p.tier) for p in plan.propose] == [("delete_file", Tier.IRREVERSIBLE)]
    report = await apply_plan(plan)
    assert report.ok
    assert report.items == [{"result": ["old-1", "old-2"]}, {"result": ["ab", "ab"]}]
    assert calls(log) == ["bounded ab 2"]


async def test_a_program_of_mcp_calls_written_after_untrusted_content_sends_nothing(
    tools: dict[str, McpTool], log: Path
) -> None:
    """A capability made from an MCP tool is untrusted and egress like it: gated untrusted, even a read is proposed."""
    capabilities = CapabilitySet(*(capability(tool) for tool in tools.values()))
    assert all((declared_trust(cap), declared_egress(cap)) == (Trust.UNTRUSTED, True) for cap in capabilities)
    program = [{"tool": "search", "args": {"query": "old"}}, {"tool": "bounded", "args": {"name": "ab", "count": 2}}]
    plan = gate_program(program, Tier.REVERSIBLE, capabilities=capabilities, untrusted=True)
    assert plan.apply == ()
    assert [p.tool_name for p in plan.propose] == ["search", "bounded"]
    assert (await apply_plan(plan)).ok
    assert calls(log) == []


async def test_a_program_with_schema_invalid_mcp_args_is_rejected_whole(tools: dict[str, McpTool], log: Path) -> None:
    """One call breaking its tool's input schema rejects the program; nothing reaches the server."""
    capabilities = CapabilitySet(*(capability(tool) for tool in tools.values()))
    program = [
        {"tool": "bounded", "args": {"name": "ok", "count": 1}},
        {"tool": "bounded", "args": {"name": "ok", "count": 11}},
    ]
    plan = gate_program(program, Tier.REVERSIBLE, capabilities=capabilities)
    assert plan.rejected
    (issue,) = plan.issues
    assert issue.index == 1
    assert "11 is greater than the maximum of 10" in issue.message
    assert not (await apply_plan(plan)).ok
    assert calls(log) == []


# --- approval --------------------------------------------------------------------------------------


async def test_an_approved_mcp_proposal_runs_once_against_the_server(tools: dict[str, McpTool], log: Path) -> None:
    """The tiered loop proposes the delete; execute_approved runs it once; a second try is refused."""
    caller = ScriptedCaller([call_step({"path": "/tmp/old"}, tool="delete_file", rationale="stale")])
    toolset = [tools["search"], tools["delete_file"]]
    result = await run_tool_loop_tiered(caller, Agent(), toolset, "tidy", FAST)
    assert result.stop_reason is StopReason.PROPOSED
    assert calls(log) == []
    approval = approve(result.proposed[0], approved_by="ops@example.com")
    batch = await execute_approved(approval, tools["delete_file"])
    assert list(batch) == [{"result": "deleted /tmp/old"}]
    with pytest.raises(ApprovalError, match="already executed"):
        await execute_approved(approval, tools["delete_file"])
    assert calls(log) == ["delete_file /tmp/old"]


async def test_an_mcp_proposal_round_trips_through_json_with_the_same_digest(tools: dict[str, McpTool]) -> None:
    """A proposal reloaded with ProposedAction.load has args of the tool's type, equal to the original, same digest."""
    caller = ScriptedCaller([call_step({"path": "/a b/ü"}, tool="delete_file")])
    result = await run_tool_loop_tiered(caller, Agent(), list(tools.values()), "tidy", FAST)
    (proposal,) = result.proposed
    reloaded = ProposedAction.load(proposal.model_dump_json(), list(tools.values()))
    assert isinstance(reloaded.args, tools["delete_file"].args_type)
    assert reloaded.args == proposal.args
    assert reloaded.digest_matches()


# --- the journal -----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_mcp_proposal_approved_in_the_journal_executes_exactly_once_against_the_server(
    tmp_path: Path, log: Path
) -> None:
    """Proposed in one run, approved in the SQLite journal, executed by a worker on a fresh connection:
    the server sees the delete once, and a second execute is refused."""
    journal = SQLiteJournal(tmp_path / "journal.db")
    async with files_server(log) as server:
        toolset = await server.tools(tiers=TIERS, include=["search", "delete_file"])
        caller = ScriptedCaller([call_step({"path": "/srv/old"}, tool="delete_file", rationale="stale")])
        with JournalObserver(journal) as observer:
            result = await run_tool_loop_tiered(caller, Agent(), toolset, "tidy", FAST, observer=observer)
    assert result.stop_reason is StopReason.PROPOSED
    (pending,) = await journal.pending()
    assert (pending.tool_name, pending.tier) == ("delete_file", Tier.IRREVERSIBLE)
    await journal.approve(pending.id, "ops@example.com")
    assert calls(log) == []

    async with files_server(log) as worker_server:  # a worker, later: a new process, the tools wired again
        (delete,) = await worker_server.tools(tiers=TIERS, include=["delete_file"])
        execution = await journal.execute(pending.id, delete, worker="worker-1")
        assert execution.proposal.state is ProposalState.EXECUTED
        assert list(execution.batch) == [{"result": "deleted /srv/old"}]
        with pytest.raises(TransitionRefused, match="it is executed"):
            await journal.execute(pending.id, delete, worker="worker-2")
    assert calls(log) == ["delete_file /srv/old"]
    await journal.close()


async def test_the_journal_refuses_an_mcp_tool_rewired_at_another_tier(tmp_path: Path, log: Path) -> None:
    """A proposal approved as IRREVERSIBLE does not run through a tool now wired as REVERSIBLE."""
    journal = SQLiteJournal(tmp_path / "journal.db")
    async with files_server(log) as server:
        (delete,) = await server.tools(tiers=TIERS, include=["delete_file"])
        proposal = ProposedAction.create(
            tool_name="delete_file",
            tier=Tier.IRREVERSIBLE,
            args=delete.args_type.model_validate({"path": "/x"}),
            round=1,
        )
        record = await journal.propose(proposal)
        await journal.approve(record.id, "ops@example.com")
        (relabelled,) = await server.tools(tiers={"delete_file": Tier.REVERSIBLE}, include=["delete_file"])
        with pytest.raises(TierChanged, match=r"now declares Tier\.REVERSIBLE"):
            await journal.execute(record.id, relabelled)
    assert calls(log) == []
    await journal.close()


# --- the OpenAI adapter in strict mode -------------------------------------------------------------


async def test_mcp_step_schemas_pass_openai_strict_mode_end_to_end(tools: dict[str, McpTool]) -> None:
    """The step schema built from MCP input schemas is accepted by a server enforcing OpenAI's strict rules,
    and a reply that leaves an optional argument out (null) reaches the server without it."""
    toolset = [tools["search"], tools["bounded"]]
    with FakeOpenAIServer([call_step({"name": "abc", "count": None}, tool="bounded"), done_step()]) as fake:
        async with OpenAICaller(base_url=fake.base_url, strict=True) as caller:
            result = await run_tool_loop(caller, Agent(), toolset, "repeat", FAST)
        fake.assert_complete()
        schema = fake.requests[0]["response_format"]["json_schema"]
    assert schema["strict"] is True
    assert (result.outcome, result.items) == (Outcome.APPLIED, [{"result": ["abc"]}])


def raw_schemas_server(log: Path) -> McpConnection:
    env = {"MCP_TEST_LOG": str(log)}
    return connect_stdio(sys.executable, ["-P", str(SERVERS), "raw-schemas"], name="raw-schemas", env=env)


async def test_a_property_named_default_whose_schema_is_a_ref_runs_through_strict_mode(log: Path) -> None:
    """A listed property called ``default`` has its ``$ref`` inlined: a strict run sends the schema, then the call."""
    async with raw_schemas_server(log) as server:
        toolset = await server.tools(tiers={"save": Tier.READ_ONLY}, include=["save"])
        with FakeOpenAIServer([call_step({"default": "abc"}, tool="save"), done_step()]) as fake:
            async with OpenAICaller(base_url=fake.base_url, strict=True) as caller:
                result = await run_tool_loop(caller, Agent(), toolset, "save", FAST)
            fake.assert_complete()
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert calls(log) == ["save [('default', 'abc')]"]


async def test_a_listed_ref_shaped_value_is_data_and_runs_through_strict_mode(log: Path) -> None:
    """A listed schema whose ``const``, ``enum``, ``default`` and ``examples`` hold ``{"$ref": ...}`` values is
    wired (those values are data, never inlined): a strict run sends the schema, then the call with the value."""
    ref = {"$ref": "#/$defs/Word"}
    async with raw_schemas_server(log) as server:
        toolset = await server.tools(tiers={"pick": Tier.READ_ONLY}, include=["pick"])
        with FakeOpenAIServer([call_step({"ref": ref, "word": "abc", "mode": None}, tool="pick"), done_step()]) as fake:
            async with OpenAICaller(base_url=fake.base_url, strict=True) as caller:
                result = await run_tool_loop(caller, Agent(), toolset, "pick", FAST)
            fake.assert_complete()
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert calls(log) == [f"pick {[('ref', ref), ('word', 'abc')]}"]


async def test_a_listed_true_subschema_in_strict_mode_is_a_usage_error_naming_the_field(log: Path) -> None:
    """A listed ``{"q": true}`` is wired, and a strict-mode run refuses it by field before any request."""
    async with raw_schemas_server(log) as server:
        toolset = await server.tools(tiers={"loose": Tier.READ_ONLY}, include=["loose"])
        with FakeOpenAIServer([done_step()]) as fake:
            async with OpenAICaller(base_url=fake.base_url, strict=True) as caller:
                with pytest.raises(UsageError, match=r"field 'decision\.call\.args\.q' is a value of any type"):
                    await run_tool_loop(caller, Agent(), toolset, "save", FAST)
            assert fake.requests == []
    assert calls(log) == []
