"""Input no command can act on, and output it cannot write: one line on stderr and exit 1 (or argparse's usage
and exit 2), never a traceback; nothing is written to the journal."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit._cli import MAX_COUNT, main
from agentkit.errors import RunClaimed
from agentkit.evals import EvalReport
from agentkit.journal import ProposalState, open_journal
from agentkit.testing import FakeOpenAIServer
from tests.cli.support import cli, dataset_file, inbox, record_run, replies
from tests.support import Deleter, Payments

TOOLS = [Payments(), Deleter()]


def create(url: str) -> None:
    async def make() -> None:
        await open_journal(url).close()

    asyncio.run(make())


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `argv`, which argparse must refuse (exit 2); returns stderr."""
    with pytest.raises(SystemExit) as usage:
        main(list(argv))
    assert usage.value.code == 2
    return capsys.readouterr().err


# -- amending with numbers JSON cannot hold -------------------------------------------------------


@pytest.mark.parametrize(
    "amend",
    [
        ("--set", "path=NaN"),
        ("--set", "path=Infinity"),
        ("--set", "path=1e999"),
        ("--args", '{"path": -Infinity}'),
        ("--args", '{"path": [1e400]}'),
    ],
)
def test_amending_with_nan_infinity_or_an_overflowing_number_is_refused_and_writes_nothing(
    db: str, capsys: pytest.CaptureFixture[str], amend: tuple[str, str]
) -> None:
    """NaN, Infinity and a number too large for a float (read as infinity) in --set or --args: one line, exit 1."""
    record_run(db, "/tmp/a")
    [p] = inbox(db)
    code, out, err = cli(capsys, "proposals", "approve", p.id, "--by", "ops", *amend, "--db", db)
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.startswith(f"agentkit: error: {amend[0]} ")
    assert "no JSON form" in line
    assert inbox(db) == [p]
    assert p.state is ProposalState.PENDING


# -- numbers out of range -------------------------------------------------------------------------


@pytest.mark.parametrize("minutes", ["nan", "inf", "-inf", "1e10", "-5", "soon"])
def test_stuck_refuses_minutes_that_are_not_a_finite_number_of_a_sane_size(
    db: str, capsys: pytest.CaptureFixture[str], minutes: str
) -> None:
    """--older-than takes a number of minutes from 0 to ten years: anything else is argparse's usage, exit 2."""
    record_run(db, "/tmp/a")
    err = usage_error(capsys, "proposals", "stuck", "--older-than", minutes, "--db", db)
    assert "argument --older-than:" in err
    assert "Traceback" not in err


