"""One lease mechanism for every hold: a run's first leg and a resumed leg keep their hold while a sync tool blocks
the event loop for longer than the lease, so a second resumer is refused and nothing runs twice."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from agentkit import Prompt, RoleSpec, StopReason, Tier, Tool, ToolRoundInfo, run_tool_loop_tiered, tool
from agentkit.journal import Journal, JournalObserver, RunClaimed, open_journal
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import PathArgs

pytestmark = pytest.mark.slow

LEASE = timedelta(seconds=1)
BLOCK = 4.0
"""How long ``touch`` holds the event loop: four leases."""

touched: list[str] = []


@tool(tier=Tier.REVERSIBLE)
def touch(args: PathArgs) -> list[str]:
    """Touch a file (sync, and slow: it holds the event loop)."""
    touched.append(args.path)
    time.sleep(BLOCK)
    return [f"touched {args.path}"]


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: PathArgs) -> list[str]:
    """Delete a path."""
    return [f"wiped {args.path}"]


TOOLS: list[Tool[Any, str]] = [touch, wipe]


class Planner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="planner")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="plan", dynamic=f"{ctx} round {info.round}")


def touch_step() -> dict[str, Any]:
    return call_step(PathArgs(path="/tmp/x"), tool="touch")


def second_resume(url: str, run_id: str | None, outcome: list[BaseException | str]) -> None:
    """Another process's resume of the run (the one the journal lists, without ``run_id``), three seconds after
    it was found: its own thread, event loop and connection, while the first holds its event loop."""

    async def attempt() -> None:
        journal = open_journal(url)
        try:
            found = run_id
            while found is None:
                runs = await journal.runs()
                found = runs[0].id if runs else None
                await asyncio.sleep(0.01)
            await asyncio.sleep(3.0)
            await journal.resume(found, ScriptedCaller([done_step()]), Planner(), TOOLS, "ctx", lease=LEASE)
            outcome.append("resumed")
        except BaseException as error:
            outcome.append(error)
        finally:
            await journal.close()

    asyncio.run(attempt())


@pytest.fixture(autouse=True)
def _reset() -> None:
    touched.clear()


async def test_a_first_leg_blocked_by_a_sync_tool_keeps_its_hold(journal: Journal, journal_url: str) -> None:
    """A first leg whose sync tool holds the event loop for four leases: a resume three seconds in is refused
    with ``RunClaimed``, and the tool runs once."""
    outcome: list[BaseException | str] = []
    caller = ScriptedCaller([touch_step(), done_step()])
    other = threading.Thread(target=second_resume, args=(journal_url, None, outcome))
    other.start()
    with JournalObserver(journal, lease=LEASE) as observer:
        result = await run_tool_loop_tiered(caller, Planner(), TOOLS, "ctx", observer=observer)
    await asyncio.to_thread(other.join)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert touched == ["/tmp/x"]
    [refused] = outcome
    assert isinstance(refused, RunClaimed), refused


async def test_a_resumed_leg_blocked_by_a_sync_tool_keeps_its_hold(journal: Journal, journal_url: str) -> None:
    """The same load on a resumed leg (lease of one second; ``touch`` blocks four): the second resumer is refused
    with ``RunClaimed``, nothing is taken over, and ``touch`` runs once."""
    first = ScriptedCaller([call_step(PathArgs(path="/srv/old"), tool="wipe")])
    with JournalObserver(journal) as observer:
        proposed = await run_tool_loop_tiered(first, Planner(), TOOLS, "ctx", observer=observer)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    outcome: list[BaseException | str] = []
    other = threading.Thread(target=second_resume, args=(journal_url, proposed.run_id, outcome))
    other.start()
    caller = ScriptedCaller([touch_step(), done_step()])
    result = await journal.resume(proposed.run_id, caller, Planner(), TOOLS, "ctx", lease=LEASE)
    await asyncio.to_thread(other.join)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert touched == ["/tmp/x"]
    [refused] = outcome
    assert isinstance(refused, RunClaimed), refused


def test_a_lease_is_a_timedelta_or_seconds(journal: Journal) -> None:
    """``JournalObserver(lease=2)`` takes seconds, as the CLI's ``--lease`` does; nonsense is refused, naming it."""
    assert JournalObserver(journal, lease=2).lease == timedelta(seconds=2)
    assert JournalObserver(journal, lease=timedelta(seconds=3)).lease == timedelta(seconds=3)
    from agentkit import UsageError

    for bad in (0, -1, "2", True, float("inf")):
        with pytest.raises(UsageError, match="lease must be a positive timedelta or a positive number of seconds"):
            JournalObserver(journal, lease=bad)  # type: ignore[arg-type]  # the check is the point
