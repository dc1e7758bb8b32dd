"""A fork and its parent share each call of the rounds the fork keeps: one inbox entry, one decision, at most one
execution, whichever of them (a worker, ``execute``, the parent's resume, the fork's or a fork of the fork's) runs
it. Tool calls are counted in the tool itself. Both backends; the property test on SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import io
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit import (
    LoopConfig,
    Prompt,
    ProposedAction,
    RoleSpec,
    StopReason,
    Tier,
    ToolRoundInfo,
    run_tool_loop_tiered,
    tool,
    tool_set,
)
from agentkit.errors import ResumeRefused, TransitionRefused
from agentkit.journal import Journal, JournalObserver, ProposalRecord, ProposalState, RunStatus, SQLiteJournal
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Query, Target

deleted: Counter[str] = Counter()
"""How many times the irreversible tool really ran, per path: counted in the tool, outside every journal."""
started = asyncio.Event()
"""Set by a `slow_delete` call as it starts (its proposal is claimed by then)."""
release = asyncio.Event()
"""Set to let a `slow_delete` call finish (new events per test: an event belongs to the loop that waited on it)."""


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Search."""
    return [f"doc:{args.query}"]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path."""
    deleted[args.path] += 1
    return [f"deleted:{args.path}"]


@tool(tier=Tier.IRREVERSIBLE, name="delete")
async def slow_delete(args: Target) -> list[str]:
    """Delete a path, once `release` is set."""
    deleted[args.path] += 1
    started.set()
    await release.wait()
    return [f"deleted:{args.path}"]


TOOLS = tool_set(search, delete)


class Agent:
    def role(self) -> RoleSpec:
        return RoleSpec(model="model")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="clean", dynamic=f"{ctx} round {info.round}")


@pytest.fixture(autouse=True)
def _reset() -> None:
    global started, release
    deleted.clear()
    started, release = asyncio.Event(), asyncio.Event()


def find(text: str) -> dict[str, Any]:
    return call_step(Query(query=text), tool=search)


def remove(path: str) -> dict[str, Any]:
    return call_step(Target(path=path), tool=delete)


async def proposing(journal: Journal, path: str = "/x") -> str:
    """A run that searches, then proposes deleting `path` and stops on it; its id."""
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(
            ScriptedCaller([find("a"), remove(path)]), Agent(), TOOLS, "clean", LoopConfig(), observer=observer
        )
    assert result.stop_reason is StopReason.PROPOSED
    return result.run_id


async def resumed(journal: Journal, run_id: str, *steps: dict[str, Any]) -> list[str]:
    """Resume `run_id` until the executor is done; its items."""
    result = await journal.resume(run_id, ScriptedCaller([*steps, done_step()]), Agent(), TOOLS, "clean")
    assert result.stop_reason is StopReason.EXECUTOR_DONE, result.error
    return list(result.items)


async def test_a_fork_after_a_worker_ran_the_approved_call_never_runs_it_again(journal: Journal) -> None:
    """The reported case: a proposal approved and run by a worker before its run was resumed, then the run forked at
    that round. The fork proposes nothing (the inbox holds no new pending entry), approving and working whatever is
    pending runs nothing, and resuming the fork goes on with the recorded batch: the tool ran once in all."""
    run = await proposing(journal)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    report = await journal.work([delete], until_empty=True)
    assert (report.executed, deleted["/x"]) == (1, 1)
    fork = await journal.fork(run, at_round=2)
    assert await journal.pending() == []
    for left in await journal.pending():  # what an operator would do with anything the fork put in the inbox
        await journal.approve(left.id, "ops")
    await journal.work([delete], until_empty=True)
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert await resumed(journal, run) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTED


async def test_a_fork_made_while_the_call_was_pending_shares_its_decision_and_execution(journal: Journal) -> None:
    """Forked while the proposal was pending: resuming the fork waits on the parent's entry (named in the refusal);
    once it is approved and a worker ran it, the fork and the parent both go on with its batch and it ran once."""
    run = await proposing(journal)
    fork = await journal.fork(run, at_round=2)
    [pending] = await journal.pending()
    assert (pending.run_id, (await journal.run(fork)).status) == (run, RunStatus.WAITING)
    with pytest.raises(ResumeRefused, match=f"proposal {pending.id} .* is pending"):
        await resumed(journal, fork)
    await journal.approve(pending.id, "ops")
    await journal.execute(pending.id, delete)
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert await resumed(journal, run) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1


async def test_a_fork_resumed_first_runs_the_shared_call_once_for_both(journal: Journal) -> None:
    """Approved but not run yet: the fork's resume runs it (through the claim), the parent's resume then reads its
    outcome, and a worker finds nothing left to run."""
    run = await proposing(journal)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    fork = await journal.fork(run, at_round=2)
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert (await journal.work([delete], until_empty=True)).executed == 0
    assert await resumed(journal, run) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1


async def test_a_fork_of_a_fork_inherits_the_execution_of_the_first_parent(journal: Journal) -> None:
    """Run, fork at its proposal, fork of the fork at the same round: once the run's call ran, each of the three
    goes on with its batch; a fork of the fork at round 1 keeps none of it and proposes the call anew."""
    run = await proposing(journal)
    first = await journal.fork(run, at_round=2)
    second = await journal.fork(first, at_round=2)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.execute(pending.id, delete)
    for each in (second, first, run):
        assert await resumed(journal, each) == ["doc:a", "deleted:/x"]
    earlier = await journal.fork(second, at_round=1)
    stopped = await journal.resume(earlier, ScriptedCaller([remove("/y")]), Agent(), TOOLS, "clean")
    assert stopped.stop_reason is StopReason.PROPOSED
    [mine] = await journal.pending()
    assert (mine.run_id, mine.round, dict(deleted)) == (earlier, 2, {"/x": 1})


async def test_a_fork_inherits_a_rejection_recorded_in_the_inbox(journal: Journal) -> None:
    """Rejected in the inbox before the run was resumed: the fork goes on with the rejection, nothing pending, and
    the call never runs."""
    run = await proposing(journal)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", "keep it")
    fork = await journal.fork(run, at_round=2)
    assert await journal.pending() == []
    assert await resumed(journal, fork) == ["doc:a"]
    assert deleted["/x"] == 0


async def test_a_fork_of_a_call_being_executed_waits_for_that_execution(journal: Journal) -> None:
    """Claimed by a worker and still running when the run is forked: resuming the fork is refused naming the claim,
    no pending entry is made, approving it again is refused; once the worker recorded the outcome, the fork goes
    on with it and the tool ran once."""
    run = await proposing(journal)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    running = asyncio.create_task(journal.execute(pending.id, slow_delete, worker="w1"))
    await started.wait()
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTING
    fork = await journal.fork(run, at_round=2)
    assert await journal.pending() == []
    with pytest.raises(ResumeRefused, match=f"proposal {pending.id} .* is executing, claimed by w1"):
        await resumed(journal, fork)
    with pytest.raises(TransitionRefused):
        await journal.approve(pending.id, "ops")
    release.set()
    await running
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1


async def own_entry_after_the_parents_ran(journal: Journal) -> tuple[str, str, ProposalRecord, ProposalRecord]:
    """A run's fork at round 2, the parent's shared call approved and executed, then an entry of the fork's own
    proposed for that call: the run, the fork, the parent's entry and the fork's."""
    run = await proposing(journal)
    fork = await journal.fork(run, at_round=2)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.execute(pending.id, delete)
    action = ProposedAction.create(tool_name="delete", tier=Tier.IRREVERSIBLE, args=Target(path="/x"), round=2)
    own = await journal.propose(action.model_copy(update={"run_id": fork}))
    return run, fork, pending, own


async def test_a_forks_own_entry_for_a_shared_call_that_ran_elsewhere_is_not_run_again(journal: Journal) -> None:
    """A fork holding an entry of its own for a call it shares (as forks made by an earlier agentkit do, or one
    proposed by hand): once the call ran under the parent's entry, resuming the fork takes that outcome instead of
    waiting on its own entry's decision, and the tool ran once."""
    _, fork, pending, own = await own_entry_after_the_parents_ran(journal)
    assert (own.run_id, own.digest, own.state) == (fork, pending.digest, ProposalState.PENDING)
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1


