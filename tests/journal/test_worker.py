"""``journal.work``: claim the next approved call in one statement, run it once, record it; on both backends.

PostgreSQL-only behaviour (pool, isolation, LISTEN/NOTIFY, killed connections, plans) is in
``tests/journal/test_worker_postgres.py``; many processes in ``tests/journal/test_concurrency.py``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import ProposedAction, Tier, UsageError, tool
from agentkit.journal import (
    DEFAULT_STUCK_AFTER,
    Journal,
    NothingRan,
    ProposalState,
    Worked,
    WorkOutcome,
)
from tests.support import Mail, Wipe, expire_lease, mail, wipe_tool


async def approved(journal: Journal, target: str, *, tool_name: str = "wipe") -> str:
    args: BaseModel = Wipe(target=target) if tool_name == "wipe" else Mail(to=target)
    tier = Tier.IRREVERSIBLE if tool_name == "wipe" else Tier.EXTERNAL_REVERSIBLE
    action = ProposedAction[BaseModel].create(tool_name=tool_name, tier=tier, args=args, round=1, run_id=target)
    record = await journal.propose(action)
    await journal.approve(record.id, "alice")
    return record.id


async def test_work_runs_every_approved_proposal_once_oldest_first(journal: Journal) -> None:
    """A worker drains the approved queue in the order proposals were made, each executed once."""
    ids = [await approved(journal, f"t{i}") for i in range(5)]
    ran: list[str] = []
    report = await journal.work([wipe_tool(ran)], until_empty=True)
    assert ran == [f"t{i}" for i in range(5)]
    assert (report.executed, report.failed, report.claimed) == (5, 0, 5)
    for id in ids:
        record = await journal.get(id)
        assert (record.state, record.lease_until) == (ProposalState.EXECUTED, None)
        claims = [t for t in await journal.history(id) if t.to_state is ProposalState.EXECUTING]
        assert len(claims) == 1


async def test_a_proposal_whose_tool_the_worker_lacks_is_left_approved_for_another(journal: Journal) -> None:
    """Tools match by name: a worker without ``mail`` leaves the mail approved, and a worker with it runs it."""
    mail_id = await approved(journal, "bob@example.com", tool_name="mail")
    wipe_id = await approved(journal, "staging")
    ran: list[str] = []
    report = await journal.work([wipe_tool(ran)], until_empty=True)
    assert (report.executed, ran) == (1, ["staging"])
    assert (await journal.get(mail_id)).state is ProposalState.APPROVED
    assert (await journal.get(wipe_id)).state is ProposalState.EXECUTED
    other = await journal.work([mail], until_empty=True)
    assert other.executed == 1
    assert (await journal.get(mail_id)).state is ProposalState.EXECUTED


async def test_concurrency_bounds_the_calls_running_at_once(journal: Journal) -> None:
    """With ``concurrency=3`` three calls run together, never a fourth, and all ten run."""
    for i in range(10):
        await approved(journal, f"t{i}")
    inside, most = 0, 0
    three = asyncio.Event()

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def wipe(args: Wipe) -> list[str]:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        if inside == 3:
            three.set()
        await asyncio.wait_for(three.wait(), 30)
        await asyncio.sleep(0)
        inside -= 1
        return []

    report = await journal.work([wipe], concurrency=3, until_empty=True)
    assert (report.executed, most) == (10, 3)


async def test_limit_returns_after_that_many_claims(journal: Journal) -> None:
    """``limit=2`` runs two proposals and leaves the rest approved."""
    for i in range(4):
        await approved(journal, f"t{i}")
    ran: list[str] = []
    report = await journal.work([wipe_tool(ran)], limit=2, concurrency=4)
    assert (report.executed, ran) == (2, ["t0", "t1"])
    assert len(await journal.proposals(state=ProposalState.APPROVED)) == 2


async def test_stop_lets_the_running_call_finish_and_claims_nothing_more(journal: Journal) -> None:
    """Setting ``stop`` while a call runs: that call is recorded executed, the next one stays approved."""
    first, second = await approved(journal, "a"), await approved(journal, "b")
    gate, stop, started = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ran: list[str] = []
    worker = asyncio.create_task(journal.work([wipe_tool(ran, gate=gate, started=started)], stop=stop))
    await asyncio.wait_for(started.wait(), 60)
    stop.set()
    gate.set()
    report = await asyncio.wait_for(worker, 60)
    assert (report.executed, ran) == (1, ["a"])
    assert (await journal.get(first)).state is ProposalState.EXECUTED
    assert (await journal.get(second)).state is ProposalState.APPROVED


async def test_a_tampered_proposal_is_left_approved_and_the_others_run(journal: Journal) -> None:
    """Stored args that no longer match the digest: not run, left approved (reported), the queue goes on."""
    bad, good = await approved(journal, "a"), await approved(journal, "b")
    with journal._tx(write=True) as db:
        db.execute("UPDATE agentkit_proposals SET args = ? WHERE id = ?", ('{"target":"prod"}', bad))
    ran: list[str] = []
    seen: list[Worked] = []
    report = await journal.work([wipe_tool(ran)], until_empty=True, report=seen.append)
    assert (ran, report.left, report.executed) == (["b"], [bad], 1)
    assert [(w.outcome, w.proposal_id) for w in seen] == [(WorkOutcome.LEFT, bad), (WorkOutcome.EXECUTED, good)]
    assert "digest" in (seen[0].error or "")
    assert (await journal.get(bad)).state is ProposalState.APPROVED


async def test_a_failing_tool_is_recorded_failed_and_the_worker_goes_on(journal: Journal) -> None:
    """A tool that raises: that proposal is failed, with its error; the next one still runs."""
    broken, fine = await approved(journal, "broken"), await approved(journal, "fine")

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    def wipe(args: Wipe) -> list[str]:
        if args.target == "broken":
            raise OSError("disk on fire")
        return ["ok"]

    report = await journal.work([wipe], until_empty=True)
    assert (report.executed, report.failed) == (1, 1)
    assert "disk on fire" in ((await journal.get(broken)).error or "")
    assert (await journal.get(fine)).state is ProposalState.EXECUTED


async def test_a_call_resolved_while_it_ran_is_reported_not_recorded(journal: Journal) -> None:
    """Its lease ran out and a human resolved it mid-call: the worker reports and counts it, raises nothing."""
    id, after = await approved(journal, "slow"), await approved(journal, "next")

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def wipe(args: Wipe) -> list[str]:
        if args.target == "slow":
            await asyncio.to_thread(expire_lease, journal, id)
            await journal.resolve(id, "carol", ProposalState.FAILED, "its renewals stopped")
        return [args.target]

    seen: list[Worked] = []
    report = await journal.work([wipe], until_empty=True, lease=timedelta(minutes=5), report=seen.append)
    assert (report.executed, report.failed, report.not_recorded) == (1, 0, [id])
    [lost] = [w for w in seen if w.outcome is WorkOutcome.NOT_RECORDED]
    assert lost.proposal_id == id
    assert "a human resolved it while it ran" in (lost.error or "")
    assert (await journal.get(id)).state is ProposalState.FAILED
    assert (await journal.get(after)).state is ProposalState.EXECUTED


async def test_a_claim_carries_a_lease_that_its_worker_renews_while_the_tool_runs(journal: Journal) -> None:
    """The lease moves forward while the tool runs, so a live worker's claim is not listed as stuck."""
    id = await approved(journal, "slow")
    renewed = asyncio.Event()

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def wipe(args: Wipe) -> list[str]:
        first = (await journal.get(id)).lease_until
        assert first is not None
        for _ in range(600):
            lease = (await journal.get(id)).lease_until
            if lease is not None and lease > first:
                renewed.set()
                break
            await asyncio.sleep(0.05)
        return []

    await journal.work([wipe], until_empty=True, lease=timedelta(seconds=0.3))
    assert renewed.is_set()


