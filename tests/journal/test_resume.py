"""``journal.resume``: runs continued from the journal's checkpoint with the inbox's decisions, on both backends.

The ``journal`` fixtures (a fresh SQLite file, a fresh PostgreSQL schema) are in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Outcome,
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    Tool,
    ToolRoundInfo,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit.decisions import Grant, Grants, Prefix
from agentkit.errors import ResumeRefused, UsageError
from agentkit.journal import (
    Journal,
    JournalError,
    JournalObserver,
    ProposalRecord,
    ProposalState,
    RunClaimed,
    RunStatus,
    UnknownId,
    open_journal,
)
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Executor, Query, Target

calls: list[str] = []
"""Every tool call, in order, as ``tool arg``."""
gate: asyncio.Event | None = None
"""When set to an unset event, ``wipe`` waits for it (to hold a resume in the middle)."""
entered = asyncio.Event()
"""Set when ``wipe`` is called."""


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Find documents."""
    calls.append(f"search {args.query}")
    return [f"doc:{args.query}"]


@tool(tier=Tier.IRREVERSIBLE)
async def wipe(args: Target) -> list[str]:
    """Delete a path for good."""
    calls.append(f"wipe {args.path}")
    entered.set()
    if gate is not None:
        await gate.wait()
    return [f"wiped {args.path}"]


TOOLS: list[Tool[Any, str]] = [search, wipe]


class Planner(Executor[str]):
    """The executor of these runs: model ``planner``, system ``plan``; records each round in ``infos``."""

    def __init__(self) -> None:
        super().__init__("planner", system="plan")


@pytest.fixture(autouse=True)
def _reset() -> None:
    global gate, entered
    calls.clear()
    gate = None
    entered = asyncio.Event()


def first_leg() -> ScriptedCaller:
    return ScriptedCaller(
        [call_step(Query(query="old"), tool="search"), call_step(Target(path="/srv/old"), tool="wipe", rationale="old")]
    )


async def proposed_run(journal: Journal) -> str:
    """A journaled run that searches, then proposes a wipe and stops; returns its id."""
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(first_leg(), Planner(), TOOLS, "clean", observer=observer)
    assert result.stop_reason is StopReason.PROPOSED
    return result.run_id


async def approved_run(journal: Journal, *, by: str = "ops") -> tuple[str, ProposalRecord]:
    """A run of ``proposed_run`` with its proposal approved by ``by``: the run's id and the proposal."""
    run_id = await proposed_run(journal)
    [pending] = await journal.pending()
    await journal.approve(pending.id, by)
    return run_id, pending


async def test_a_run_stopped_at_a_proposal_waits_then_resumes_once_decided(journal: Journal) -> None:
    """Waiting until the inbox decides; then resume runs the approved call once, the executor sees it, the run ends."""
    run_id = await proposed_run(journal)
    run = await journal.run(run_id)
    assert (run.status, run.resumable, run.checkpoint_round) == (RunStatus.WAITING, True, 2)
    [pending] = await journal.pending()
    with pytest.raises(ResumeRefused, match=f"proposal {pending.id}.*is pending") as refused:
        await journal.resume(run_id, ScriptedCaller([]), Planner(), TOOLS, "clean")
    assert f"agentkit proposals approve {pending.id}" in str(refused.value)

    await journal.approve(pending.id, "ops@example.com")
    assert (await journal.run(run_id)).status is RunStatus.READY
    planner = Planner()
    result = await journal.resume(run_id, ScriptedCaller([done_step("freed")]), planner, TOOLS, "clean")

    assert calls == ["search old", "wipe /srv/old"]
    assert (result.run_id, result.rounds, result.stop_reason) == (run_id, 3, StopReason.EXECUTOR_DONE)
    assert result.items == ["doc:old", "wiped /srv/old"]
    [info] = planner.infos
    assert info.prior_calls[1].batch == ("wiped /srv/old",)
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTED
    run = await journal.run(run_id)
    assert (run.status, run.stop_reason, run.outcome, run.rounds) == (
        RunStatus.FINISHED,
        StopReason.EXECUTOR_DONE,
        Outcome.APPLIED,
        3,
    )
    assert run.lease_until is None  # nobody holds it (claimed_by names the last holder)


