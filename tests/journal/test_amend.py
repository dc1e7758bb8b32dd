"""Amend and approve on the journal (both backends): the amended call runs once on every path; the original never."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, create_model

from agentkit import LoopConfig, ProposedAction, RetryPolicy, StopReason, Tier, run_tool_loop_tiered
from agentkit._cli import main
from agentkit.errors import ApprovalError
from agentkit.journal import (
    Execution,
    Journal,
    JournalObserver,
    ProposalState,
    TransitionRefused,
    WorkReport,
    open_journal,
)
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, Payments, Transfer, raw_sql

NO_WAIT = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


PROPOSED = Transfer(account="acme", amount=100, memo="invoice 7")


def action(run_id: str = "r1") -> ProposedAction[Transfer]:
    return ProposedAction.create(
        tool_name="transfer", tier=Tier.IRREVERSIBLE, args=PROPOSED, rationale="pay", round=1, run_id=run_id
    )


async def test_amended_approval_stores_the_amended_call_and_its_lineage(journal: Journal) -> None:
    """The entry holds the amended args and digest, and the args, digest, approver and fields as proposed."""
    original = action()
    entry = await journal.propose(original)
    assert entry.args_type == "tests.support:Transfer"
    approved = await journal.approve(entry.id, "ops", args={"amount": 40})
    amended = Transfer(account="acme", amount=40, memo="invoice 7")
    assert approved.state is ProposalState.APPROVED
    assert approved.args_as(Transfer) == amended
    assert (
        approved.digest
        == ProposedAction.create(tool_name="transfer", tier=Tier.IRREVERSIBLE, args=amended, round=1).digest
    )
    assert (approved.original_args_json, approved.original_digest) == (entry.args_json, original.digest)
    assert (approved.amended_by, approved.amended_fields) == ("ops", ("amount",))
    [_, moved] = await journal.history(entry.id)
    assert (moved.actor, moved.note) == ("ops", "amended: amount")
    # The call as proposed, proposed again, is the entry that was amended: not a second approvable entry.
    assert (await journal.propose(original)).id == entry.id


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"amount": -1}, "do not validate as Transfer"),
        ({"amuont": 1}, "'amuont', which Transfer does not declare"),
        (Doc(id="x"), "proposed with args of tests.support:Transfer, not tests.support:Doc"),
    ],
)
async def test_an_amendment_that_does_not_validate_changes_nothing(
    journal: Journal, args: object, complaint: str
) -> None:
    """Bad amended args raise ApprovalError; the entry stays pending, as proposed, with no new history."""
    entry = await journal.propose(action())
    with pytest.raises(ApprovalError, match=complaint):
        await journal.approve(entry.id, "ops", args=args)  # type: ignore[arg-type]  # the hostile input under test
    assert await journal.get(entry.id) == entry
    assert len(await journal.history(entry.id)) == 1


async def test_amending_a_decided_proposal_is_refused(journal: Journal) -> None:
    """An approved or rejected proposal cannot be amended: TransitionRefused, nothing changed."""
    approved = await journal.approve((await journal.propose(action("a"))).id, "ops")
    rejected = await journal.reject((await journal.propose(action("b"))).id, "ops", "no")
    for entry in (approved, rejected):
        with pytest.raises(TransitionRefused, match="cannot approve"):
            await journal.approve(entry.id, "eve", args={"amount": 1})
        assert await journal.get(entry.id) == entry


async def test_execute_and_work_run_the_amended_call_exactly_once(journal: Journal) -> None:
    """journal.execute runs the amended args once; a worker racing it finds nothing left to run."""
    tool = Payments()
    first = await journal.propose(action("a"))
    second = await journal.propose(action("b"))
    await journal.approve(first.id, "ops", args={"amount": 40})
    await journal.approve(second.id, "ops", args={"account": "beta"})
    execution = await journal.execute(first.id, tool)
    assert execution.batch == (Doc(id="paid 40 to acme"),)
    report = await journal.work([tool], until_empty=True, concurrency=4)
    assert report.executed == 1
    assert (await journal.get(second.id)).state is ProposalState.EXECUTED
    assert tool.calls == [
        Transfer(account="acme", amount=40, memo="invoice 7"),
        Transfer(account="beta", amount=100, memo="invoice 7"),
    ]
    with pytest.raises(TransitionRefused):
        await journal.execute(first.id, tool)
    assert PROPOSED not in tool.calls


async def test_resume_runs_the_amended_call_once_and_tells_the_executor(journal_url: str) -> None:
    """journal.resume settles the run's proposal with the amended call; the next round sees what changed."""
    tool = Payments()
    step = call_step(PROPOSED, rationale="pay the invoice")
    caller = ScriptedCaller([step, done_step()])
    journal = open_journal(journal_url)
    try:
        with JournalObserver(journal) as observer:
            first = await run_tool_loop_tiered(caller, Executor[Doc](), tool, "ctx", NO_WAIT, observer=observer)
        assert first.stop_reason is StopReason.PROPOSED
        [entry] = await journal.pending()
        await journal.approve(entry.id, "ops", args={"amount": 40, "memo": "partial"})
        agent = Executor[Doc]()
        result = await journal.resume(first.run_id, caller, agent, tool, "ctx")
        assert tool.calls == [Transfer(account="acme", amount=40, memo="partial")]
        assert result.items == [Doc(id="paid 40 to acme")]
        [info] = agent.infos
        assert (info.prior_calls[0].args, info.prior_calls[0].amended) == (tool.calls[0], ("amount", "memo"))
        assert (await journal.get(entry.id)).state is ProposalState.EXECUTED
    finally:
        await journal.close()