async def test_a_dead_workers_claim_shows_as_stuck_once_its_lease_runs_out(journal: Journal) -> None:
    """A worker cancelled mid-tool stops renewing: stuck(), default threshold, lists the claim once the lease ends."""
    id = await approved(journal, "doomed")
    ran: list[str] = []
    started = asyncio.Event()
    doomed = wipe_tool(ran, gate=asyncio.Event(), started=started)
    worker = asyncio.create_task(journal.work([doomed], lease=timedelta(seconds=0.2)))
    await asyncio.wait_for(started.wait(), 60)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    record = await journal.get(id)
    assert record.state is ProposalState.EXECUTING
    assert record.lease_until is not None
    for _ in range(600):
        if await journal.stuck():
            break
        await asyncio.sleep(0.05)
    [stuck] = await journal.stuck(older_than=DEFAULT_STUCK_AFTER)
    assert (stuck.id, stuck.claimed_by) == (id, record.claimed_by)
    assert ran == ["doomed"]


async def test_work_waits_for_an_approval_and_runs_it(journal: Journal, journal_url: str) -> None:
    """A waiting worker picks up a proposal approved after it started (PostgreSQL: woken by NOTIFY, no poll)."""
    ran: list[str] = []
    # On PostgreSQL the safety-net look is an hour away: only the notification can wake the worker in time.
    poll = 3600.0 if journal_url.startswith("postgresql") else 0.05
    worker = asyncio.create_task(journal.work([wipe_tool(ran)], limit=1, poll=poll))
    await asyncio.sleep(0.2)
    assert not worker.done()
    id = await approved(journal, "late")
    report = await asyncio.wait_for(worker, 60)
    assert (report.executed, ran) == (1, ["late"])
    assert (await journal.get(id)).state is ProposalState.EXECUTED


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be"),
        ({"limit": 0}, "limit must be"),
        ({"lease": timedelta(0)}, "lease must be"),
        ({"poll": float("nan")}, "poll must be"),
    ],
)
async def test_bad_worker_options_are_usage_errors(journal: Journal, options: dict[str, object], message: str) -> None:
    """Each option is checked before anything is claimed."""
    await approved(journal, "a")
    with pytest.raises(UsageError, match=message):
        await journal.work([wipe_tool([])], **options)  # type: ignore[arg-type]  # deliberately untyped options
    assert len(await journal.proposals(state=ProposalState.APPROVED)) == 1