async def test_a_resumed_run_uses_the_standing_grants_it_is_given(journal: Journal) -> None:
    """journal.resume takes grants as run_tool_loop_tiered does: in the continued run, a later wipe that a live
    grant allows is approved by it and runs in its round (one use counted); nothing waits in the inbox."""
    run_id, _ = await approved_run(journal, by="ops@example.com")
    scratch = Grant(
        tool_name="wipe",
        where={"path": Prefix(prefix="/srv/tmp/")},
        max_uses=1,
        granted_by="ops",
        reason="scratch space",
        allow_irreversible=True,
    )
    grants = Grants([scratch])
    script = ScriptedCaller([call_step(Target(path="/srv/tmp/a"), tool="wipe"), done_step("freed")])
    result = await journal.resume(run_id, script, Planner(), TOOLS, "clean", grants=grants)
    assert calls == ["search old", "wipe /srv/old", "wipe /srv/tmp/a"]
    assert (result.stop_reason, result.proposed, result.rounds) == (StopReason.EXECUTOR_DONE, [], 4)
    assert grants.uses(scratch.id) == 1
    assert await journal.pending() == []


async def test_grants_that_do_not_fit_the_tools_are_refused_before_anything_runs(journal: Journal) -> None:
    """A grant constraining a field the tool's args lack is a UsageError at once: no model call, no tool run, the
    run still waiting for its resumer."""
    run_id, _ = await approved_run(journal, by="ops@example.com")
    wrong = Grant(tool_name="wipe", where={"colour": Prefix(prefix="r")}, max_uses=1, granted_by="ops", reason="r")
    script = ScriptedCaller([done_step("freed")])
    with pytest.raises(UsageError, match="colour"):
        await journal.resume(run_id, script, Planner(), TOOLS, "clean", grants=Grants([wrong]))
    assert calls == ["search old"]
    assert script.remaining == 1
    assert (await journal.run(run_id)).status is RunStatus.READY


async def test_a_rejection_in_the_inbox_is_the_calls_observation(journal: Journal) -> None:
    """A rejected proposal runs nothing; the executor sees who rejected it and why."""
    run_id = await proposed_run(journal)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "bob", "still in use")
    planner = Planner()
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), planner, TOOLS, "clean")
    assert calls == ["search old"]
    assert planner.infos[0].prior_calls[1].observation == "rejected by bob: still in use"
    assert result.stop_reason is StopReason.EXECUTOR_DONE


async def test_a_call_a_worker_already_executed_is_not_run_again(journal: Journal) -> None:
    """Approved and executed by a worker before the resume: its recorded batch is the call's result; it runs once."""
    run_id, pending = await approved_run(journal)
    await journal.execute(pending.id, wipe)
    planner = Planner()
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), planner, TOOLS, "clean")
    assert calls == ["search old", "wipe /srv/old"]
    assert result.items == ["doc:old", "wiped /srv/old"]
    assert planner.infos[0].prior_results[1] == ("wiped /srv/old",)


async def test_resuming_a_finished_run_is_refused(journal: Journal) -> None:
    """A run that ended (here: resumed to its end) cannot resume again; nothing runs."""
    run_id, _ = await approved_run(journal)
    await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")
    with pytest.raises(ResumeRefused, match="is finished"):
        await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")
    assert calls == ["search old", "wipe /srv/old"]
    with pytest.raises(UnknownId):
        await journal.resume("no-such-run", ScriptedCaller([]), Planner(), TOOLS, "clean")


async def test_of_two_racing_resumers_one_wins_and_the_other_gets_run_claimed(
    journal: Journal, journal_url: str
) -> None:
    """Two processes' journals resume one run at once: one runs it, the other gets RunClaimed; the call runs once."""
    global gate
    run_id, _ = await approved_run(journal)
    gate = asyncio.Event()
    other = open_journal(journal_url)
    try:
        first = asyncio.create_task(journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "c"))
        await entered.wait()  # the first holds the run and is inside the approved call
        with pytest.raises(RunClaimed, match="is held by") as claimed:
            await other.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "c")
        assert isinstance(claimed.value, JournalError)
        gate.set()
        result = await first
        with pytest.raises(ResumeRefused, match="is finished"):
            await other.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "c")
    finally:
        gate.set()
        await other.close()
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert calls == ["search old", "wipe /srv/old"]


