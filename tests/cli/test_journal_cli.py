"""``agentkit journal`` and ``agentkit proposals``: readable output, clear errors, nothing written on failure."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agentkit import (
    LoopConfig,
    ProposedAction,
    Tier,
    run_tool_loop_tiered,
    tool,
)
from agentkit._cli import main
from agentkit._results import Usage
from agentkit.decisions import CallSeen, Evidence
from agentkit.journal import JournalObserver, ProposalState, open_journal
from agentkit.providers import ModelPrice, Prices
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.cli.support import Planner, cli, delete, inbox, record_run, search
from tests.support import Query, Target, expire_lease

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_journal_runs_lists_recent_runs_with_outcome_rounds_and_tokens(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per run: id, agent, model, state, outcome, stop reason, rounds and total tokens."""
    run_id = record_run(db, "/tmp/a")
    code, out, _ = cli(capsys, "journal", "runs", "--db", db)
    assert code == 0
    header, line = out.splitlines()
    assert header.split() == ["RUN", "STARTED", "AGENT", "MODEL", "STATUS", "OUTCOME", "STOP", "ROUNDS", "TOKENS"]
    fields = line.split()
    assert fields[0] == run_id
    assert ISO_UTC.fullmatch(fields[1])
    assert fields[2:] == ["Planner", "cli-model", "finished", "applied", "executor_done", "3", "120"]


@pytest.mark.parametrize("limit", ["0", "-3", "many"])
def test_journal_runs_refuses_a_limit_below_one(db: str, capsys: pytest.CaptureFixture[str], limit: str) -> None:
    """--limit must be a whole number >= 1: argparse refuses anything else with exit 2, on every backend."""
    record_run(db, "/tmp/a")
    with pytest.raises(SystemExit) as usage:
        main(["journal", "runs", "--limit", limit, "--db", db])
    assert usage.value.code == 2
    assert "--limit" in capsys.readouterr().err
    assert len(cli(capsys, "journal", "runs", "--limit", "1", "--db", db)[1].splitlines()) == 2