async def test_tools_with_one_name_twice_are_a_usage_error(journal: Journal) -> None:
    """Two tools named alike cannot be told apart by a proposal's tool name."""
    with pytest.raises(UsageError, match="two tools are named 'wipe'"):
        await journal.work([wipe_tool([]), wipe_tool([])])


@pytest.mark.parametrize("committed", [True, False])
async def test_a_claim_whose_commit_is_unconfirmed_raises_nothing_ran_and_is_handed_back(
    journal: Journal, committed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's commit fails (whether or not the server committed it): NothingRan, the tool not called, approved."""
    id = await approved(journal, "x")
    conn = journal._conn
    commit = conn.commit
    failed: list[bool] = []

    def flaky_commit() -> None:
        if not failed:
            failed.append(True)
            if committed:
                commit()
            raise conn.errors[0]("connection lost during COMMIT")
        commit()

    monkeypatch.setattr(conn, "commit", flaky_commit)
    ran: list[str] = []
    with pytest.raises(NothingRan, match="the tool was not run"):
        await journal.execute(id, wipe_tool(ran))
    monkeypatch.undo()
    assert ran == []
    record = await journal.get(id)
    assert (record.state, record.claimed_by) == (ProposalState.APPROVED, None)
    moves = [(t.from_state, t.to_state) for t in await journal.history(id)]
    handed_back = [(ProposalState.APPROVED, ProposalState.EXECUTING), (ProposalState.EXECUTING, ProposalState.APPROVED)]
    assert moves[2:] == (handed_back if committed else [])
    assert (await journal.execute(id, wipe_tool(ran))).proposal.state is ProposalState.EXECUTED


def damage(journal: Journal, id: str, sql: str, *params: object) -> None:
    """Edit one proposal's row by hand (``sql`` is an ``UPDATE`` whose last parameter is the row's id)."""
    with journal._tx(write=True) as db:
        db.execute(sql, (*params, id))


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("tier", 9),
        ("args", '{"target": '),
        ("args", "[" * 100_000 + "]" * 100_000),
        ("digest", "0" * 64),
    ],
    ids=["tier 9", "args not JSON", "args nested deep", "digest altered"],
)
async def test_a_damaged_row_is_left_and_the_next_call_runs(journal: Journal, column: str, value: object) -> None:
    """A row holding a tier no Tier has, args that do not read back, or another digest: reported LEFT with why,
    left approved, and the good call behind it runs."""
    bad, good = await approved(journal, "a"), await approved(journal, "b")
    damage(journal, bad, f"UPDATE agentkit_proposals SET {column} = ? WHERE id = ?", value)
    ran: list[str] = []
    seen: list[Worked] = []
    report = await journal.work([wipe_tool(ran)], until_empty=True, report=seen.append)
    assert (ran, report.left, report.executed) == (["b"], [bad], 1)
    assert [(w.outcome, w.proposal_id) for w in seen] == [(WorkOutcome.LEFT, bad), (WorkOutcome.EXECUTED, good)]
    assert bad in (seen[0].error or "")
    assert [p.id for p in await journal.proposals(state=ProposalState.APPROVED)] == [bad]