async def test_a_dead_processs_run_is_crashed_and_resumes_from_its_last_completed_round(journal: Journal) -> None:
    """The recorder dies in round 2: running while its lease lasts, crashed after; resume redoes round 2 only."""
    observer = JournalObserver(journal, lease=timedelta(seconds=0.3))

    @tool(tier=Tier.READ_ONLY, name="search")
    def dying_search(args: Query) -> list[str]:
        """Find documents; the second call is where the process 'dies' (its recorder stops)."""
        calls.append(f"search {args.query}")
        if args.query == "second":
            observer.close()  # everything queued so far is written; nothing after, as in a crash
        return [f"doc:{args.query}"]

    caller = ScriptedCaller(
        [call_step(Query(query="first"), tool="search"), call_step(Query(query="second"), tool="search"), done_step()]
    )
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    lost = await run_tool_loop_tiered(caller, Planner(), [dying_search, wipe], "c", config, observer=observer)
    run = await journal.run(lost.run_id)
    assert (run.checkpoint_round, run.resumable) == (1, True)
    if run.status is RunStatus.RUNNING:
        with pytest.raises(RunClaimed, match="is held by"):
            await journal.resume(lost.run_id, ScriptedCaller([done_step()]), Planner(), [search, wipe], "c")
    await lease_runs_out(journal, lost.run_id)
    again = ScriptedCaller([call_step(Query(query="second"), tool="search"), done_step()])
    result = await journal.resume(lost.run_id, again, Planner(), [search, wipe], "c")
    assert calls == ["search first", "search second", "search second"]  # round 2 never completed, round 1 ran once
    assert (result.rounds, result.items) == (3, ["doc:first", "doc:second"])
    assert len(again.requests) == 2  # rounds 2 and 3: round 1's model call is not asked again
    run = await journal.run(lost.run_id)
    assert (run.status, run.stop_reason) == (RunStatus.FINISHED, StopReason.EXECUTOR_DONE)
    assert [r.round for r in await journal.rounds(lost.run_id)] == [1, 2, 3]


async def lease_runs_out(journal: Journal, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while (await journal.run(run_id)).status is RunStatus.RUNNING:
        assert time.monotonic() < deadline, "the lease never ran out"
        await asyncio.sleep(0.05)
    assert (await journal.run(run_id)).status is RunStatus.CRASHED


async def test_a_dead_resumers_hold_expires_and_a_live_ones_does_not(journal: Journal) -> None:
    """A resumer that holds the run and stops renewing blocks others only until its lease runs out."""
    run_id, _ = await approved_run(journal)
    with journal._tx(write=False) as db:
        [row] = db.query("SELECT state_digest FROM agentkit_runs WHERE id = ?", (run_id,))
    # A resumer takes the hold, then dies without renewing it (nothing ran yet).
    journal._claim_run(run_id, row["state_digest"], "dead-resumer:1", "its-token", timedelta(seconds=0.5))
    assert (await journal.run(run_id)).status is RunStatus.RUNNING
    with pytest.raises(RunClaimed, match="dead-resumer:1") as claimed:
        await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")
    assert claimed.value.holder == "dead-resumer:1"
    await lease_runs_out(journal, run_id)
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert calls == ["search old", "wipe /srv/old"]


async def test_the_journal_keeps_the_runs_state_one_row_per_entry(journal: Journal) -> None:
    """The stored state is the run's: one row appended per entry; read back it verifies and is the result's own."""
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(first_leg(), Planner(), TOOLS, "clean", observer=observer)
    _, stored, _ = journal._resume_state(result.run_id)
    assert stored is not None
    stored.verify()
    assert stored == result.checkpoint
    with journal._tx(write=False) as db:
        rows = db.query("SELECT seq FROM agentkit_entries WHERE run_id = ? ORDER BY seq", (result.run_id,))
    assert [row["seq"] for row in rows] == list(range(len(result.checkpoint.entries)))


async def test_a_finished_run_lists_as_finished_and_not_resumable(journal: Journal) -> None:
    """A run that ended done is FINISHED with nothing to resume."""
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(
            ScriptedCaller([call_step(Query(query="a"), tool="search"), done_step()]),
            Planner(),
            TOOLS,
            "c",
            observer=observer,
        )
    [run] = await journal.runs()
    assert (run.id, run.status, run.resumable, run.lease_until) == (result.run_id, RunStatus.FINISHED, False, None)


async def test_a_finished_run_or_other_tools_are_refused_holding_nothing(journal: Journal) -> None:
    """A finished run (a plain loop's), or another tool set: ResumeRefused, the run not held, nothing run."""
    with JournalObserver(journal) as observer:
        plain = await run_tool_loop(
            ScriptedCaller([call_step(Query(query="a")), done_step()]), Planner(), search, "c", observer=observer
        )
    with pytest.raises(ResumeRefused, match="is finished"):
        await journal.resume(plain.run_id, ScriptedCaller([]), Planner(), search, "c")
    run_id, _ = await approved_run(journal)
    with pytest.raises(ResumeRefused, match="tool 'wipe' is missing"):
        await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), [search], "clean")
    run = await journal.run(run_id)
    assert (run.status, run.lease_until) == (RunStatus.READY, None)
    assert calls == ["search a", "search old"]


