"""The command line's tests' fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A journal's path in a fresh folder, with `AGENTKIT_JOURNAL` unset so only `--db` names it."""
    monkeypatch.delenv("AGENTKIT_JOURNAL", raising=False)
    return str(tmp_path / "journal.db")