async def proposed_in(url: str) -> str:
    """A journal at ``url`` holding one pending transfer; its id."""
    journal = open_journal(url)
    try:
        return (await journal.propose(action())).id
    finally:
        await journal.close()


def test_cli_approve_amends_with_args_and_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`proposals approve --args JSON --set field=value` amends the call; `proposals show` prints the lineage."""
    url = str(tmp_path / "journal.db")
    id = asyncio.run(proposed_in(url))
    code = main(["proposals", "approve", id, "--by", "ops", "--db", url, "--args", '{"amount": 5}', "--set", "memo=x"])
    out = capsys.readouterr().out
    assert code == 0
    assert f'approved {id}: transfer {{"account":"acme","amount":5,"memo":"x"}} (by ops; amended amount, memo)' in out
    assert main(["proposals", "show", id, "--db", url]) == 0
    shown = capsys.readouterr().out
    assert "amended:   by ops: amount, memo changed" in shown
    assert '{"account":"acme","amount":100,"memo":"invoice 7"}' in shown


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--args", "{not json"], "--args is not JSON"),
        (["--args", "[1]"], "--args must be a JSON object"),
        (["--set", "amount"], "--set takes FIELD=VALUE"),
        (["--set", "amount=-3"], "do not validate as Transfer"),
        (["--set", "colour=red"], "'colour', which Transfer does not declare"),
    ],
)
def test_cli_bad_amendment_exits_1_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    """A bad --args or --set exits 1 with the reason; the proposal stays pending, byte for byte."""
    url = str(tmp_path / "journal.db")
    id = asyncio.run(proposed_in(url))
    before = sqlite3.connect(url).execute("SELECT * FROM agentkit_proposals").fetchall()
    assert main(["proposals", "approve", id, "--by", "ops", "--db", url, *argv]) == 1
    assert complaint in capsys.readouterr().err
    assert sqlite3.connect(url).execute("SELECT * FROM agentkit_proposals").fetchall() == before


@pytest.mark.parametrize(
    ("recorded", "complaint"),
    [
        ("no_such_module_here:Transfer", "cannot be imported here"),
        ("tests.support:NoSuchType", "cannot be imported here"),
        ("tests.support", "cannot be imported here"),
        (":Transfer", "cannot be imported here"),
        ("tests.support:Doc.nope", "cannot be imported here"),
        ("tests.support:PROPOSED_NOTHING", "cannot be imported here"),
        ("tests.support:Executor", "is not a pydantic model"),
    ],
)
async def test_an_args_type_the_row_names_badly_refuses_the_amendment(
    tmp_path: Path, recorded: str, complaint: str
) -> None:
    """A row whose args type does not import (edited, or from code not here) refuses amending with ApprovalError."""
    url = str(tmp_path / "journal.db")
    async with open_journal(url) as journal:
        entry = await journal.propose(action())
        with sqlite3.connect(url) as db:
            db.execute("UPDATE agentkit_proposals SET args_type = ? WHERE id = ?", (recorded, entry.id))
        with pytest.raises(ApprovalError, match=complaint):
            await journal.approve(entry.id, "ops", args={"amount": 40})
        after = await journal.get(entry.id)
        assert (after.state, after.args_json, after.digest) == (ProposalState.PENDING, entry.args_json, entry.digest)
        assert len(await journal.history(entry.id)) == 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amount=st.integers(min_value=0, max_value=10**6), account=st.sampled_from(["acme", "beta"]))
async def test_racing_executions_run_the_amended_call_once_and_the_original_never(
    tmp_path: Path, amount: int, account: str
) -> None:
    """Whatever the amendment, two executes and two workers racing for it run the amended call exactly once."""
    journal = open_journal(str(tmp_path / f"{uuid.uuid4().hex}.db"))
    tool = Payments()
    try:
        entry = await journal.propose(action())
        await journal.approve(entry.id, "ops", args={"amount": amount, "account": account})
        outcomes = await asyncio.gather(
            journal.execute(entry.id, tool),
            journal.execute(entry.id, tool),
            journal.work([tool], until_empty=True),
            journal.work([tool], until_empty=True),
            return_exceptions=True,
        )
        assert all(isinstance(o, Execution | WorkReport | TransitionRefused) for o in outcomes), outcomes
        expected = Transfer(account=account, amount=amount, memo="invoice 7")
        assert tool.calls == [expected]
        assert (await journal.get(entry.id)).state is ProposalState.EXECUTED
    finally:
        await journal.close()


class Removal(BaseModel):
    """The importable base of a tool's args type made at run time (as the demo's `DeleteArgs`)."""

    model_config = ConfigDict(extra="forbid")
    id: str


def removal_type(ids: Sequence[str]) -> type[Removal]:
    """The tool's real args type: `id` is a `Literal` of the ids there are, made at run time."""
    known: Any = Literal[tuple(ids)]  # a Literal of values known only now: Any to the type checker
    made: type[Removal] = create_model("Removal", __base__=Removal, id=(known, ...))
    return made