async def test_two_resumers_starting_at_once_run_the_approved_call_once(journal: Journal, journal_url: str) -> None:
    """Both resumes start together on two connections: exactly one holds the run; the other gets RunClaimed."""
    global gate
    run_id, _ = await approved_run(journal)
    gate = asyncio.Event()
    other = open_journal(journal_url)
    try:
        both = [
            asyncio.create_task(j.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "c"))
            for j in (journal, other)
        ]
        done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        [loser] = done
        assert isinstance(loser.exception(), RunClaimed)
        gate.set()
        [winner] = [task for task in both if task is not loser]
        result = await winner
    finally:
        gate.set()
        await other.close()
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert calls == ["search old", "wipe /srv/old"]


class Scope(BaseModel):
    root: str
    removed: list[str] = []


@tool(tier=Tier.IRREVERSIBLE)
def scoped_wipe(args: Target, ctx: Scope) -> list[str]:
    """Delete a path under the run's root."""
    ctx.removed.append(f"{ctx.root}{args.path}")
    return [f"wiped {ctx.root}{args.path}"]


class Summary(BaseModel):
    freed: str


class ScopedPlanner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="planner")

    def render(self, ctx: Scope, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="plan", dynamic=f"{ctx.root} round {info.round}")


async def test_resume_gives_a_ctx_tool_the_resumers_ctx_and_returns_the_typed_answer(journal: Journal) -> None:
    """The approved call of a ctx-taking tool runs with the ctx given to journal.resume; answer= types the done step."""
    first = ScriptedCaller([call_step(Target(path="/old"), tool="scoped_wipe", rationale="old")])
    with JournalObserver(journal) as observer:
        proposed = await run_tool_loop_tiered(
            first, ScopedPlanner(), [search, scoped_wipe], Scope(root="/srv"), observer=observer, answer=Summary
        )
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops@example.com")
    scope = Scope(root="/srv")
    second = ScriptedCaller([done_step("freed", answer=Summary(freed="/srv/old"))])
    result = await journal.resume(
        proposed.run_id, second, ScopedPlanner(), [search, scoped_wipe], scope, answer=Summary
    )
    assert scope.removed == ["/srv/old"]  # the very ctx object given to the resume
    assert result.items == ["wiped /srv/old"]
    assert result.answer == Summary(freed="/srv/old")
    assert result.answer_from_closing_round is False


def decided_after_the_read(journal: Journal, monkeypatch: pytest.MonkeyPatch, decide: Any) -> None:
    """The resumer's first read of its approved proposal is followed at once by ``decide(id)``, so the resumer
    goes on from a stale read, as when a worker or a human acts after ``journal.resume`` read the inbox."""
    real_get = journal.get
    done: list[str] = []

    async def stale_get(id: str) -> Any:
        record = await real_get(id)
        if not done:
            done.append(id)
            await decide(id)
        return record

    monkeypatch.setattr(journal, "get", stale_get)


