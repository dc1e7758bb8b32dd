"""``journal.fork``: a new run whose state is another's up to a round, resumed with another agent or config: the calls
that ran before the fork are inherited, never run again (a proposal of those rounds is shared with the original: decided
once, run at most once); a gated call it reaches is its own proposal. Both backends."""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

import pytest

from agentkit import (
    LoopConfig,
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    ToolRoundInfo,
    UsageError,
    run_tool_loop_tiered,
    tool,
    tool_set,
)
from agentkit.errors import ResumeRefused
from agentkit.journal import Journal, JournalObserver, ProposalState, RunStatus
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Query, Target

ran: list[str] = []


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Search."""
    ran.append(f"search {args.query}")
    return [f"doc:{args.query}"]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[str]:
    """Delete a path."""
    ran.append(f"delete {args.path}")
    return [f"deleted:{args.path}"]


TOOLS = tool_set(search, delete)


class Agent:
    def __init__(self, name: str = "first") -> None:
        self.name = name

    def role(self) -> RoleSpec:
        return RoleSpec(model=f"model-{self.name}")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system=self.name, dynamic=f"{ctx} round {info.round}: {[c.batch for c in info.prior_calls]}")


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def find(text: str) -> dict[str, Any]:
    return call_step(Query(query=text), tool=search)


def remove(path: str) -> dict[str, Any]:
    return call_step(Target(path=path), tool=delete)


async def recorded(journal: Journal, steps: list[Any]) -> str:
    with JournalObserver(journal) as observer:
        result = await run_tool_loop_tiered(
            ScriptedCaller(steps), Agent(), TOOLS, "clean", LoopConfig(max_rounds=6), observer=observer
        )
    ran.clear()
    return result.run_id


async def test_a_fork_inherits_the_calls_before_its_round_and_runs_none_again(journal: Journal) -> None:
    """Forked after round 2 of a run of three searches: the fork is READY, records its parent and round, and resumed
    by another agent it shows that agent both inherited calls; only the fork's own call runs."""
    original = await recorded(journal, [find("a"), find("b"), find("c"), done_step()])
    fork = await journal.fork(original, at_round=2)
    record = await journal.run(fork)
    assert (record.parent, record.forked_at, record.status) == (original, 2, RunStatus.READY)
    other = Agent("second")
    caller = ScriptedCaller([find("z"), done_step("enough")])
    result = await journal.resume(fork, caller, other, TOOLS, "clean")
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert ran == ["search z"]
    assert result.items == ["doc:a", "doc:b", "doc:z"]
    assert "[('doc:a',), ('doc:b',)]" in caller.requests[0].dynamic
    assert (await journal.state(original)).rounds == 4  # the original is untouched


async def test_a_gated_call_the_fork_reaches_is_its_own_proposal(journal: Journal) -> None:
    """The original's delete was approved and ran after round 2; a fork at round 1 that proposes it again gets a
    new pending proposal under its own id, and nothing is deleted until that one is approved."""
    original = await recorded(journal, [find("a"), remove("/x")])
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.resume(original, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
    assert ran == ["delete /x"]
    ran.clear()
    fork = await journal.fork(original, at_round=1)
    stopped = await journal.resume(fork, ScriptedCaller([remove("/x")]), Agent(), TOOLS, "clean")
    assert (stopped.stop_reason, ran) == (StopReason.PROPOSED, [])
    [mine] = await journal.pending()
    assert (mine.run_id, mine.tool_name, mine.digest) == (fork, "delete", pending.digest)


async def test_a_fork_after_an_executed_approved_call_does_not_run_it_again(journal: Journal) -> None:
    """A fork at the round of a proposal that was approved and ran inherits the execution: resumed, the fork goes on
    with the call's batch and the tool is not called."""
    original = await recorded(journal, [find("a"), remove("/x")])
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.resume(original, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
    ran.clear()
    fork = await journal.fork(original, at_round=2)
    result = await journal.resume(fork, ScriptedCaller([done_step("done")]), Agent("second"), TOOLS, "clean")
    assert (result.stop_reason, ran) == (StopReason.EXECUTOR_DONE, [])
    assert result.items == ["doc:a", "deleted:/x"]


async def test_a_fork_at_an_undecided_proposal_waits_on_the_decision_it_shares_with_the_original(
    journal: Journal,
) -> None:
    """The original waits on a pending delete; a fork at that round shares that inbox entry (it makes none of its
    own): resuming it is refused until the entry is decided, then the approved call runs once, and the original,
    resumed after, goes on with its batch without running it again."""
    original = await recorded(journal, [find("a"), remove("/x")])
    fork = await journal.fork(original, at_round=2)
    assert (await journal.run(fork)).status is RunStatus.WAITING
    with pytest.raises(ResumeRefused, match="waits on a decision"):
        await journal.resume(fork, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
    [shared] = await journal.pending()
    assert shared.run_id == original
    await journal.approve(shared.id, "ops")
    result = await journal.resume(fork, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
    assert (result.stop_reason, ran) == (StopReason.EXECUTOR_DONE, ["delete /x"])
    assert (await journal.get(shared.id)).state is ProposalState.EXECUTED
    again = await journal.resume(original, ScriptedCaller([done_step()]), Agent(), TOOLS, "clean")
    assert (again.items, ran) == (["doc:a", "deleted:/x"], ["delete /x"])


async def test_a_fork_goes_on_under_the_config_it_is_given(journal: Journal) -> None:
    """``fork(..., config=)``: the fork runs under the new ceilings (here one more round only)."""
    original = await recorded(journal, [find("a"), find("b"), find("c"), done_step()])
    fork = await journal.fork(original, at_round=1, config=LoopConfig(max_rounds=2))
    result = await journal.resume(fork, ScriptedCaller([find("y"), find("w")]), Agent(), TOOLS, "clean")
    assert (result.stop_reason, result.rounds, ran) == (StopReason.ROUND_CEILING, 2, ["search y"])


async def test_a_fork_at_a_round_the_run_never_reached_is_refused(journal: Journal) -> None:
    """At a round past the run's last, or below 0: ``UsageError`` naming the rounds it has; nothing is written."""
    original = await recorded(journal, [find("a"), done_step()])
    for bad in (3, -1):
        with pytest.raises(UsageError, match="reached round 2; fork it at a round from 0 to 2"):
            await journal.fork(original, at_round=bad)
    assert [r.id for r in await journal.runs()] == [original]


async def test_the_cli_forks_and_exports(journal: Journal, journal_url: str) -> None:
    """``agentkit journal fork RUN --at K`` prints the fork's id; ``agentkit journal export`` prints its state."""
    from agentkit import RunCheckpoint
    from agentkit._cli import main

    original = await recorded(journal, [find("a"), find("b"), done_step()])

    def run(*command: str) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main([*command, "--db", journal_url])
        return code, out.getvalue()

    code, printed = await asyncio.to_thread(run, "journal", "fork", original, "--at", "1")
    fork = printed.strip()
    assert code == 0
    assert (await journal.run(fork)).parent == original
    code, exported = await asyncio.to_thread(run, "journal", "export", fork)
    state = RunCheckpoint.model_validate_json(exported)
    state.verify()
    assert (code, state.run_id, state.parent, state.forked_at, state.rounds) == (0, fork, original, 1, 1)