def test_a_count_too_large_for_the_database_is_refused(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--limit and --max-uses stop at 2**31-1, which every backend stores: above, argparse's usage, exit 2."""
    record_run(db, "/tmp/a")
    huge = str(MAX_COUNT + 1)
    assert "argument --limit: must be at most 2147483647" in usage_error(
        capsys, "journal", "runs", "--limit", huge, "--db", db
    )
    assert len(cli(capsys, "journal", "runs", "--limit", str(MAX_COUNT), "--db", db)[1].splitlines()) == 2
    grant = ["grants", "add", "--db", db, "--tools", f"{__name__}:TOOLS", "--tool", "transfer", "--by", "o"]
    err = usage_error(capsys, *grant, "--reason", "r", "--allow-irreversible", "--max-uses", "9" * 23)
    assert "argument --max-uses: must be at most 2147483647" in err


# -- grants that could never match ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--tool", "transfer", "--equals", "account=1"], "--equals account=1: no call of 'transfer' has account"),
        (["--tool", "transfer", "--equals", "amount=-1"], "--equals amount=-1: no call of 'transfer'"),
        (["--tool", "transfer", "--one-of", 'account=["a", 2]'], "--one-of account=2: no call"),
        (["--tool", "transfer", "--range", "account=1:2"], "--range account=...: account is str, not a number"),
        (["--tool", "transfer", "--prefix", "amount=1"], "--prefix amount=...: amount is int, not text"),
        (["--tool", "transfer", "--prefix", "account="], "a prefix is not empty"),
        (["--tool", "transfer", "--expires", "2020-01-01T00:00:00Z"], "is already past: the grant would approve"),
    ],
)
def test_a_grant_that_could_never_match_is_refused_and_nothing_is_stored(
    db: str, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    """A value of another type than its field's, a text constraint on a number (or the reverse), an empty prefix,
    an expiry already past: one line naming the fix, exit 1, no grant kept."""
    create(db)
    base = ["grants", "add", "--db", db, "--tools", f"{__name__}:TOOLS", "--by", "ops", "--reason", "r"]
    code, out, err = cli(capsys, *base, "--max-uses", "1", "--allow-irreversible", *argv)
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert complaint in line
    assert cli(capsys, "grants", "list", "--db", db)[1].startswith("no grants")


def test_a_grant_whose_values_fit_their_fields_is_kept(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The checks refuse only what cannot match: a text value on text, a number on a number, a range on a number."""
    create(db)
    base = ["grants", "add", "--db", db, "--tools", f"{__name__}:TOOLS", "--by", "ops", "--reason", "r"]
    rules = ["--tool", "transfer", "--equals", 'account="acme"', "--range", "amount=0:5", "--prefix", "memo=inv-"]
    code, out, err = cli(capsys, *base, "--max-uses", "1", "--allow-irreversible", *rules)
    assert (code, err) == (0, "")
    assert out.startswith("granted ")


# -- failures outside the journal -----------------------------------------------------------------


@pytest.mark.parametrize("address", ["", "a b:1"])
def test_temporal_refuses_a_malformed_address_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    """An address the Temporal SDK cannot parse fails before connecting: one line naming --address, exit 1."""
    pytest.importorskip("temporalio")
    import agentkit._cli as cli_module

    monkeypatch.setattr(cli_module, "_skip_teardown", False)  # the command sets it; `run` is not called here
    code, _, err = cli(capsys, "temporal", "list", "--address", address)
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(f"agentkit: error: --address {address!r} is not an address")


def test_eval_run_refuses_an_out_path_that_is_a_folder_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out naming a folder is refused before the evaluation (exit 2), so no run's report is lost."""
    with FakeOpenAIServer([]) as server:
        code, out, err = cli(
            capsys,
            *("eval", "run", str(dataset_file(tmp_path)), "--agent", "agentkit.evals.demo:researcher"),
            *("--base-url", server.base_url, "--model", "m", "--out", str(tmp_path)),
        )
        assert server.requests == []
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"agentkit eval run: --out {str(tmp_path)!r} is a folder; give a file path, such as "
        f"{str(tmp_path / 'report.json')!r}"
    ]


def test_eval_run_prints_the_report_when_out_cannot_be_written_after_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that fails once the evaluation is done: the report is printed, then one line saying why, exit 1."""

    def full(self: EvalReport, path: str | Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(EvalReport, "save", full)
    with FakeOpenAIServer(replies()) as server:
        code, out, err = cli(
            capsys,
            *("eval", "run", str(dataset_file(tmp_path)), "--agent", "agentkit.evals.demo:researcher"),
            *("--base-url", server.base_url, "--model", "m", "--out", str(tmp_path / "r.json")),
        )
    assert code == 1
    assert "passed 2/2 runs (100%)" in out
    [line] = err.splitlines()
    assert line.endswith("could not be written: No space left on device")


def test_output_to_a_full_disk_is_one_line_and_exit_1(db: str) -> None:
    """stdout on a full device (`> /dev/full`): one line on stderr, exit 1, no traceback."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    record_run(db, "/tmp/a")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "agentkit", "journal", "runs", "--db", db],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["agentkit: error: could not write the output: No space left on device"]


def test_demo_resume_that_loses_the_race_for_the_run_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another process resumed the planning run first (RunClaimed): one line, exit 1, no traceback."""
    import agentkit._demo.cli as demo_cli

    async def claimed(*_: Any) -> int:
        raise RunClaimed("run r1 is held by host:42 (it resumes it now)", id="r1", holder="host:42")

    monkeypatch.setattr(demo_cli, "_run", claimed)
    code, _, err = cli(capsys, "demo", "--scripted", "--resume", "--db", str(tmp_path / "d.db"))
    assert code == 1
    assert err.splitlines() == ["agentkit demo: run r1 is held by host:42 (it resumes it now)"]