async def test_a_call_a_worker_claims_after_the_resume_read_the_inbox_is_awaited_and_runs_once(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker claims the approved call after the resume read it: the resumer waits for the worker's outcome
    and goes on with its batch; the call runs once (it used to end the run TOOL_ERROR, for good)."""
    global gate
    run_id, pending = await approved_run(journal)
    gate = asyncio.Event()
    workers: list[asyncio.Task[Any]] = []

    async def worker_claims(id: str) -> None:
        workers.append(asyncio.create_task(journal.execute(id, wipe, worker="vm:1")))
        await entered.wait()
        assert gate is not None
        asyncio.get_running_loop().call_later(0.3, gate.set)

    decided_after_the_read(journal, monkeypatch, worker_claims)
    planner = Planner()
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), planner, TOOLS, "clean")
    await workers[0]
    assert calls == ["search old", "wipe /srv/old"]
    assert (result.stop_reason, result.items) == (StopReason.EXECUTOR_DONE, ["doc:old", "wiped /srv/old"])
    assert planner.infos[0].prior_results[1] == ("wiped /srv/old",)
    record = await journal.get(pending.id)
    assert (record.state, record.claimed_by) == (ProposalState.EXECUTED, "vm:1")
    assert (await journal.run(run_id)).status is RunStatus.FINISHED


async def test_a_call_rejected_after_the_resume_read_the_inbox_is_settled_as_rejected(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A human rejects the approved call after the resume read it: nothing runs, the executor sees the rejection,
    and the run goes on to its end (it used to end TOOL_ERROR, for good)."""
    run_id, pending = await approved_run(journal)

    async def human_rejects(id: str) -> None:
        await journal.reject(id, "bob", "changed my mind")

    decided_after_the_read(journal, monkeypatch, human_rejects)
    planner = Planner()
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), planner, TOOLS, "clean")
    assert calls == ["search old"]
    assert planner.infos[0].prior_calls[1].observation == "rejected by bob: changed my mind"
    assert (result.stop_reason, result.outcome) == (StopReason.EXECUTOR_DONE, Outcome.APPLIED)
    assert (await journal.get(pending.id)).state is ProposalState.REJECTED
    assert (await journal.run(run_id)).status is RunStatus.FINISHED


async def test_a_worker_that_dies_holding_the_call_ends_the_resumed_run_naming_what_to_resolve(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker claims the approved call after the resume read it, then dies (its lease runs out, no outcome): the
    resumer stops waiting, the run ends TOOL_ERROR naming the proposal to resolve, and nothing runs here."""
    run_id, pending = await approved_run(journal)

    async def worker_dies(id: str) -> None:
        await asyncio.to_thread(journal._claim, id, wipe, "dead:1", None, timedelta(seconds=0.3))

    decided_after_the_read(journal, monkeypatch, worker_dies)
    result = await journal.resume(run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean")
    assert calls == ["search old"]
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert f"agentkit proposals resolve {pending.id}" in str(result.error)
    assert "claimed by dead:1" in str(result.error)
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTING


def never_same(a: BaseModel, b: BaseModel) -> bool:
    """A repeat comparator under which no call repeats another."""
    return False


async def test_journal_resume_refuses_a_run_without_its_repeat_comparator_holding_nothing(journal: Journal) -> None:
    """A run journaled with ``same=`` resumes only with the same comparator (by name): without it, or with one the
    run lacked, ``journal.resume`` refuses naming it and the fix, holding nothing; with it, the run goes on under it
    (a search repeated across the pause is no repeat)."""
    with JournalObserver(journal) as observer:
        first = await run_tool_loop_tiered(first_leg(), Planner(), TOOLS, "clean", observer=observer, same=never_same)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", "keep it")
    again = ScriptedCaller([call_step(Query(query="old"), tool="search"), done_step()])
    with pytest.raises(ResumeRefused, match=rf"compared repeats with {__name__}\.never_same; pass it again as same="):
        await journal.resume(first.run_id, again, Planner(), TOOLS, "clean")
    run = await journal.run(first.run_id)
    assert (run.status, run.lease_until, calls, again.remaining) == (RunStatus.READY, None, ["search old"], 2)
    result = await journal.resume(first.run_id, again, Planner(), TOOLS, "clean", same=never_same)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert calls == ["search old", "search old"]

    plain = await proposed_run(journal)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", "keep it")
    with pytest.raises(ResumeRefused, match=r"by value \(no same=\), not with .*never_same; resume without same="):
        await journal.resume(plain, ScriptedCaller([]), Planner(), TOOLS, "clean", same=never_same)