async def test_a_call_approved_before_its_tool_was_retiered_is_left_and_the_others_run(journal: Journal) -> None:
    """The tool now declares another tier than the call was approved at (TierChanged): LEFT, and the call proposed
    at the tool's new tier runs; the worker does not stop."""
    old = await approved(journal, "a")
    action = ProposedAction[BaseModel].create(
        tool_name="wipe", tier=Tier.EXTERNAL_REVERSIBLE, args=Wipe(target="b"), round=1, run_id="b"
    )
    new = (await journal.propose(action)).id
    await journal.approve(new, "alice")
    ran: list[str] = []

    @tool(tier=Tier.EXTERNAL_REVERSIBLE, name="wipe")
    def retiered(args: Wipe) -> list[str]:
        ran.append(args.target)
        return []

    seen: list[Worked] = []
    report = await journal.work([retiered], until_empty=True, report=seen.append)
    assert (ran, report.left, report.executed) == (["b"], [old], 1)
    assert "now declares Tier.EXTERNAL_REVERSIBLE" in (seen[0].error or "")
    assert (await journal.get(old)).state is ProposalState.APPROVED


class Statements:
    """Every statement a journal's connections run: its text and how many parameters it took."""

    def __init__(self, journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, int]] = []
        for conn in (journal._conn, journal._reader):
            if conn is None:
                continue
            for name in ("query", "execute", "execute_many"):
                monkeypatch.setattr(conn, name, self._recording(getattr(conn, name)))

    def _recording(self, run: Any) -> Any:
        def recorded(sql: str, params: Any = ()) -> Any:
            self.seen.append((sql, len(params)))
            return run(sql, params)

        return recorded

    def most_parameters(self) -> int:
        return max(n for _, n in self.seen)

    def longest_text(self) -> int:
        return max(len(sql) for sql, _ in self.seen)


def left_rows(journal: Journal, count: int, prefix: str) -> list[str]:
    """``count`` approved wipes, older than anything approved after, whose digest does not match their args."""
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    with journal._tx(write=True) as db:
        at = db.to_db_time(datetime(2020, 1, 1, tzinfo=UTC))
        db.execute_many(
            "INSERT INTO agentkit_proposals (id, state, tool_name, tier, args, digest, rationale, round, run_id, "
            "proposed_at, approved_by, approved_at) VALUES (?, 'approved', 'wipe', ?, ?, ?, '', 1, ?, ?, 'alice', ?)",
            [(id, int(Tier.IRREVERSIBLE), '{"target":"x"}', id.ljust(64, "0"), id, at, at) for id in ids],
        )
    return ids


async def test_two_thousand_left_rows_ahead_of_a_good_call_neither_stop_it_nor_grow_a_statement(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 rows that do not check out, all older than one good call: the good call is claimed and runs, each
    bad row is reported LEFT once, and no statement the worker runs grows with them (measured against one left
    row)."""
    statements = Statements(journal, monkeypatch)
    [one] = left_rows(journal, 1, "one")
    ran: list[str] = []
    first = await journal.work([wipe_tool(ran)], until_empty=True)
    assert (first.left, first.executed) == ([one], 0)
    measured = list(statements.seen)
    await approved(journal, "before")
    statements.seen.clear()
    assert (await journal.work([wipe_tool(ran)], until_empty=True)).executed == 1
    statements.seen.extend(measured)
    parameters, text = statements.most_parameters(), statements.longest_text()

    many = left_rows(journal, 2_000, "many")
    good = await approved(journal, "good")
    statements.seen.clear()
    report = await journal.work([wipe_tool(ran)], until_empty=True)
    assert ran == ["before", "good"]
    assert (await journal.get(good)).state is ProposalState.EXECUTED
    assert (statements.most_parameters(), statements.longest_text()) == (parameters, text)
    assert sorted(report.left) == many
