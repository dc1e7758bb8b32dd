"""``agentkit worker``: a real process over a real journal, stopped by real signals."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentkit import ProposedAction, Tier
from agentkit._cli import main
from agentkit.journal import ProposalState, open_journal
from tests.support import Wipe

TOOLS = '''
import os, pathlib, time
from pydantic import BaseModel
from agentkit import Tier, tool

class Wipe(BaseModel):
    target: str

@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Wipe) -> list[str]:
    """Wipe a target (slowly for 'slow': it marks its start, then takes a second)."""
    here = pathlib.Path(os.environ["WORKER_TEST_DIR"])
    if args.target == "slow":
        (here / "started").write_text("1")
        time.sleep(1)
    with open(here / "ran.log", "a") as log:
        log.write(args.target + "\\n")
    return [args.target]

TOOLS = [wipe]
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "worker_tools.py").write_text(textwrap.dedent(TOOLS))
    return tmp_path


def approve(db: Path, *targets: str) -> list[str]:
    async def go() -> list[str]:
        journal = open_journal(db)
        ids = []
        for target in targets:
            action = ProposedAction[Wipe].create(
                tool_name="wipe", tier=Tier.IRREVERSIBLE, args=Wipe(target=target), round=1, run_id=target
            )
            ids.append((await journal.propose(action)).id)
            await journal.approve(ids[-1], "alice")
        await journal.close()
        return ids

    return asyncio.run(go())


def states(db: Path, ids: list[str]) -> list[ProposalState]:
    async def go() -> list[ProposalState]:
        journal = open_journal(db)
        found = [(await journal.get(id)).state for id in ids]
        await journal.close()
        return found

    return asyncio.run(go())


def start_worker(workdir: Path, db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentkit", "worker", "--db", str(db), "--tools", "worker_tools:TOOLS", *extra],
        cwd=workdir,
        env={**os.environ, "WORKER_TEST_DIR": str(workdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_file(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_worker_runs_the_approved_calls_and_prints_each(workdir: Path) -> None:
    """``--until-empty``: each approved call runs once, one line each, then a summary; exit code 0."""
    db = workdir / "journal.db"
    ids = approve(db, "a", "b")
    worker = start_worker(workdir, db, "--until-empty")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"worker on {db}: tools wipe; concurrency 1")
    assert lines[1:3] == [f"executed {ids[0]} wipe (1 items)", f"executed {ids[1]} wipe (1 items)"]
    assert lines[-1] == "stopped: 2 executed, 0 failed, 0 not recorded, 0 left"
    assert (workdir / "ran.log").read_text().split() == ["a", "b"]
    assert states(db, ids) == [ProposalState.EXECUTED] * 2


def test_a_damaged_row_is_left_and_the_worker_runs_the_next_call(workdir: Path) -> None:
    """An approved row holding a tier no Tier has: one `left` line naming it, the call after it runs, exit code 0
    (it used to exit 1 at that row on every start, so no newer call ever ran)."""
    db = workdir / "journal.db"
    bad, good = approve(db, "a", "b")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE agentkit_proposals SET tier = 9 WHERE id = ?", (bad,))
    conn.close()
    worker = start_worker(workdir, db, "--until-empty")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    lines = out.splitlines()
    assert lines[1].startswith(f"left {bad} wipe: proposal {bad!r} cannot be read: tier 9")
    assert lines[2:] == [f"executed {good} wipe (1 items)", "stopped: 1 executed, 0 failed, 0 not recorded, 1 left"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, state, left_note FROM agentkit_proposals ORDER BY proposed_at").fetchall()
    conn.close()
    assert [(id, state) for id, state, _ in rows] == [(bad, "approved"), (good, "executed")]
    assert "tier 9" in rows[0][2]


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_stops_the_worker_after_its_running_call_is_recorded(
    workdir: Path, sent: signal.Signals, code: int
) -> None:
    """SIGTERM or Ctrl-C mid-call: the call finishes and is recorded, nothing new is claimed, one line, clean exit."""
    db = workdir / "journal.db"
    ids = approve(db, "slow", "next")
    worker = start_worker(workdir, db, "--poll", "0.05")
    wait_for_file(workdir / "started", worker)
    worker.send_signal(sent)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == code, err
    assert f"{sent.name}: stopping; running calls finish" in out
    assert out.splitlines()[-1] == "stopped: 1 executed, 0 failed, 0 not recorded, 0 left"
    assert "Traceback" not in err
    assert states(db, ids) == [ProposalState.EXECUTED, ProposalState.APPROVED]


def test_a_second_ctrl_c_does_not_claim_a_sync_call_was_interrupted(workdir: Path) -> None:
    """Ctrl-C twice while a sync tool runs: the call runs to its end and is recorded, and the worker says so."""
    db = workdir / "journal.db"
    ids = approve(db, "slow")
    worker = start_worker(workdir, db, "--poll", "0.05")
    wait_for_file(workdir / "started", worker)
    worker.send_signal(signal.SIGINT)
    time.sleep(0.2)
    worker.send_signal(signal.SIGINT)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 130, err
    assert "running calls were interrupted;" not in out
    assert "a sync tool's call cannot be, so it runs to its end" in out
    assert "Traceback" not in err
    assert (workdir / "ran.log").read_text().split() == ["slow"]
    assert states(db, ids) == [ProposalState.EXECUTED]


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signals_repeated_while_the_worker_stops_end_it_cleanly(workdir: Path, sent: signal.Signals, code: int) -> None:
    """The installed `agentkit worker`, sent the signal again and again as it stops (as `timeout -s INT` sends it
    twice): the first signal's exit code, no traceback, and it never hangs or dies by the signal."""
    db = workdir / "journal.db"
    approve(db)  # creates the journal; nothing to run
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "agentkit"), "worker", "--db", str(db), "--tools", "worker_tools:TOOLS"],
        cwd=workdir,
        env={**os.environ, "WORKER_TEST_DIR": str(workdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().startswith("worker on"), worker.communicate()
    give_up = time.monotonic() + 60
    while worker.poll() is None and time.monotonic() < give_up:
        worker.send_signal(sent)
        time.sleep(0.005)
    if worker.poll() is None:
        worker.kill()
        pytest.fail(f"the worker hung after {sent.name}: {worker.communicate()}")
    out, err = worker.communicate()
    assert worker.returncode == code, err
    assert "Traceback" not in err
    assert f"{sent.name}: stopping" in out


def test_a_worker_run_in_process_gives_back_the_signal_handlers_it_found(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`main(["worker", ...])` in a process that goes on leaves SIGINT and SIGTERM as it found them (the installed
    command ignores them once its journal is closed, until it exits)."""
    db = workdir / "journal.db"
    approve(db, "a")
    monkeypatch.setenv("WORKER_TEST_DIR", str(workdir))
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.delitem(sys.modules, "worker_tools", raising=False)
    found = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    assert main(["worker", "--db", str(db), "--tools", "worker_tools:TOOLS", "--until-empty", "--quiet"]) == 0
    assert {number: signal.getsignal(number) for number in found} == found
    assert (workdir / "ran.log").read_text().split() == ["a"]


def test_worker_refuses_tools_it_cannot_import(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong ``--tools`` path is a one-line error and exit code 2, before the journal is opened."""
    db = workdir / "journal.db"
    assert main(["worker", "--db", str(db), "--tools", "no_such_module:TOOLS"]) == 2
    assert "cannot import 'no_such_module'" in capsys.readouterr().err
    assert main(["worker", "--db", str(db), "--tools", "json"]) == 2
    assert "give MODULE:ATTR" in capsys.readouterr().err
    assert not db.exists()


def test_worker_refuses_a_tool_that_takes_the_run_ctx(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ctx tool is refused at start-up, naming it (the command has no ctx to give), before the journal is opened."""
    (workdir / "ctx_tools.py").write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel
            from agentkit import Tier, tool

            class Wipe(BaseModel):
                target: str

            @tool(tier=Tier.IRREVERSIBLE)
            def wipe(args: Wipe, ctx: dict[str, str]) -> list[str]:
                return [args.target]
            """
        )
    )
    db = workdir / "journal.db"
    sys.path.insert(0, str(workdir))
    try:
        assert main(["worker", "--db", str(db), "--tools", "ctx_tools:wipe"]) == 2
    finally:
        sys.path.remove(str(workdir))
        sys.modules.pop("ctx_tools", None)
    assert "tool 'wipe' takes the run's ctx" in capsys.readouterr().err
    assert not db.exists()


def test_worker_needs_a_backend() -> None:
    """``--db`` (one of the backend options) is required."""
    with pytest.raises(SystemExit) as exit:
        main(["worker", "--tools", "x:y"])
    assert exit.value.code == 2


TRACED = """
import os, pathlib
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from worker_tools import TOOLS

spans = open(pathlib.Path(os.environ["WORKER_TEST_DIR"]) / "spans.jsonl", "w")
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=spans)))
trace.set_tracer_provider(provider)
"""


def test_worker_with_otel_gives_each_call_its_span(workdir: Path) -> None:
    """``--otel``: each approved call the worker runs has its ``execute_tool`` span on the global provider
    (set up here by the tools' module), saying who approved it."""
    (workdir / "traced_tools.py").write_text(textwrap.dedent(TRACED))
    db = workdir / "journal.db"
    [id] = approve(db, "a")
    command = ["worker", "--db", str(db), "--tools", "traced_tools:TOOLS", "--until-empty", "--otel"]
    worker = subprocess.run(
        [sys.executable, "-m", "agentkit", *command],
        cwd=workdir,
        env={**os.environ, "WORKER_TEST_DIR": str(workdir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    spans = (workdir / "spans.jsonl").read_text()
    assert '"name": "execute_tool wipe"' in spans
    assert '"agentkit.approval.approved_by": "alice"' in spans
    assert f'"agentkit.proposal.id": "{id}"' in spans