def test_journal_show_prints_the_rounds_as_a_table(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each round is a row: step, call with args, tier, batch size, timings, tokens."""
    run_id = record_run(db, "/tmp/a")
    code, out, _ = cli(capsys, "journal", "show", run_id, "--db", db)
    assert code == 0
    assert f"run {run_id}  (finished)" in out
    assert "outcome applied, stop executor_done; 3 rounds, 3 requests, 100 tokens in, 20 out" in out
    started = re.search(r"^started (\S+), ended (\S+)$", out, re.MULTILINE)
    assert started is not None
    assert ISO_UTC.fullmatch(started[1])
    assert ISO_UTC.fullmatch(started[2])
    [config] = [line for line in out.splitlines() if line.startswith("config ")]
    for shown in ("autonomy REVERSIBLE", "max_rounds none", "token_budget 10000", "deadline none"):
        assert shown in config
    for shown in ("tool_timeout none", "after_proposal continue", "retry (primary_attempts 2, fallback_attempts 1"):
        assert shown in config
    rows = out.split("ROUND")[1].splitlines()[1:]
    assert rows[0].split()[:6] == ["1", "executed", "search", '{"query":"stale"}', "read_only", "3"]
    assert rows[1].split()[:5] == ["2", "proposed", "delete", '{"path":"/tmp/a"}', "irreversible"]
    assert rows[1].rstrip().endswith("/tmp/a is stale")
    assert rows[2].split()[:2] == ["3", "done"]


def test_journal_show_prints_the_detail_counts_and_the_cost_and_the_config_is_json(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A priced run's usage line gives the cached and reasoning tokens and the cost; its stored config holds
    money, the price table and sets as JSON values, not Python reprs."""
    used = Usage(requests=1, input_tokens=10_000, cached_input_tokens=8_000, output_tokens=500, reasoning_tokens=400)
    price = ModelPrice(input=Decimal("0.15"), output=Decimal("0.60"), cached_input=Decimal("0.075"))
    config = LoopConfig(prices=Prices({"cli-model": price}), cost_budget=Decimal("0.09"))
    journal = open_journal(db)
    with JournalObserver(journal) as observer:
        caller = ScriptedCaller([ScriptedReply(value=done_step("done"), usage=used)])
        result = asyncio.run(run_tool_loop_tiered(caller, Planner(), [search], None, config, observer=observer))
    run = asyncio.run(journal.run(result.run_id))
    asyncio.run(journal.close())
    assert run.loop_config is not None
    assert (run.loop_config["cost_budget"], run.loop_config["repeat_exempt"]) == ("0.09", [])
    assert run.loop_config["prices"]["models"]["cli-model"]["cached_input"] == "0.075"
    code, out, _ = cli(capsys, "journal", "show", result.run_id, "--db", db)
    assert code == 0
    assert "10000 tokens in (8000 cached), 500 out (400 reasoning); cost 0.0012 USD" in out
    assert result.cost == Decimal("0.0012")


def resumed_run(url: str, decide: str) -> str:
    """A run that proposes one deletion and stops; the proposal ``decide``d ("approve" or "reject"), then the run
    resumed to its end; returns the run id."""
    steps = [call_step(Query(query="stale"), tool="search"), call_step(Target(path="/tmp/a"), tool="delete")]

    async def run() -> str:
        journal = open_journal(url)
        try:
            with JournalObserver(journal) as observer:
                first = await run_tool_loop_tiered(
                    ScriptedCaller(steps), Planner(), [search, delete], None, observer=observer
                )
            [p] = await journal.pending()
            if decide == "approve":
                await journal.approve(p.id, "alice")
            else:
                await journal.reject(p.id, "bob", "keep it")
            await journal.resume(first.run_id, ScriptedCaller([done_step("done")]), Planner(), [search, delete], None)
            return first.run_id
        finally:
            await journal.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("decide", "row"),
    [
        ("approve", ["2", "executed", "delete", '{"path":"/tmp/a"}', "irreversible", "1", "-"]),
        ("reject", ["2", "rejected", "delete", '{"path":"/tmp/a"}', "irreversible", "-", "-"]),
    ],
)
def test_journal_show_lists_what_the_decision_on_a_proposal_did(
    db: str, capsys: pytest.CaptureFixture[str], decide: str, row: list[str]
) -> None:
    """A resumed run's proposed round is followed by a row for its decision: the approved call's execution (its
    batch, who approved it) or the rejection (who, why); it used to show only ``proposed``."""
    run_id = resumed_run(db, decide)
    _, out, _ = cli(capsys, "journal", "show", run_id, "--db", db)
    rows = out.split("ROUND")[1].splitlines()[1:]
    assert rows[1].split()[:6] == ["2", "proposed", "delete", '{"path":"/tmp/a"}', "irreversible", "-"]
    assert rows[2].split()[:7] == row
    assert rows[2].rstrip().endswith("approved by alice" if decide == "approve" else "rejected by bob: keep it")
    assert rows[3].split()[:2] == ["3", "done"]


