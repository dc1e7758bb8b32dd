"""Every Python block in README.md and docs/ runs, unless it is marked as not run with a reason.

A page's blocks run in order in one namespace, so a page can build an example step by step; a
block that needs names from an earlier block says so in its first line (``# Continues ...``).
Top-level ``await`` is allowed, and a page that uses it says how to run it in a script. A block
preceded by ``<!-- not-run: reason -->`` is skipped; the reason must be given. Every example is
also type-checked, with mypy --strict and with pyright strict (basedpyright).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import inspect
import json
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<marker><!--\s*not-run:(?P<reason>[^>]*)-->\s*\n)?```python\n(?P<code>.*?)```", re.DOTALL)


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        reason = match.group("reason")
        found.append((line, match.group("code"), None if reason is None else reason.strip()))
    return found


def run_page(page: Path) -> None:
    # A registered module, so that classes defined in examples behave as in a real module
    # (pydantic looks generic models' modules up in sys.modules).
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    sys.modules[module.__name__] = module
    try:
        run_blocks(page, module.__dict__)
    finally:
        del sys.modules[module.__name__]


def run_blocks(page: Path, namespace: dict[str, object]) -> None:
    for line, code, reason in blocks(page):
        if reason is not None:
            assert reason, f"{page.name}:{line}: a not-run block must say why"
            continue
        # Padding keeps the page's line numbers in tracebacks.
        source = "\n" * (line - 1) + code
        compiled = compile(source, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        outcome = eval(compiled, namespace)
        if inspect.iscoroutine(outcome):
            # A block with top-level await runs in its own event loop; blocks that call
            # asyncio.run themselves run with no loop around them.
            asyncio.run(outcome)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_examples_run(page: Path) -> None:
    """Each page's Python examples run top to bottom without error."""
    run_page(page)


def write_pages(directory: Path) -> None:
    """Write each page's examples, taken together, as one module for a type checker."""
    for page in PAGES:
        code = "\n".join(code for _, code, reason in blocks(page) if reason is None)
        if code:
            # One async function per page, so top-level await and async with are legal, as they are when run.
            module = directory / f"doc_{page.stem.replace('-', '_')}.py"
            module.write_text("async def page() -> None:\n" + textwrap.indent(code, "    "), encoding="utf-8")


@pytest.mark.slow
def test_doc_examples_type_check(tmp_path: Path) -> None:
    """Each page's examples, taken together, pass mypy --strict, as a user's code would have to."""
    from mypy import api

    write_pages(tmp_path)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nplugins = pydantic.mypy\nwarn_unused_ignores = True\n")
    out, err, status = api.run(["--config-file", str(config), "--cache-dir", str(tmp_path / "cache"), str(tmp_path)])
    assert status == 0, out + err


@pytest.mark.slow
def test_doc_examples_pass_pyright_strict(tmp_path: Path) -> None:
    """Each page's examples, taken together, pass pyright in strict mode too (basedpyright)."""
    pages = tmp_path / "pages"
    pages.mkdir()
    write_pages(pages)
    (pages / "pyrightconfig.json").write_text(
        json.dumps({"typeCheckingMode": "strict", "pythonVersion": "3.11"}), encoding="utf-8"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "basedpyright", "--outputjson", "--pythonpath", sys.executable, "--project", str(pages)],
        cwd=pages,
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(checked.stdout)
    problems = [f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}" for d in report["generalDiagnostics"]]
    assert checked.returncode == 0, "\n".join(problems) or checked.stderr
    assert report["summary"]["filesAnalyzed"] == len(list(pages.glob("doc_*.py")))


def _parse(code: str) -> ast.Module:
    tree = compile(code, "<docs>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    assert isinstance(tree, ast.Module)
    return tree


def _names(code: str) -> tuple[set[str], set[str]]:
    """The names a block binds (definitions, assignments, imports), and the names it reads."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(_parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def _awaits_at_top_level(code: str) -> bool:
    statements = [
        s for s in _parse(code).body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    return any(isinstance(n, ast.Await | ast.AsyncWith | ast.AsyncFor) for s in statements for n in ast.walk(s))


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_a_block_that_needs_earlier_blocks_says_so(page: Path) -> None:
    """A block that reads names defined by an earlier block starts with "# Continues", so nobody copies it alone."""
    earlier: set[str] = set()
    for line, code, reason in blocks(page):
        if reason is not None:
            continue
        bound, read = _names(code)
        borrowed = (read - bound - set(dir(builtins))) & earlier
        assert not borrowed or code.startswith("# Continues"), f"{page.name}:{line} uses {sorted(borrowed)} from above"
        earlier |= bound


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_with_top_level_await_says_how_to_run_it(page: Path) -> None:
    """Before its first block with top-level await, a page says how to run it as a script (asyncio.run(main()))."""
    text = page.read_text(encoding="utf-8")
    for match in BLOCK.finditer(text):
        if match.group("reason") is None and _awaits_at_top_level(match.group("code")):
            assert "asyncio.run(main())" in text[: match.start()], f"{page.name}: top-level await, not explained"
            return


TEST_REFERENCE = re.compile(r"`(?P<file>tests/[\w/]+\.py)(?:::(?P<test>\w+))?`")
LINES_CLAIM = re.compile(r"^#+ .* in (?P<count>\d+) lines$", re.MULTILINE)


@pytest.mark.parametrize("page", [ROOT / "CONTRIBUTING.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_tests_the_docs_point_at_exist(page: Path) -> None:
    """Every `tests/...py` (or `tests/...py::test_name`) a page points at exists, and defines that test."""
    for match in TEST_REFERENCE.finditer(page.read_text(encoding="utf-8")):
        source = ROOT / match["file"]
        assert source.is_file(), f"{page.name} points at {match['file']}, which does not exist"
        if match["test"]:
            defined = re.search(rf"^(async )?def {match['test']}\(", source.read_text(encoding="utf-8"), re.MULTILINE)
            assert defined, f"{page.name} points at {match[0]}, which {match['file']} does not define"
    # A table row that names test files and bare test names: each test is in one of the row's files.
    for row in re.findall(r"^\|.*\|$", page.read_text(encoding="utf-8"), re.MULTILINE):
        files = [ROOT / m["file"] for m in TEST_REFERENCE.finditer(row) if (ROOT / m["file"]).is_file()]
        for name in re.findall(r"`(test_\w+)`", row):
            pattern = rf"^(async )?def {name}\("
            found = any(re.search(pattern, f.read_text(encoding="utf-8"), re.MULTILINE) for f in files)
            assert found, f"{page.name}: {name} is in none of the files its row names"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_heading_that_counts_lines_counts_them_right(page: Path) -> None:
    """A heading such as "The first loop in N lines" counts the non-blank lines of the example under it."""
    text = page.read_text(encoding="utf-8")
    for claim in LINES_CLAIM.finditer(text):
        example = BLOCK.search(text, claim.end())
        assert example is not None, f"{page.name}: {claim[0]!r} has no example under it"
        lines = [line for line in example["code"].splitlines() if line.strip()]
        assert len(lines) == int(claim["count"]), f"{page.name}: {claim[0]!r}, but the example has {len(lines)}"


def test_readme_example_is_found() -> None:
    """The docs test finds the README's example, so a broken pattern cannot silently skip everything."""
    assert blocks(ROOT / "README.md")
