"""Steps of several calls on the journal, on both backends: each call is kept as it finishes, so a run that
dies mid-step resumes without running a finished call again; resume, fork and the inbox see every call."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit import AfterProposal, LoopConfig, RepeatPolicy, RunCheckpoint, StopReason, Tier, Tool, tool
from agentkit import run_tool_loop_tiered as tiered
from agentkit.decisions import Grant, PathPrefix
from agentkit.errors import ResumeRefused
from agentkit.journal import Journal, JournalObserver, ProposalState, RunStatus
from agentkit.testing import ScriptedCaller, call_step, calls_step, done_step
from tests.support import NO_WAIT, Executor, Query, Target

STEP = ("a", "b", "c", "d")
calls: list[str] = []


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Target) -> list[str]:
    """Delete a path for good."""
    calls.append(f"wipe {args.path}")
    return [f"wiped {args.path}"]


def config(**changes: object) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, max_calls_per_step=4, max_parallel_calls=1, **changes)  # type: ignore[arg-type]  # test knobs


async def lease_runs_out(journal: Journal, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while (await journal.run(run_id)).status is RunStatus.RUNNING:
        assert time.monotonic() < deadline, "the lease never ran out"
        await asyncio.sleep(0.05)


async def crashed_in_step(journal: Journal, dies_at: int) -> tuple[str, list[str]]:
    """A run whose process 'dies' (its recorder stops) inside the step's call number `dies_at`: the run's id, and
    the calls that finished before."""
    observer = JournalObserver(journal, lease=timedelta(seconds=0.3))

    @tool(tier=Tier.READ_ONLY, name="search")
    def dying(args: Query) -> list[str]:
        """Find documents; the process dies inside one call."""
        calls.append(args.query)
        if args.query == STEP[dies_at]:
            observer.close()  # everything queued so far is written; nothing after, as in a crash
        return [f"doc:{args.query}"]

    step = calls_step(*(call_step(Query(query=q), tool="search") for q in STEP))
    lost = await tiered(
        ScriptedCaller([step, done_step()]), Executor[str](), [dying, wipe], "c", config(), observer=observer
    )
    await lease_runs_out(journal, lost.run_id)
    return lost.run_id, list(STEP[:dies_at])


async def test_a_run_dead_mid_step_resumes_without_running_a_finished_call_again(journal: Journal) -> None:
    """The process dies inside the step's third call: the two finished calls are kept and never run again."""
    calls.clear()
    run_id, finished = await crashed_in_step(journal, 2)
    assert calls == list(STEP)  # the first leg ran on, unrecorded
    calls.clear()
    search = dying_free()
    again = ScriptedCaller([calls_step(*(call_step(Query(query=q), tool="search") for q in ("c", "d"))), done_step()])
    result = await journal.resume(run_id, again, Executor[str](), [search, wipe], "c")
    assert calls == ["c", "d"]
    assert result.items == [f"doc:{q}" for q in (*finished, "c", "d")]
    assert result.stop_reason is StopReason.EXECUTOR_DONE


def dying_free() -> Tool[Query, str]:
    @tool(tier=Tier.READ_ONLY, name="search")
    def search(args: Query) -> list[str]:
        """Find documents."""
        calls.append(args.query)
        return [f"doc:{args.query}"]

    return search


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dies_at=st.integers(min_value=0, max_value=len(STEP) - 1))
async def test_no_finished_call_reruns_after_a_crash_anywhere_in_a_step(journal: Journal, dies_at: int) -> None:
    """Wherever in a step the process dies, the resumed run holds each finished call's batch and runs none again."""
    calls.clear()
    run_id, finished = await crashed_in_step(journal, dies_at)
    calls.clear()
    rest = [q for q in STEP if q not in finished]
    again = ScriptedCaller([calls_step(*(call_step(Query(query=q), tool="search") for q in rest)), done_step()])
    result = await journal.resume(run_id, again, Executor[str](), [dying_free(), wipe], "c")
    assert calls == rest
    assert sorted(result.items) == sorted(f"doc:{q}" for q in STEP)
    state: RunCheckpoint = result.checkpoint
    ran = [e for e in state.entries if e.kind == "round" and e.tool == "search" and e.outcome.value == "ran"]
    assert len(ran) == len(STEP)


async def test_a_step_that_runs_a_read_and_proposes_a_wipe_resumes_once_approved(journal: Journal) -> None:
    """A step's read runs and its wipe waits in the inbox, with the read in its evidence; approved, it runs once."""
    calls.clear()
    step = calls_step(call_step(Query(query="a"), tool="search"), call_step(Target(path="/srv/x"), tool="wipe"))
    with JournalObserver(journal) as observer:
        first = await tiered(
            ScriptedCaller([step]), Executor[str](), [dying_free(), wipe], "c", config(), observer=observer
        )
    assert first.stop_reason is StopReason.PROPOSED
    assert calls == ["a"]
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    result = await journal.resume(
        first.run_id, ScriptedCaller([done_step()]), Executor[str](), [dying_free(), wipe], "c"
    )
    assert calls == ["a", "wipe /srv/x"]
    assert result.items == ["doc:a", "wiped /srv/x"]
    forked = first.checkpoint.forked("fork-1", at_round=1)
    assert [c.tool for c in forked.progress.calls] == ["search", "wipe"]


