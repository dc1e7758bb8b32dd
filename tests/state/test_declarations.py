"""A run's tool set records each tool's trust and egress: going on with a tool that declares otherwise is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentkit import LoopConfig, RunCheckpoint, StopReason, approve, resume_tool_loop, run_tool_loop_tiered
from agentkit._codec import Codec
from agentkit._runner import pending_proposals
from agentkit._state import ToolEntry
from agentkit.errors import ResumeRefused, ToolSetChanged
from agentkit.provenance import Trust
from agentkit.testing import ScriptedCaller, done_step
from tests.provenance_support import INBOX, TASK, Email, WorldTool, steps, world
from tests.support import NO_WAIT, Executor

BEFORE = Path(__file__).parent / "states" / "untrusted-before-declarations.json"
"""A state the previous agentkit wrote (no trust or egress in its tool entries): the world's tools, the inbox
(untrusted) read, then a proposed email (egress)."""

SEND = ("send_email", Email(to="alice@home.example", body="summary"))


def config() -> LoopConfig:
    return LoopConfig(retry=NO_WAIT)


async def proposed(tools: dict[str, WorldTool]) -> RunCheckpoint:
    """The state of a run over the world's tools that read the inbox and stopped at a proposed email."""
    result = await run_tool_loop_tiered(steps(INBOX, SEND), Executor(), list(tools.values()), TASK, config())
    assert result.stop_reason is StopReason.PROPOSED
    return result.checkpoint


async def go_on(state: RunCheckpoint, tools: dict[str, WorldTool]) -> Any:
    """Resume `state` with `tools`, the proposed email approved."""
    [(_, proposal)] = pending_proposals(state, Codec(tools))
    decision = [approve(proposal, approved_by="ops")]
    return await resume_tool_loop(
        ScriptedCaller([done_step()]), Executor(), list(tools.values()), TASK, state, decision
    )


async def test_a_runs_state_records_each_tools_trust_and_egress() -> None:
    """Each tool entry holds the trust and egress its tool declared when the run started."""
    state = await proposed(world())
    declared = {t.name: (t.trust, t.egress) for t in state.tools}
    assert declared["read_inbox"] == (Trust.UNTRUSTED, False)
    assert declared["fetch"] == (Trust.UNTRUSTED, True)
    assert declared["send_email"] == (Trust.TRUSTED, True)
    assert declared["pay"] == (Trust.TRUSTED, False)


@pytest.mark.parametrize(
    ("tool", "change", "problem"),
    [
        (
            "read_inbox",
            {"trust": Trust.TRUSTED},
            "tool 'read_inbox' now declares Trust.TRUSTED, the run had Trust.UNTRUSTED",
        ),
        (
            "read_notes",
            {"trust": Trust.UNTRUSTED},
            "tool 'read_notes' now declares Trust.UNTRUSTED, the run had Trust.TRUSTED",
        ),
        ("send_email", {"egress": False}, "tool 'send_email' now declares egress=False, the run had egress=True"),
        ("pay", {"egress": True}, "tool 'pay' now declares egress=True, the run had egress=False"),
    ],
)
async def test_a_tool_whose_trust_or_egress_changed_is_refused_before_anything_runs(
    tool: str, change: dict[str, Any], problem: str
) -> None:
    """A resume with a tool that declares another trust or egress than the run recorded (either way) is refused,
    naming the tool and both declarations; no model call is made and nothing runs."""
    tools = world()
    state = await proposed(tools)
    for name, value in change.items():
        setattr(tools[tool], name, value)
    caller = ScriptedCaller([done_step()])
    [(_, proposal)] = pending_proposals(state, Codec(tools))
    with pytest.raises(ToolSetChanged, match=re.escape(problem)) as refused:
        await resume_tool_loop(
            caller, Executor(), list(tools.values()), TASK, state, [approve(proposal, approved_by="ops")]
        )
    [named] = refused.value.problems
    assert named.startswith(problem)
    assert (caller.remaining, tools["send_email"].calls) == (1, [])


async def test_a_fork_keeps_the_declarations_and_refuses_a_changed_one() -> None:
    """A fork goes on with its parent's recorded tool set: a tool whose egress changed since is refused."""
    tools = world()
    fork = (await proposed(tools)).forked("fork", at_round=2)
    tools["send_email"].egress = False
    with pytest.raises(ToolSetChanged, match="tool 'send_email' now declares egress=False"):
        await go_on(fork, tools)
    assert tools["send_email"].calls == []


def test_default_declarations_leave_the_header_digest_as_it_was() -> None:
    """A tool declaring the defaults (trusted, no egress) digests as an entry without the fields does, so a run of
    such tools keeps the digests it had; a recorded untrusted or egress declaration is part of the digest."""
    plain = ToolEntry(name="t", tier=None, args="a" * 64)
    default = plain.model_copy(update={"trust": Trust.TRUSTED, "egress": False})
    assert RunCheckpoint.start("r", config(), [default]).digest == RunCheckpoint.start("r", config(), [plain]).digest
    for declared in ({"trust": Trust.UNTRUSTED}, {"egress": True}):
        other = plain.model_copy(update=declared)
        assert RunCheckpoint.start("r", config(), [other]).digest != RunCheckpoint.start("r", config(), [plain]).digest


async def test_a_recorded_declaration_edited_by_hand_is_refused() -> None:
    """Editing a tool's recorded trust in a stored state (so that a tool now trusted would be admitted) breaks
    its digest: the state is refused."""
    data = json.loads((await proposed(world())).model_dump_json())
    [inbox] = [t for t in data["tools"] if t["name"] == "read_inbox"]
    inbox["trust"] = "trusted"
    with pytest.raises(ResumeRefused, match="does not match its digest"):
        RunCheckpoint.model_validate_json(json.dumps(data)).verify()


async def test_a_state_written_before_declarations_were_recorded_verifies_and_resumes() -> None:
    """A state without trust or egress in its tool entries verifies (its digests unchanged) and resumes: those
    declarations were not recorded, so they are not compared; the continued run keeps its entries as written."""
    state = RunCheckpoint.model_validate_json(BEFORE.read_text())
    state.verify()
    assert {(t.trust, t.egress) for t in state.tools} == {(None, None)}
    tools = world()
    result = await go_on(state, tools)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert tools["send_email"].calls == [SEND[1]]
    assert result.checkpoint.tools == state.tools
    result.checkpoint.verify()