def test_proposals_list_shows_the_inbox_and_filters_by_state(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """list shows every proposal; --state keeps one state."""
    record_run(db, "/tmp/a", "/tmp/b")
    first, second = inbox(db)
    assert cli(capsys, "proposals", "approve", first.id, "--by", "alice", "--db", db)[0] == 0
    _, out, _ = cli(capsys, "proposals", "list", "--db", db)
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [
        [first.id, "approved", "delete"],
        [second.id, "pending", "delete"],
    ]
    _, out, _ = cli(capsys, "proposals", "list", "--state", "pending", "--db", db)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [second.id]
    _, out, _ = cli(capsys, "proposals", "list", "--state", "executed", "--db", db)
    assert out.startswith("no executed proposals")


def test_proposals_list_flags_a_corrupt_row_without_a_traceback(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-edited row (tier 9, a timestamp that does not parse) is listed as unreadable, the rest as usual."""
    record_run(db, "/tmp/a", "/tmp/b", "/tmp/c")
    first, second, third = inbox(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE agentkit_proposals SET tier = 9, proposed_at = 'soon' WHERE id = ?", (second.id,))
    code, out, err = cli(capsys, "proposals", "list", "--db", db)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    # ORDER BY proposed_at puts the damaged timestamp where its text sorts: listed all the same.
    assert dict(line.split()[:2] for line in lines[1:4]) == {
        first.id: "pending",
        second.id: "unreadable",
        third.id: "pending",
    }
    [why] = [line for line in lines[4:] if line]
    assert why.startswith(f"unreadable: proposal {second.id!r} cannot be read: tier 9")
    assert "proposed_at 'soon'" in why
    code, _, err = cli(capsys, "proposals", "show", second.id, "--db", db)
    assert code == 1
    assert err.startswith(f"agentkit: error: proposal {second.id!r} cannot be read")


def test_text_a_terminal_cannot_show_is_printed_escaped(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """NUL and lone surrogates in stored text are printed escaped, never as a crash."""
    hostile = "/tmp/a\x00\udcff"

    async def propose() -> None:
        journal = open_journal(db)
        action = ProposedAction[Target].create(
            tool_name="delete", tier=Tier.IRREVERSIBLE, args=Target(path=hostile), rationale=f"{hostile} stale", round=1
        )
        await journal.propose(action)
        await journal.close()

    asyncio.run(propose())
    [p] = inbox(db)
    code, out, err = cli(capsys, "proposals", "list", "--db", db)
    assert (code, err) == (0, "")
    assert '{"path":"/tmp/a\\u0000\\udcff"}' in out  # JSON escapes NUL itself
    code, out, _ = cli(capsys, "proposals", "show", p.id, "--db", db)
    assert code == 0
    assert "/tmp/a\\x00\\udcff stale" in out
    out.encode("utf-8")


def test_proposals_show_prints_the_call_its_digest_and_its_history(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """show gives tool, tier, digest, args as JSON and who moved it when."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    cli(capsys, "proposals", "reject", p.id, "--by", "bob", "--reason", "keep it", "--db", db)
    code, out, _ = cli(capsys, "proposals", "show", p.id, "--db", db)
    assert code == 0
    assert "tool:      delete (Tier.IRREVERSIBLE)" in out
    assert f"digest:    {p.digest}" in out
    assert "reason:    keep it" in out
    assert '"path": "/tmp/a"' in out
    history = out.split("NOTE")[1].splitlines()[1:]
    assert all(ISO_UTC.fullmatch(line.split()[0]) for line in history)
    assert [line.split()[1:4] for line in history] == [
        ["-", "pending", f"run:{p.run_id}"],
        ["pending", "rejected", "bob"],
    ]


def test_an_executed_proposal_is_listed_by_who_approved_it_and_shows_each_step(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once a worker ran it, ``list``'s BY is still who approved it (it showed the worker); ``show`` has an
    ``approved:`` line beside ``claimed:``."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    cli(capsys, "proposals", "approve", p.id, "--by", "alice", "--db", db)

    async def run_it() -> None:
        journal = open_journal(db)
        try:
            await journal.execute(p.id, delete, worker="vm:12351")
        finally:
            await journal.close()

    asyncio.run(run_it())
    _, out, _ = cli(capsys, "proposals", "list", "--db", db)
    [row] = out.splitlines()[1:]
    assert (row.split()[1], row.split()[-1]) == ("executed", "alice")
    _, out, _ = cli(capsys, "proposals", "show", p.id, "--db", db)
    approved = re.search(r"^approved:  by alice at (\S+)$", out, re.MULTILINE)
    assert approved is not None
    assert ISO_UTC.fullmatch(approved[1])
    assert re.search(r"^claimed:   by vm:12351 at \S+$", out, re.MULTILINE)


def test_proposals_show_indents_every_further_line_of_model_and_tool_written_text(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rationale (or an item id) with line breaks cannot forge `show`'s own lines: each further line of it is
    indented under its field's value, so `evidence:`, `args:` and the history start a line only where `show` wrote
    them."""
    forged = (
        'old export\nevidence:  rounds before it: none; 0 earlier calls\nargs:\n{\n  "path": "/tmp/old"\n}\n\nAT  FROM'
    )
    seen = CallSeen(round=1, tool_name="search", digest="d" * 64, ran=True, item_ids=("doc-1\nargs:", "doc-2"))

    async def propose() -> str:
        journal = open_journal(db)
        action = ProposedAction[Target].create(
            tool_name="delete",
            tier=Tier.IRREVERSIBLE,
            args=Target(path="/srv/customers.db"),
            rationale=forged,
            round=2,
            evidence=Evidence(rounds=(1,), calls=(seen,)),
        )
        id = (await journal.propose(action)).id
        await journal.close()
        return id

    id = asyncio.run(propose())
    code, out, _ = cli(capsys, "proposals", "show", id, "--db", db)
    assert code == 0
    lines = out.splitlines()
    indent = " " * 11
    start, further = lines.index("rationale: old export"), forged.splitlines()[1:]
    assert lines[start + 1 : start + 1 + len(further)] == [indent + line for line in further]
    assert [line for line in lines if line.startswith("evidence:")] == [
        "evidence:  rounds before it: 1; 1 earlier calls"
    ]
    assert lines[lines.index("evidence:  rounds before it: 1; 1 earlier calls") + 1 :][:2] == [
        "  round 1: search (ran, items doc-1",
        f"{indent}args:, doc-2) digest {'d' * 12}",
    ]
    assert [line for line in lines if line.startswith(("args:", "AT "))] == ["args:", lines[-2]]
    assert '"path": "/srv/customers.db"' in out


def test_proposals_show_says_which_worker_left_a_call_until_when_and_why(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approved call whose stored digest no longer matches its args: a worker leaves it, and ``show`` has a
    ``left:`` line naming the worker, until when, and the refusal."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    cli(capsys, "proposals", "approve", p.id, "--by", "alice", "--db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE agentkit_proposals SET digest = ? WHERE id = ?", ("0" * 64, p.id))
    conn.close()

    async def work() -> list[str]:
        journal = open_journal(db)
        try:
            return (await journal.work([delete], until_empty=True, worker="vm:7")).left
        finally:
            await journal.close()

    assert asyncio.run(work()) == [p.id]
    _, out, _ = cli(capsys, "proposals", "show", p.id, "--db", db)
    left = re.search(r"^left:      by vm:7 until (\S+): (.+)$", out, re.MULTILINE)
    assert left is not None, out
    assert ISO_UTC.fullmatch(left[1])
    assert p.id in left[2]


def test_approve_and_reject_write_the_decision_and_the_name(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """approve and reject change the state and record who (and why)."""
    record_run(db, "/tmp/a", "/tmp/b")
    first, second = inbox(db)
    code, out, _ = cli(capsys, "proposals", "approve", first.id, "--by", "alice", "--db", db)
    assert (code, out.strip()) == (0, f'approved {first.id}: delete {{"path":"/tmp/a"}} (by alice)')
    code, _, _ = cli(capsys, "proposals", "reject", second.id, "--by", "bob", "--reason", "not now", "--db", db)
    assert code == 0
    a, b = inbox(db)
    assert (a.state, a.approved_by) == (ProposalState.APPROVED, "alice")
    assert (b.state, b.rejected_by, b.reason) == (ProposalState.REJECTED, "bob", "not now")


def test_reject_needs_a_name_and_a_reason(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --by or --reason argparse refuses (exit 2); the proposal stays pending."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    with pytest.raises(SystemExit) as usage:
        main(["proposals", "reject", p.id, "--by", "bob", "--db", db])
    assert usage.value.code == 2
    assert "--reason" in capsys.readouterr().err
    assert inbox(db)[0].state is ProposalState.PENDING


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        (("reject", "--by", "bob", "--reason", "no"), ("approve", "--by", "alice"), "it is rejected"),
        (("approve", "--by", "alice"), ("approve", "--by", "alice"), "it is approved"),
        (("approve", "--by", "alice"), ("reject", "--by", "x", "--reason", " "), "reason must be a non-empty"),
    ],
)
def test_a_refused_change_exits_1_with_the_reason_and_writes_nothing(
    db: str, capsys: pytest.CaptureFixture[str], first: tuple[str, ...], then: tuple[str, ...], message: str
) -> None:
    """An illegal transition or an empty reason is an error on stderr, exit 1, and the record is unchanged."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    cli(capsys, "proposals", first[0], p.id, *first[1:], "--db", db)
    before = inbox(db)
    code, out, err = cli(capsys, "proposals", then[0], p.id, *then[1:], "--db", db)
    assert (code, out) == (1, "")
    assert err.startswith("agentkit: error: ")
    assert message in err
    assert inbox(db) == before


@pytest.mark.parametrize(
    "argv",
    [
        ("proposals", "show", "nope"),
        ("proposals", "approve", "nope", "--by", "alice"),
        ("proposals", "reject", "nope", "--by", "alice", "--reason", "x"),
        ("journal", "show", "nope"),
    ],
)
def test_an_unknown_id_exits_1_naming_it(db: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """An id the journal does not hold is reported with how to list the real ones."""
    record_run(db, "/tmp/a")
    before = inbox(db)
    code, _, err = cli(capsys, *argv, "--db", db)
    assert code == 1
    assert "'nope'" in err
    assert "agentkit " in err.split("'nope'")[1]  # points at the listing command
    assert inbox(db) == before


@pytest.mark.parametrize("kind", ["sqlite", "empty", "text"])
def test_a_file_that_is_not_a_journal_is_refused_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A SQLite file of another program, an empty file or a text file is refused without one byte changed or added."""
    other = tmp_path / "other.db"
    if kind == "sqlite":
        with sqlite3.connect(other) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.close()
    else:
        other.write_text("" if kind == "empty" else "not a database\n")
    before = other.read_bytes()
    code, out, err = cli(capsys, "proposals", "list", "--db", str(other))
    assert (code, out) == (1, "")
    assert str(other) in err
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, -shm or -journal beside it
    if kind == "sqlite":
        with sqlite3.connect(other) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        conn.close()


def test_a_missing_database_exits_1_and_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line never creates a journal: a wrong --db is an error, not a new empty file."""
    missing = tmp_path / "nowhere.db"
    code, _, err = cli(capsys, "proposals", "list", "--db", str(missing))
    assert code == 1
    assert f"no journal at {missing}" in err
    assert not missing.exists()


@pytest.mark.parametrize("kind", ["missing", "not a journal"])
def test_a_database_that_is_no_journal_tells_a_shell_user_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A missing or foreign --db says how to point at a journal and which command makes one, never to "open it
    from code"."""
    path = tmp_path / "nowhere.db"
    if kind == "not a journal":
        path.write_bytes(b"")
    code, _, err = cli(capsys, "journal", "runs", "--db", str(path))
    assert code == 1
    assert "point --db (or $AGENTKIT_JOURNAL) at the journal your runs are recorded in" in err
    assert "`agentkit demo --db PATH`" in err
    assert "from code" not in err


def test_the_default_database_is_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --db the journal is agentkit-journal.db in the working directory, or $AGENTKIT_JOURNAL."""
    monkeypatch.delenv("AGENTKIT_JOURNAL", raising=False)
    monkeypatch.chdir(tmp_path)
    record_run("agentkit-journal.db", "/tmp/a")
    assert "pending" in cli(capsys, "proposals", "list")[1]
    monkeypatch.setenv("AGENTKIT_JOURNAL", str(tmp_path / "elsewhere.db"))
    code, _, err = cli(capsys, "proposals", "list")
    assert code == 1
    assert "elsewhere.db" in err


def test_stuck_and_resolve_let_a_human_decide_an_abandoned_execution(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """stuck lists an execution whose worker vanished; resolve refuses while its lease lasts, then records the
    decision."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    journal = open_journal(db)
    asyncio.run(journal.approve(p.id, "alice"))
    journal._claim(p.id, delete, "gone-worker")  # a worker claimed it, then died
    asyncio.run(journal.close())
    code, out, _ = cli(capsys, "proposals", "stuck", "--older-than", "0", "--db", db)
    assert code == 0
    assert out.splitlines()[0].split() == ["ID", "TOOL", "ARGS", "CLAIMED", "BY", "CLAIMED", "AT", "FOR"]
    row = out.splitlines()[1].split()
    assert row[:4] == [p.id, "delete", '{"path":"/tmp/a"}', "gone-worker"]
    assert ISO_UTC.fullmatch(row[4])
    assert "may be slow, not dead" in out
    code, out, _ = cli(capsys, "proposals", "show", p.id, "--db", db)
    claimed = re.search(r"^claimed:   by gone-worker at (\S+)$", out, re.MULTILINE)
    assert claimed is not None
    assert ISO_UTC.fullmatch(claimed[1])
    resolve = ("proposals", "resolve", p.id, "--by", "carol", "--as", "failed", "--note", "nothing deleted", "--db", db)
    code, out, err = cli(capsys, *resolve)
    assert (code, out) == (1, "")
    assert "under a lease that lasts until" in err
    assert "`agentkit proposals stuck`" in err
    assert inbox(db)[0].state is ProposalState.EXECUTING
    journal = open_journal(db)
    expire_lease(journal, p.id)  # its worker's lease ran out
    asyncio.run(journal.close())
    code, out, _ = cli(capsys, *resolve)
    assert (code, out.strip()) == (0, f"resolved {p.id} as failed (by carol: nothing deleted)")
    assert inbox(db)[0].state is ProposalState.FAILED
    assert cli(capsys, "proposals", "stuck", "--older-than", "0", "--db", db)[1].startswith("no execution")


def test_a_postgresql_url_works_as_db(capsys: pytest.CaptureFixture[str], postgres_url: str) -> None:
    """--db takes a postgresql:// URL: the same commands against the server."""
    code, _, err = cli(capsys, "proposals", "list", "--db", postgres_url)
    assert code == 1
    assert "holds no agentkit journal" in err
    record_run(postgres_url, "/tmp/a")
    [p] = inbox(postgres_url)
    assert cli(capsys, "proposals", "approve", p.id, "--by", "alice", "--db", postgres_url)[0] == 0
    assert inbox(postgres_url)[0].state is ProposalState.APPROVED
    code, out, _ = cli(capsys, "journal", "runs", "--db", postgres_url)
    assert code == 0
    assert p.run_id in out
    with pytest.raises(SystemExit) as usage:
        main(["journal", "runs", "--limit", "0", "--db", postgres_url])
    assert usage.value.code == 2


def test_python_dash_m_agentkit_runs_the_journal_commands(db: str) -> None:
    """The module entry point dispatches to the journal commands and returns their exit code."""
    record_run(db, "/tmp/a")
    ok = subprocess.run(
        [sys.executable, "-m", "agentkit", "proposals", "list", "--db", db], capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0
    assert "pending" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "agentkit", "proposals", "approve", "nope", "--by", "x", "--db", db],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert "no proposal 'nope'" in bad.stderr


@pytest.mark.parametrize(("db", "said"), [("", "path is empty"), (":memory:", "lost on close")])
def test_an_empty_or_in_memory_db_is_refused(
    db: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--db "" (an unset variable, say) and --db :memory: would lose every record: exit 1, naming why."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "proposals", "list", "--db", db)
    assert (code, out) == (1, "")
    assert said in err
    assert list(tmp_path.iterdir()) == []


def stopped_run(url: str, path: str, *, approve: bool = False) -> str:
    """A journaled run that stops at a proposed deletion (approved in the inbox when ``approve``); returns its id."""
    journal = open_journal(url)

    async def run() -> str:
        with JournalObserver(journal) as observer:
            caller = ScriptedCaller([call_step(Target(path=path), tool="delete")])
            result = await run_tool_loop_tiered(caller, Planner(), [search, delete], None, observer=observer)
        if approve:
            [pending] = [p for p in await journal.pending() if p.run_id == result.run_id]
            await journal.approve(pending.id, "alice")
        await journal.close()
        return result.run_id

    return asyncio.run(run())


def crashed_run(url: str) -> str:
    """A journaled run whose recorder dies in round 2 (nothing after is written) and whose lease has run out."""
    journal = open_journal(url)
    observer = JournalObserver(journal, lease=timedelta(milliseconds=200))

    @tool(tier=Tier.READ_ONLY, name="search")
    def dying(args: Query) -> list[str]:
        """Find documents; the process 'dies' on the second call."""
        if args.query == "second":
            observer.close()
        return [args.query]

    async def run() -> str:
        caller = ScriptedCaller(
            [
                call_step(Query(query="first"), tool="search"),
                call_step(Query(query="second"), tool="search"),
                done_step(),
            ]
        )
        result = await run_tool_loop_tiered(caller, Planner(), [dying, delete], None, observer=observer)
        await journal.close()
        return result.run_id

    run_id = asyncio.run(run())
    time.sleep(0.3)
    return run_id


def test_journal_runs_shows_which_wait_which_can_resume_which_crashed_and_which_finished(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run's status, and below the table what to do about the waiting and the resumable ones."""
    finished = record_run(db, "/tmp/a")
    waiting = stopped_run(db, "/tmp/b")
    ready = stopped_run(db, "/tmp/c", approve=True)
    crashed = crashed_run(db)
    code, out, _ = cli(capsys, "journal", "runs", "--db", db)
    assert code == 0
    status = {line.split()[0]: line.split()[4] for line in out.splitlines()[1:] if line[:1].isalnum()}
    assert {run: status[run] for run in (finished, waiting, ready, crashed)} == {
        finished: "finished",
        waiting: "waiting",
        ready: "ready",
        crashed: "crashed",
    }
    assert "agentkit proposals list --state pending" in out
    assert "the program that recorded the run continues it" in out
    code, out, _ = cli(capsys, "journal", "show", crashed, "--db", db)
    assert f"run {crashed}  (crashed)" in out


def test_journal_runs_suggests_only_commands_a_shell_can_run_on_the_same_journal(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Below the table, what to do is a command with the journal's --db (not a Python call such as
    ``journal.resume(RUN, caller, agent, tools, ctx)``, which a shell cannot run)."""
    stopped_run(db, "/tmp/b")
    stopped_run(db, "/tmp/c", approve=True)
    code, out, _ = cli(capsys, "journal", "runs", "--db", db)
    assert code == 0
    notes = out.split("\n\n", 1)[1]
    assert f"agentkit proposals list --state pending --db {db}" in notes
    assert f"agentkit proposals approve ID --by NAME --db {db}" in notes
    assert f"agentkit journal show RUN --db {db}" in notes
    assert f"agentkit demo --resume --db {db}" in notes
    assert "(RUN, caller" not in notes


def damage(url: str, sql: str, *params: object) -> None:
    """Change the journal's rows by hand (a damaged disk, an edit gone wrong)."""

    async def go() -> None:
        async with open_journal(url, create=False) as journal:
            with journal._tx(write=True) as db:
                db.execute(sql, params)

    asyncio.run(go())


def logged_rounds(url: str, run_id: str) -> list[int]:
    """The rounds the run's event log has rows of, in order."""

    async def go() -> list[int]:
        async with open_journal(url, create=False) as journal:
            with journal._tx(write=False) as db:
                rows = db.query("SELECT DISTINCT round FROM agentkit_events WHERE run_id = ?", (run_id,))
        return sorted(row["round"] for row in rows if row["round"] is not None)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("sql", "said", "from_state"),
    [
        (
            "UPDATE agentkit_entries SET body = '{not json' WHERE run_id = ? AND seq = 1",
            "state unreadable: its entry 1 (agentkit_entries row seq 1) cannot be read: JSONDecodeError",
            ["1"],  # round 1 from the state, then the event log's (round 2: its proposal)
        ),
        (
            'UPDATE agentkit_runs SET head = \'{"version": 2, "tools": 7}\' WHERE id = ?',
            "state unreadable: its header (the run's row, column head) cannot be read: ValidationError",
            [],  # from the event log alone
        ),
    ],
)
def test_journal_show_prints_a_damaged_run_as_far_as_it_reads_and_names_the_damage(
    journal_url: str, capsys: pytest.CaptureFixture[str], sql: str, said: str, from_state: list[str]
) -> None:
    """`journal show` on a run whose stored state is damaged prints the row, the rounds it can read and which part
    is damaged, exit 0 (it exited 1 with the resume's refusal, showing nothing); `journal runs` still lists it.

    Past what the state gives, the rounds come from the event log, which holds a round's own events only where
    no state written with them held that round (the writer's batching decides): the proposal's round always."""
    run_id = record_run(journal_url, "/tmp/a")
    damage(journal_url, sql, run_id)
    code, out, err = cli(capsys, "journal", "show", run_id, "--db", journal_url)
    assert (code, err) == (0, "")
    assert out.startswith(f"run {run_id}  (finished)\nagent Planner, model cli-model, tools search, delete")
    assert said in out
    rows = out.split("ROUND")[1].split("\n\n")[0].splitlines()[1:]
    last = max(map(int, from_state), default=0)
    logged = [str(r) for r in logged_rounds(journal_url, run_id) if r > last]
    assert "2" in logged
    assert [row.split()[0] for row in rows] == from_state + logged
    [proposal] = [row for row in rows if row.split()[0] == "2"]
    assert proposal.split()[:3] == ["2", "proposed", "delete"]
    code, out, _ = cli(capsys, "journal", "runs", "--db", journal_url)
    assert code == 0
    assert run_id in out