async def test_a_run_dead_mid_step_after_a_stop_proposal_waits_for_its_decision(journal: Journal) -> None:
    """Under AfterProposal.STOP, a process that dies in a step's live call after the step proposed a wipe leaves a
    run that stopped at the proposal: resume is refused until the wipe is decided (the model is not asked, nothing
    runs), then the approved wipe runs once and the finished read never again."""
    calls.clear()
    observer = JournalObserver(journal, lease=timedelta(seconds=0.3))

    @tool(tier=Tier.READ_ONLY, name="search")
    def dying(args: Query) -> list[str]:
        """Find documents; the process dies inside the call for 'crash'."""
        calls.append(args.query)
        if args.query == "crash":
            observer.close()
        return [f"doc:{args.query}"]

    step = calls_step(
        call_step(Target(path="/z"), tool="wipe"),
        call_step(Query(query="a"), tool="search"),
        call_step(Query(query="crash"), tool="search"),
    )
    lost = await tiered(
        ScriptedCaller([step, done_step()]), Executor[str](), [dying, wipe], "c", config(), observer=observer
    )
    await lease_runs_out(journal, lost.run_id)
    assert (await journal.state(lost.run_id)).stop_reason is None  # it died before its end was recorded
    calls.clear()
    asked = ScriptedCaller([done_step()])
    with pytest.raises(ResumeRefused, match="waits on a decision"):
        await journal.resume(lost.run_id, asked, Executor[str](), [dying_free(), wipe], "c")
    assert calls == []
    assert asked.requests == []
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    result = await journal.resume(lost.run_id, asked, Executor[str](), [dying_free(), wipe], "c")
    assert calls == ["wipe /z"]
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.items == ["wiped /z", "doc:a"]


async def test_after_proposal_continue_keeps_the_steps_other_calls(journal: Journal) -> None:
    """Under CONTINUE the step's proposal waits and its read's batch goes on into the next round."""
    calls.clear()
    step = calls_step(call_step(Target(path="/srv/y"), tool="wipe"), call_step(Query(query="b"), tool="search"))
    with JournalObserver(journal) as observer:
        result = await tiered(
            ScriptedCaller([step, done_step()]),
            Executor[str](),
            [dying_free(), wipe],
            "c",
            config(after_proposal=AfterProposal.CONTINUE),
            observer=observer,
        )
    assert result.items == ["doc:b"]
    assert [p.tool_name for p in result.proposed] == ["wipe"]
    assert calls == ["b"]


async def test_the_inbox_evidence_of_a_later_proposal_lists_every_call_of_a_step(journal: Journal) -> None:
    """A proposal after a step of two searches carries both calls, in the step's order, in its evidence."""
    calls.clear()
    step = calls_step(call_step(Query(query="a"), tool="search"), call_step(Query(query="b"), tool="search"))
    wiping = call_step(Target(path="/srv/z"), tool="wipe")
    with JournalObserver(journal) as observer:
        await tiered(
            ScriptedCaller([step, wiping]), Executor[str](), [dying_free(), wipe], "c", config(), observer=observer
        )
    [pending] = await journal.pending()
    assert pending.evidence is not None
    assert [(seen.round, seen.tool_name, seen.ran) for seen in pending.evidence.calls] == [
        (1, "search", True),
        (1, "search", True),
    ]
    assert pending.evidence.rounds == (1,)


async def test_the_same_gated_call_twice_in_a_step_is_one_inbox_entry_decided_once(journal: Journal) -> None:
    """Two identical wipes of a repeat-exempt tool in one step: the run proposes the first, records the second as
    its duplicate; the inbox's one entry, approved, runs the wipe once, and the resumed executor sees both calls
    settled (the wipe's batch, and the duplicate's note)."""
    calls.clear()
    wiping = call_step(Target(path="/srv/a"), tool="wipe")
    exempt = config(repeat_exempt=frozenset({"wipe"}))
    with JournalObserver(journal) as observer:
        first = await tiered(
            ScriptedCaller([calls_step(wiping, wiping)]),
            Executor[str](),
            [dying_free(), wipe],
            "c",
            exempt,
            observer=observer,
        )
    assert first.stop_reason is StopReason.PROPOSED
    assert len(first.proposed) == 1
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    agent = Executor[str]()
    result = await journal.resume(first.run_id, ScriptedCaller([done_step()]), agent, [dying_free(), wipe], "c")
    assert calls == ["wipe /srv/a"]
    assert result.items == ["wiped /srv/a"]
    shown = agent.infos[0].prior_calls
    assert [(c.proposed, list(c.batch)) for c in shown] == [(False, ["wiped /srv/a"]), (False, [])]
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTED


async def test_a_journal_grant_of_a_call_in_a_step_that_ends_in_a_stalemate_approves_its_entry_once(
    journal: Journal,
) -> None:
    """A repeat later in the step ends the run before its wipe runs: the wipe is left in the inbox, where the
    journal's grant approves it (one use), and it runs exactly once when a worker executes it."""
    calls.clear()
    kept = await journal.grant(
        Grant.of(
            wipe,
            where={"path": PathPrefix(prefix="/tmp")},
            max_uses=1,
            allow_irreversible=True,
            granted_by="ops",
            reason="scratch",
        ),
        tool=wipe,
    )
    look = call_step(Query(query="a"), tool="search")
    step = calls_step(call_step(Target(path="/tmp/x"), tool="wipe"), look, look)
    with JournalObserver(journal) as observer:
        result = await tiered(
            ScriptedCaller([step]),
            Executor[str](),
            [dying_free(), wipe],
            "c",
            config(on_repeat=RepeatPolicy.STOP),
            observer=observer,
        )
    assert result.stop_reason is StopReason.DEGENERATION
    assert calls == []
    [entry] = await journal.proposals()
    assert (entry.state, entry.approved_by) == (ProposalState.APPROVED, f"grant:{kept.id}")
    assert (await journal.execute(entry.id, wipe)).ok
    assert calls == ["wipe /tmp/x"]
    [listed] = await journal.grants()
    assert listed.uses == 1