async def test_no_worker_runs_a_forks_own_entry_for_a_call_its_parent_ran(journal: Journal) -> None:
    """A fork's own entry for a call it shares, approved after the call ran under the parent's entry: ``execute``
    refuses it naming the parent's proposal, a worker leaves it saying why, and the tool ran once."""
    run, _, pending, own = await own_entry_after_the_parents_ran(journal)
    await journal.approve(own.id, "ops")
    with pytest.raises(TransitionRefused, match=f"forked from run {run!r}, whose proposal {pending.id} .* is executed"):
        await journal.execute(own.id, delete)
    report = await journal.work([delete], until_empty=True)
    assert (report.executed, report.left, deleted["/x"]) == (0, [own.id], 1)
    assert (await journal.get(own.id)).state is ProposalState.APPROVED


async def test_the_cli_fork_after_a_worker_ran_the_call_proposes_nothing(journal: Journal, journal_url: str) -> None:
    """``agentkit journal fork RUN --at 2`` after the approved call ran: the inbox gains no pending entry and the
    fork resumes with the recorded batch."""
    from agentkit._cli import main

    run = await proposing(journal)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.execute(pending.id, delete)

    def fork_cli() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["journal", "fork", run, "--at", "2", "--db", journal_url])
        return code, out.getvalue().strip()

    code, fork = await asyncio.to_thread(fork_cli)
    assert (code, (await journal.run(fork)).parent) == (0, run)
    assert await journal.pending() == []
    assert await resumed(journal, fork) == ["doc:a", "deleted:/x"]
    assert deleted["/x"] == 1