def removal(args_type: type[Removal], id: str = "a") -> ProposedAction[Removal]:
    return ProposedAction.create(
        tool_name="remove", tier=Tier.IRREVERSIBLE, args=args_type(id=id), rationale="stale", round=1, run_id="r1"
    )


async def test_an_amendment_as_an_importable_type_of_another_schema_is_refused(journal: Journal) -> None:
    """A type made at run time is named by the class it was made from; amending as that class is refused."""
    real = removal_type(["a", "b"])
    entry = await journal.propose(removal(real))
    assert entry.args_type == "tests.journal.test_amend:Removal"
    for named in ({}, {"args_type": Removal}):
        with pytest.raises(ApprovalError, match="has another schema") as refused:
            await journal.approve(entry.id, "ops", args={"id": "not-an-id"}, **named)  # type: ignore[arg-type]
        assert entry.args_schema is not None
        assert entry.args_schema in str(refused.value)
        assert "journal.approve(id, by, args=..., args_type=tool.args_type)" in str(refused.value)
    with pytest.raises(ApprovalError, match="has another schema"):
        await journal.approve(entry.id, "ops", args=Removal(id="b"))
    assert await journal.get(entry.id) == entry
    assert len(await journal.history(entry.id)) == 1


async def test_an_amendment_as_the_tools_own_type_is_validated_as_its_schema(journal: Journal) -> None:
    """Given the type the call was proposed as, an amendment is validated as it: an id it lacks is refused."""
    real = removal_type(["a", "b"])
    entry = await journal.propose(removal(real))
    with pytest.raises(ApprovalError, match="do not validate as Removal"):
        await journal.approve(entry.id, "ops", args={"id": "c"}, args_type=real)
    approved = await journal.approve(entry.id, "ops", args={"id": "b"}, args_type=real)
    assert (approved.state, approved.args_as(real), approved.amended_fields) == (
        ProposalState.APPROVED,
        real(id="b"),
        ("id",),
    )


