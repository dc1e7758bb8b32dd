"""Provenance on Temporal: the workflow's loop keeps the run's taint by the real tools' declarations, its
pending proposals show it, and a replay reaches the same decisions."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from agentkit import FunctionTool, LoopConfig, Tier, tool
from agentkit.provenance import ProvenancePolicy, Trust
from agentkit.temporal import RunStatus
from tests.temporal.agents import DONE, Brief, Doc, Search, step, until
from tests.temporal.support import TemporalTest

pytestmark = pytest.mark.slow


async def test_a_reversible_call_after_an_untrusted_result_waits_in_the_workflow(temporal: TemporalTest) -> None:
    """The search is declared untrusted: the reversible note after it is a pending proposal (held by the policy,
    not its tier), nothing runs, and the legs replay."""
    search, note, send = typing.cast("list[FunctionTool[Any, Any]]", temporal.editor.tools)
    editor = dataclasses.replace(
        temporal.editor, tools=[dataclasses.replace(search, trust=Trust.UNTRUSTED), note, send]
    )
    temporal.fake.add(step("search", query="mallory"), step("note", to="mallory", text="x"))
    async with temporal.worker([editor]):
        handle = await temporal.runs.start(editor, Brief(topic="t"))
        [held] = (await until(handle, RunStatus.WAITING)).pending
        assert (held.tool_name, temporal.tool_log()) == ("note", ["search mallory"])
        assert held.provenance is not None
        assert held.provenance.held
        assert [o.tool_name for o in held.provenance.untrusted] == ["search"]
        temporal.fake.add(DONE)
        await handle.reject(held, by="alice", reason="injected")
        result = await handle.result()
    assert temporal.tool_log() == ["search mallory"]
    assert result.provenance is not None
    assert [(o.tool_name, o.trust) for o in result.provenance.items] == [("search", Trust.UNTRUSTED)]
    await temporal.replay(*await temporal.legs(handle.run_id), agents=[editor])


async def test_a_steered_value_is_marked_on_the_workflows_pending_proposal(temporal: TemporalTest) -> None:
    """Under the strict reading, the name the trusted directory returned after the untrusted search is marked
    steered on the workflow's pending proposal, as in process; the legs replay."""
    search, note, send = typing.cast("list[FunctionTool[Any, Any]]", temporal.editor.tools)

    @tool(tier=Tier.READ_ONLY)
    async def directory(args: Search) -> list[Doc]:
        """The user's own directory (trusted)."""
        return [Doc(id=f"person:{args.query}")]

    editor = dataclasses.replace(
        temporal.editor,
        tools=[dataclasses.replace(search, trust=Trust.UNTRUSTED), note, send, directory],
        config=LoopConfig(max_rounds=6, provenance=ProvenancePolicy(short_values=True, steered=True)),
    )
    temporal.fake.add(
        step("search", query="mallory"), step("directory", query="carol"), step("note", to="person:carol", text="x")
    )
    async with temporal.worker([editor]):
        handle = await temporal.runs.start(editor, Brief(topic="t"))
        [held] = (await until(handle, RunStatus.WAITING)).pending
        assert held.provenance is not None
        assert [(m.path, m.origin.tool_name, m.steered) for m in held.provenance.from_untrusted] == [
            ("to", "directory", True)
        ]
        temporal.fake.add(DONE)
        await handle.reject(held, by="alice", reason="steered")
        await handle.result()
    await temporal.replay(*await temporal.legs(handle.run_id), agents=[editor])
