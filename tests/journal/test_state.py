"""A run's state as the journal stores it, against hostile rows: another run's state under a run's id, non-finite
floats, and a nesting no reader can follow. Each is read back exactly, or refused with ``ResumeRefused`` before
anything runs; on both backends (the ``journal`` fixtures are in ``conftest.py``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import Prompt, RoleSpec, StopReason, Tier, Tool, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.errors import ResumeRefused
from agentkit.journal import Journal, JournalObserver, ProposalState
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Query, Target


class Score(BaseModel):
    name: str
    value: float


wiped: list[str] = []


@tool(tier=Tier.READ_ONLY)
def score(args: Query) -> list[Score]:
    """Score documents: one has no score (NaN), two are off the scale."""
    return [Score(name="n", value=math.nan), Score(name="p", value=math.inf), Score(name="m", value=-math.inf)]


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Target) -> list[Score]:
    """Delete a path for good."""
    wiped.append(args.path)
    return []


TOOLS: list[Tool[Any, Score]] = [score, wipe]


class Planner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="planner")

    def render(self, ctx: str, info: ToolRoundInfo[Score]) -> Prompt:
        return Prompt(system="plan", dynamic=f"{ctx} round {info.round}")


@pytest.fixture(autouse=True)
def _reset() -> None:
    wiped.clear()


async def approved_run(journal: Journal) -> tuple[str, str]:
    """A journaled run that scores, then proposes a wipe, approved; its id and the proposal's."""
    first = ScriptedCaller([call_step(Query(query="q"), tool="score"), call_step(Target(path="/srv/old"), tool="wipe")])
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(first, Planner(), TOOLS, "clean", observer=observer)
    assert result.stop_reason is StopReason.PROPOSED
    [pending] = [p for p in await journal.pending() if p.run_id == result.run_id]
    await journal.approve(pending.id, "ops")
    return result.run_id, pending.id


def edit(journal: Journal, *statements: tuple[str, tuple[object, ...]]) -> None:
    """Edit the journal's rows by hand, in one transaction."""
    with journal._tx(write=True) as db:
        for sql, params in statements:
            db.execute(sql, params)


async def resume(journal: Journal, run_id: str) -> Any:
    return await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")


async def test_non_finite_floats_in_an_item_survive_a_resume_from_the_journal(journal: Journal) -> None:
    """NaN and both infinities in a stored batch read back as themselves (they used to be written as ``null``,
    then refused as a float), and the resumed run ends with them."""
    run_id, _ = await approved_run(journal)
    result = await resume(journal, run_id)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert wiped == ["/srv/old"]
    values = [item.value for item in result.items]
    assert math.isnan(values[0])
    assert values[1:] == [math.inf, -math.inf]


async def test_an_edit_of_a_stored_nan_to_infinity_is_refused(journal: Journal) -> None:
    """A stored ``NaN`` edited to ``1e999`` (infinity) by hand: the digests notice, the resume is refused, and the
    approved call does not run."""
    run_id, id = await approved_run(journal)
    edit(journal, ("UPDATE agentkit_entries SET body = REPLACE(body, 'NaN', '1e999') WHERE run_id = ?", (run_id,)))
    with pytest.raises(ResumeRefused, match="does not match its digests"):
        await resume(journal, run_id)
    assert wiped == []
    assert (await journal.get(id)).state is ProposalState.APPROVED


async def test_a_run_whose_row_holds_another_runs_state_is_refused(journal: Journal) -> None:
    """Run Y's rows hold run X's state (the same calls, so Y's approval matches X's proposal): ``resume(Y)`` is
    refused, naming both runs, and nothing runs (it used to continue run X under Y's id)."""
    x, _ = await approved_run(journal)
    y, id = await approved_run(journal)
    copy = "(SELECT {0} FROM agentkit_runs WHERE id = ?)"
    edit(
        journal,
        (
            f"UPDATE agentkit_runs SET head = {copy.format('head')}, state_entries = {copy.format('state_entries')}, "
            f"state_digest = {copy.format('state_digest')} WHERE id = ?",
            (x, x, x, y),
        ),
        ("DELETE FROM agentkit_entries WHERE run_id = ?", (y,)),
        (
            "INSERT INTO agentkit_entries (run_id, seq, body) "
            "SELECT ?, seq, body FROM agentkit_entries WHERE run_id = ?",
            (y, x),
        ),
    )
    with pytest.raises(ResumeRefused, match=f"the state stored for run {y!r} is that of run {x!r}"):
        await resume(journal, y)
    assert wiped == []
    assert (await journal.get(id)).state is ProposalState.APPROVED


async def test_a_stored_state_nested_too_deep_to_read_is_refused(journal: Journal) -> None:
    """An entry nested 100,000 deep: ``ResumeRefused`` naming the run (not a ``RecursionError``); nothing runs."""
    run_id, id = await approved_run(journal)
    deep = '{"kind": "round", "round": 1, "batch": ' + "[" * 100_000 + "]" * 100_000 + "}"
    edit(journal, ("UPDATE agentkit_entries SET body = ? WHERE run_id = ? AND seq = 0", (deep, run_id)))
    with pytest.raises(ResumeRefused, match=f"the state of run {run_id!r} in the journal cannot be read"):
        await resume(journal, run_id)
    assert wiped == []
    assert (await journal.get(id)).state is ProposalState.APPROVED