# -- property: whatever the order of proposals, decisions, executions, resumes and forks, no call runs twice -----

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("approve"), st.integers(0, 7)),
        st.tuples(st.just("reject"), st.integers(0, 7)),
        st.tuples(st.just("work"), st.just(0)),
        st.tuples(st.just("execute"), st.integers(0, 7)),
        st.tuples(st.just("resume"), st.integers(0, 7)),
        st.tuples(st.just("fork"), st.integers(0, 7), st.integers(0, 4)),
    ),
    max_size=14,
)


class _Lineage:
    """The runs of one example (the first run and its forks) and the steps each resume proposes: every call an
    agent proposes names a fresh path, so a digest is one proposed call, and only inheriting it may repeat it."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.runs: list[str] = []
        self.paths = 0

    def fresh(self) -> dict[str, Any]:
        self.paths += 1
        return remove(f"/p{self.paths}")

    def pick(self, index: int) -> str:
        return self.runs[index % len(self.runs)]

    async def start(self) -> None:
        with JournalObserver(self.journal) as observer:
            result = await run_tool_loop_tiered(
                ScriptedCaller([find("a"), self.fresh()]), Agent(), TOOLS, "clean", LoopConfig(), observer=observer
            )
        self.runs.append(result.run_id)

    async def apply(self, op: tuple[Any, ...]) -> None:
        journal = self.journal
        match op:
            case ("approve" | "reject" as decision, index):
                pending = await journal.pending()
                if pending:
                    chosen = pending[index % len(pending)]
                    if decision == "approve":
                        await journal.approve(chosen.id, "ops")
                    else:
                        await journal.reject(chosen.id, "ops", "no")
            case ("work", _):
                await journal.work([delete], until_empty=True)
            case ("execute", index):
                approved = await journal.proposals(state=ProposalState.APPROVED)
                if approved:
                    await journal.execute(approved[index % len(approved)].id, delete)
            case ("resume", index):
                # A resume refused (a decision outstanding) or finished (nothing to resume) changes nothing.
                with contextlib.suppress(ResumeRefused):
                    run = self.pick(index)
                    steps = [self.fresh(), done_step()]
                    await journal.resume(run, ScriptedCaller(steps), Agent(), TOOLS, "clean")
            case ("fork", index, at):
                run = self.pick(index)
                rounds = (await journal.state(run)).rounds
                self.runs.append(await journal.fork(run, at_round=min(at, rounds)))
            case _:
                raise AssertionError(op)


async def never_proposed_again(journal: Journal) -> None:
    """No call that was claimed or ran has another entry waiting for a decision or a worker."""
    entries = await journal.proposals()
    claimed = {p.digest for p in entries if p.state in (ProposalState.EXECUTING, ProposalState.EXECUTED)}
    waiting = {p.digest for p in entries if p.state in (ProposalState.PENDING, ProposalState.APPROVED)}
    assert not claimed & waiting, [p for p in entries if p.digest in claimed & waiting]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_no_interleaving_of_proposals_decisions_executions_resumes_and_forks_runs_a_call_twice(
    ops: list[tuple[Any, ...]],
) -> None:
    """Over any order of approvals, rejections, worker runs, ``execute``, resumes and forks (of the run and of its
    forks, at any round), no call that ran is ever waiting in the inbox again, and every proposed call (one path
    each) is deleted at most once (SQLite)."""
    deleted.clear()

    async def play(folder: str) -> None:
        journal = SQLiteJournal(Path(folder) / "journal.db")
        try:
            lineage = _Lineage(journal)
            await lineage.start()
            for op in ops:
                await lineage.apply(op)
                await never_proposed_again(journal)
            for run in lineage.runs:  # settle everything: approve what waits, run it, resume every run
                for waiting in await journal.pending():
                    await journal.approve(waiting.id, "ops")
                await journal.work([delete], until_empty=True)
                with contextlib.suppress(ResumeRefused):
                    await journal.resume(run, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
        finally:
            await journal.close()

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(play(folder))
    assert all(count == 1 for count in deleted.values()), dict(deleted)
