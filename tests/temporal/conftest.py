"""The Temporal tests' one fixture, ``temporal`` (a ``TemporalTest``, ``tests/temporal/support.py``): the
session's dev server (``temporal_address``), a client on a task queue of the test's own and the agents of
``tests.temporal.agents`` over a scripted model; each test serves them with ``temporal.worker()`` or
``temporal.process()``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentkit.temporal import DurableRuns
from agentkit.testing import FakeOpenAIServer
from tests.temporal.agents import make_agents
from tests.temporal.support import TemporalTest, by_round


@pytest.fixture(name="temporal")
async def temporal_fixture(temporal_address: str, tmp_path: Path) -> AsyncIterator[TemporalTest]:
    """The test's ``TemporalTest``; the scripted model must not have failed on a request."""
    answers: dict[int, Any] = {}
    with FakeOpenAIServer(respond=by_round(answers)) as fake:
        log = tmp_path / "tools.log"
        agents = make_agents(fake.base_url, log)
        runs = await DurableRuns.connect(temporal_address, task_queue=f"q-{uuid.uuid4().hex[:8]}")
        try:
            yield TemporalTest(address=temporal_address, runs=runs, fake=fake, agents=agents, log=log, answers=answers)
        finally:
            await agents[0].caller.aclose()  # type: ignore[attr-defined]  # an OpenAICaller
        fake.assert_no_errors()
