"""MCP tools and provenance: a server's tool is untrusted and egress unless the caller says otherwise, so the
policy holds after its first result."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentkit import AfterProposal, LoopConfig, Tier, UsageError, approve, resume_tool_loop, run_tool_loop_tiered
from agentkit.errors import ToolSetChanged
from agentkit.mcp import McpConnection, McpItem, connect_stdio
from agentkit.provenance import Trust
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Executor

SERVERS = Path(__file__).with_name("servers.py")
TIERS = {"search": Tier.READ_ONLY, "read_file": Tier.READ_ONLY, "echo": Tier.READ_ONLY}


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[McpConnection]:
    """An open stdio connection to the files server."""
    env = {"MCP_TEST_LOG": str(tmp_path / "calls.log")}
    async with connect_stdio(sys.executable, ["-P", str(SERVERS), "files"], name="files", env=env) as server:
        yield server


async def test_an_mcp_tool_is_untrusted_and_egress_unless_told_otherwise(files: McpConnection) -> None:
    """Wired without `trust=`/`egress=`, every tool is untrusted and egress; the caller's word overrides both."""
    plain = {t.name: t for t in await files.tools(tiers=TIERS, include=["search", "read_file"])}
    assert {(n, t.trust, t.egress) for n, t in plain.items()} == {
        ("search", Trust.UNTRUSTED, True),
        ("read_file", Trust.UNTRUSTED, True),
    }
    told = {
        t.name: t
        for t in await files.tools(
            tiers=TIERS,
            include=["search", "read_file"],
            trust={"read_file": Trust.TRUSTED},
            egress={"read_file": False},
        )
    }
    assert (told["read_file"].trust, told["read_file"].egress) == (Trust.TRUSTED, False)
    assert (told["search"].trust, told["search"].egress) == (Trust.UNTRUSTED, True)


async def test_wrong_provenance_options_are_usage_errors(files: McpConnection) -> None:
    """A name the server does not list, or a value of the wrong type, is refused naming the option."""
    with pytest.raises(UsageError, match="trust"):
        await files.tools(tiers=TIERS, trust={"nope": Trust.TRUSTED})
    with pytest.raises(UsageError, match=r"Trust\.TRUSTED"):
        await files.tools(tiers=TIERS, trust={"search": "trusted"})  # type: ignore[dict-item]  # on purpose
    with pytest.raises(UsageError, match="True or False"):
        await files.tools(tiers=TIERS, egress={"search": "no"})  # type: ignore[dict-item]  # on purpose


async def test_a_second_mcp_call_after_an_mcp_result_waits_for_a_person(files: McpConnection) -> None:
    """The first search runs; its result is untrusted, so the next call (egress: it reaches the server) is a
    proposal, its argument marked where it came from the first result."""
    tools = await files.tools(tiers=TIERS, include=["search", "echo"])
    caller = ScriptedCaller(
        [call_step({"query": "otters"}, tool="search"), call_step({"text": "otters-1"}, tool="echo"), done_step()]
    )
    config = LoopConfig(retry=NO_WAIT, after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Executor[McpItem](), tools, "find otters", config)
    assert [i for i in result.items] == [{"result": ["otters-1", "otters-2"]}]
    [proposal] = result.proposed
    assert proposal.tool_name == "echo"
    assert proposal.evidence is not None
    assert proposal.evidence.provenance is not None
    assert proposal.evidence.provenance.held
    assert [(m.path, m.value) for m in proposal.evidence.provenance.from_untrusted] == [("text", "otters-1")]


async def test_mcp_tools_told_trusted_and_local_run_as_before(files: McpConnection) -> None:
    """A server the caller vouches for (`trust=`, `egress=`) runs as without provenance."""
    trusted = {"search": Trust.TRUSTED, "echo": Trust.TRUSTED}
    tools = await files.tools(
        tiers=TIERS, include=["search", "echo"], trust=trusted, egress=dict.fromkeys(trusted, False)
    )
    caller = ScriptedCaller(
        [call_step({"query": "otters"}, tool="search"), call_step({"text": "otters-1"}, tool="echo"), done_step()]
    )
    result = await run_tool_loop_tiered(caller, Executor[McpItem](), tools, "find otters", LoopConfig(retry=NO_WAIT))
    assert result.proposed == []
    assert len(result.items) == 2


async def test_a_run_resumed_with_mcp_tools_wired_with_other_provenance_is_refused(files: McpConnection) -> None:
    """A run whose MCP tools were vouched for (`trust=`, `egress=`) cannot go on with the same tools wired with the
    defaults (untrusted, egress): the refusal names each tool and both declarations, and nothing runs."""
    tiers = {"search": Tier.READ_ONLY, "echo": Tier.IRREVERSIBLE}
    vouched = await files.tools(
        tiers=tiers, include=["search", "echo"], trust={"search": Trust.TRUSTED}, egress={"echo": False}
    )
    caller = ScriptedCaller(
        [call_step({"query": "otters"}, tool="search"), call_step({"text": "otters-1"}, tool="echo"), done_step()]
    )
    first = await run_tool_loop_tiered(caller, Executor[McpItem](), vouched, "find otters", LoopConfig(retry=NO_WAIT))
    [proposal] = first.proposed
    plain = await files.tools(tiers=tiers, include=["search", "echo"])
    later = ScriptedCaller([done_step()])
    with pytest.raises(ToolSetChanged) as refused:
        await resume_tool_loop(
            later, Executor[McpItem](), plain, "find otters", first.checkpoint, [approve(proposal, approved_by="a")]
        )
    assert refused.value.problems == (
        "tool 'search' now declares Trust.UNTRUSTED, the run had Trust.TRUSTED: its results decide whether "
        "untrusted content entered the run",
        "tool 'echo' now declares egress=True, the run had egress=False: the provenance policy holds egress calls",
    )
    assert later.remaining == 1
