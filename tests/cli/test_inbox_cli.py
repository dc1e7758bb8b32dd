"""``agentkit inbox``: bad input refused before anything listens, and a real server started from the shell."""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest

from agentkit._cli import main
from agentkit.journal import open_journal
from tests.inbox.support import propose_mail

pytest.importorskip("starlette", reason="the inbox extra is not installed")


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite journal holding one pending proposal."""
    path = str(tmp_path / "journal.db")

    async def make() -> None:
        async with open_journal(path) as journal:
            await propose_mail(journal, "ops@example.com", rationale="report due")

    asyncio.run(make())
    return path


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("alice", "expected NAME=TOKEN"),
        ("=0123456789abcdefgh", "expected NAME=TOKEN"),
        ("alice=", "expected NAME=TOKEN"),
        ("alice=short", "has 5 characters; give at least 16"),
    ],
)
def test_a_malformed_token_is_refused_before_anything_listens(
    db: str, flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--token`` that is not NAME=TOKEN, or too short, exits 2 with the reason."""
    try:
        code = main(["inbox", "--db", db, "--port", "0", "--token", flag])
    except SystemExit as exit:
        code = int(exit.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_two_reviewers_with_one_name_or_one_token_are_refused(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each reviewer needs their own name and their own token, so that a decision names who made it."""
    token = "0123456789abcdefgh"
    assert main(["inbox", "--db", db, "--port", "0", "--token", f"a={token}", "--token", f"a={token}x"]) == 2
    assert "a reviewer is named twice" in capsys.readouterr().err
    assert main(["inbox", "--db", db, "--port", "0", "--token", f"a={token}", "--token", f"b={token}"]) == 2
    assert "two reviewers share one token" in capsys.readouterr().err


def test_a_missing_journal_is_refused_and_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The inbox never creates a journal: a missing one exits 1, naming it."""
    missing = tmp_path / "nowhere.db"
    assert main(["inbox", "--db", str(missing), "--port", "0"]) == 1
    assert "nowhere.db" in capsys.readouterr().err
    assert not missing.exists()


def test_a_port_in_use_is_refused(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A port another process listens on exits 1 with the address."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["inbox", "--db", db, "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize(("stop", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_the_printed_url_opens_the_inbox_as_the_user_on_loopback(db: str, stop: signal.Signals, exit_code: int) -> None:
    """Without ``--token`` the command makes one for the OS user and prints its URL on loopback; Ctrl-C (130)
    or SIGTERM (0) stops it."""
    with subprocess.Popen(
        [sys.executable, "-m", "agentkit", "inbox", "--db", db, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().startswith("agentkit inbox over ")
            line = process.stdout.readline()
            user = re.escape(getpass.getuser())
            found = re.fullmatch(rf"  {user}: (http://127\.0\.0\.1:\d+/)\?token=(\S+)\n", line)
            assert found is not None, line
            base, token = found.groups()
            with httpx.Client(base_url=base) as http:
                assert http.get("/").status_code == 401
                page = http.get("/", params={"token": token}, follow_redirects=True)
            assert page.status_code == 200
            assert "report due" in page.text
        finally:
            process.send_signal(stop)
            code = process.wait(30)
    assert code == exit_code