async def test_a_proposal_that_records_no_args_schema_is_not_amended(journal: Journal) -> None:
    """A row proposed before the schema digest was recorded refuses an amendment; it can still be approved."""
    entry = await journal.propose(action())
    raw_sql(journal, f"UPDATE agentkit_proposals SET args_schema = NULL WHERE id = '{entry.id}'")
    with pytest.raises(ApprovalError, match="does not record its args schema"):
        await journal.approve(entry.id, "ops", args={"amount": 40}, args_type=Transfer)
    assert (await journal.get(entry.id)).state is ProposalState.PENDING
    assert (await journal.approve(entry.id, "ops")).args_as(Transfer) == PROPOSED


def test_cli_amendment_of_a_type_made_at_run_time_exits_1_and_stays_pending(
    journal_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`proposals approve --args` on a call whose args type was made at run time is refused, naming both digests."""

    async def propose() -> str:
        async with open_journal(journal_url) as journal:
            return (await journal.propose(removal(removal_type(["a", "b"])))).id

    id = asyncio.run(propose())
    argv = ["proposals", "approve", id, "--by", "ops", "--db", journal_url, "--args", '{"id": "not-an-id"}']
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "has another schema" in err
    assert "Nothing changed" in err

    async def state() -> ProposalState:
        async with open_journal(journal_url) as journal:
            return (await journal.get(id)).state

    assert asyncio.run(state()) is ProposalState.PENDING


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=4, unique=True),
    amended=st.text("abcd", min_size=1, max_size=3),
    typed=st.booleans(),
)
async def test_an_approved_amendment_always_validates_as_the_proposing_type(
    tmp_path: Path, ids: list[str], amended: str, typed: bool
) -> None:
    """Whatever the ids and the amendment, an amended approval holds args the tool's own type accepts."""
    real = removal_type(ids)
    async with open_journal(str(tmp_path / f"{uuid.uuid4().hex}.db")) as journal:
        entry = await journal.propose(removal(real, ids[0]))
        try:
            approved = await journal.approve(entry.id, "ops", args={"id": amended}, args_type=real if typed else None)
        except ApprovalError:
            assert (await journal.get(entry.id)) == entry
        else:
            assert typed
            assert amended in ids
            assert approved.args_as(real) == real(id=amended)


PAYMENTS_MODULE = """
from pydantic import BaseModel, ConfigDict


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    amount: int
"""


def test_cli_amends_as_an_args_type_of_the_working_folder(
    journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed `agentkit proposals approve --set`, run in the folder that holds the tools' module, imports
    the args type from it (as `agentkit worker` imports tools), and amends the call."""
    (tmp_path / "payment_tools.py").write_text(PAYMENTS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "payment_tools", raising=False)  # so that it goes again after the test
    from payment_tools import Payment  # type: ignore[import-not-found]  # written above, in tmp_path

    async def propose() -> str:
        async with open_journal(journal_url) as journal:
            made = ProposedAction.create(
                tool_name="pay", tier=Tier.IRREVERSIBLE, args=Payment(account="acme", amount=100), round=1
            )
            return (await journal.propose(made)).id

    id = asyncio.run(propose())
    command = Path(sys.executable).parent / "agentkit"
    done = subprocess.run(
        [str(command), "proposals", "approve", id, "--by", "ops", "--db", journal_url, "--set", "amount=5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert f'approved {id}: pay {{"account":"acme","amount":5}} (by ops; amended amount)' in done.stdout
