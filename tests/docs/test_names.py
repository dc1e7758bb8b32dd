"""Every name README.md and docs/ tell a user to import resolves where they say, from a public module.

The pages say where a name lives in a few regular ways, each read here:

- an import in a code block or an inline code span (``from agentkit.events import Event``);
- a dotted reference in prose (```agentkit.providers.openai.OpenAICaller```), where its first part is a
  public module (``agentkit.round`` is a span attribute, not a module);
- a run of names followed by the module they are in (```TextCaller`` and ``TextResult`` (in ``agentkit.providers``)``);
- the API index's tables: the surface table's import column (``import from `agentkit```) and the public-module
  table, whose names are in the module of their row.

A name resolves when its module is public (no part with a leading underscore) and lists it in ``__all__`` (or
has it as a submodule): a name a module merely imports for itself is not one to import from there. A class the
pages name in prose is one some public module exports. Beside the names: a whole signature in prose lists the
callable's parameters, mkdocstrings renders public objects only, and a table's rows are as wide as its header.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
import types
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

import agentkit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^ *```[^\n]*\n.*?^ *```[ \t]*$", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
MODULE = r"agentkit(?:\.[A-Za-z_]\w*)*"
FROM_IMPORT = re.compile(rf"(?<![\w.])from\s+({MODULE})\s+import\s+(\([^)]*\)|[^\n#;]+)")
IMPORT = re.compile(rf"(?<![\w.])import\s+({MODULE})\b")
DOTTED = re.compile(r"agentkit(?:\.[A-Za-z_]\w*)+")
NAME_RUN = re.compile(r"((?:`[A-Za-z_]\w*`\s+(?:and|or)\s+)*`[A-Za-z_]\w*`)\s+\(?(?:in|from)\s+`(" + MODULE + r")`")
CLASS_NAME = re.compile(r"([A-Z]\w*[a-z]\w*)(?:\[[^\]]*\]|\(.*\))?")
OTHER_PROJECTS = {("docs/comparison.md", "Command")}
"""Class names a page uses for another project's class (LangGraph's ``Command``), not agentkit's own."""
SIGNATURE = re.compile(r"`(?:await )?((?:[a-z_]\w*\.)?[A-Za-z_]\w*)\(([^`]*\*,[^`]*)\)`")
"""A whole signature in prose: a call with a ``*,`` (keyword-only parameters follow), possibly over two lines;
a method's is on a receiver the pages name in lower case (``journal.resume(...)``)."""
RECEIVERS = {"journal": "agentkit.journal.Journal", "loop": "agentkit.ToolLoop"}
"""The objects whose methods the pages give whole signatures of, by the name the pages give them."""
MKDOCSTRINGS = re.compile(r"^::: *(\S+)", re.MULTILINE)


@dataclass(frozen=True, kw_only=True, slots=True)
class Named:
    """A name a page tells a user to import, and where it says the name is."""

    page: str
    line: int
    module: str
    name: str | None
    """None for the module itself (``import agentkit.journal``)."""

    def __str__(self) -> str:
        what = self.module if self.name is None else f"{self.module}.{self.name}"
        return f"{self.page}:{self.line}: {what}"


def public_modules() -> set[str]:
    """The public modules of the package: the first part after ``agentkit.`` of a public reference."""
    package = ROOT / "agentkit"
    return {
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if not path.name.startswith("_") and (path.suffix == ".py" or (path / "__init__.py").exists())
    }


def blank_fences(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The page's prose with its fenced blocks blanked (line numbers kept), and the blocks with their lines."""
    blocks: list[tuple[int, str]] = []

    def blank(match: re.Match[str]) -> str:
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group()))
        return "\n" * match.group().count("\n")

    return FENCE.sub(blank, text), blocks


def imports_in(code: str, page: str, first_line: int) -> list[Named]:
    found: list[Named] = []
    for match in FROM_IMPORT.finditer(code):
        line = first_line + code.count("\n", 0, match.start())
        for part in match.group(2).strip("()").split(","):
            name = part.split(" as ")[0].strip()
            if name and name != "*":
                found.append(Named(page=page, line=line, module=match.group(1), name=name))
    for match in IMPORT.finditer(code):
        line = first_line + code.count("\n", 0, match.start())
        found.append(Named(page=page, line=line, module=match.group(1), name=None))
    return found


def table_rows(prose: str) -> list[tuple[int, list[list[str]]]]:
    """Each markdown table as (the line of its header, its rows of cells), the header row first."""
    tables: list[tuple[int, list[list[str]]]] = []
    rows: list[list[str]] = []
    start = 0
    for number, line in enumerate([*prose.split("\n"), ""], start=1):
        if line.startswith("|"):
            if not rows:
                start = number
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
        elif rows:
            tables.append((start, rows))
            rows = []
    return tables


def bare_names(cell: str) -> list[str]:
    """The bare identifiers in backticks in `cell`, an extra's name (``extra `local```) left out."""
    return [span for span in SPAN.findall(re.sub(r"extra `[^`]*`", "", cell)) if IDENTIFIER.fullmatch(span)]


def names_in_tables(prose: str, page: str, claimed: set[tuple[int, str]]) -> list[Named]:
    """Names in the API index's two kinds of table: an ``import from `M``` column, and a ``module`` column."""
    found: list[Named] = []
    for start, (header, *rows) in table_rows(prose):
        for number, row in enumerate(rows, start=start + 2):
            for column, title in enumerate(header):
                imported = re.fullmatch(rf"import from `({MODULE})`", title)
                if imported and column < len(row):
                    # The names before a cell's first ";" are the column's; what follows is a note.
                    names = [name for name in bare_names(row[column].split(";")[0]) if (number, name) not in claimed]
                    found += [Named(page=page, line=number, module=imported.group(1), name=name) for name in names]
            if header[0] == "module" and (module := re.fullmatch(rf"`({MODULE})`", row[0])):
                for cell in row[1:]:
                    found += [
                        Named(page=page, line=number, module=module.group(1), name=name) for name in bare_names(cell)
                    ]
    return found


def named_in(page: Path) -> list[Named]:
    """Every name `page` tells a user to import, with the module it says the name is in."""
    label = str(page.relative_to(ROOT))
    prose, blocks = blank_fences(page.read_text(encoding="utf-8"))
    found: list[Named] = []
    for line, block in blocks:
        found += imports_in(block, label, line)
    public = public_modules()
    for match in SPAN.finditer(prose):
        line = prose.count("\n", 0, match.start()) + 1
        found += imports_in(match.group(1), label, line)
        dotted = DOTTED.match(match.group(1))
        if dotted and dotted.group().split(".")[1] in public and not match.group(1).lstrip().startswith("import"):
            module, _, name = dotted.group().rpartition(".")
            found.append(Named(page=label, line=line, module=module, name=name))
    claimed: set[tuple[int, str]] = set()
    for match in NAME_RUN.finditer(prose):
        line = prose.count("\n", 0, match.end(1)) + 1
        for name in re.findall(r"`(\w+)`", match.group(1)):
            claimed.add((line, name))
            found.append(Named(page=label, line=line, module=match.group(2), name=name))
    return found + names_in_tables(prose, label, claimed)


def exported(module: ModuleType, name: str) -> bool:
    """Whether `module` offers `name` for import: listed in its ``__all__`` (or present, without one), or a
    submodule."""
    if hasattr(module, "__path__") and importlib.util.find_spec(f"{module.__name__}.{name}") is not None:
        return True
    listed = getattr(module, "__all__", None)
    return name in listed if listed is not None else hasattr(module, name)


def problem(named: Named) -> str | None:
    """Why `named` does not resolve where the page says, or None when it does."""
    parts = named.module.split(".") + ([] if named.name is None else named.name.split("."))
    private = [part for part in parts if part.startswith("_")]
    if private:
        return f"{named}: {private[0]} is private"
    # A dotted reference may go on past the module into attributes (``agentkit.journal.Journal.resume``).
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        if not exported(module, rest[0]):
            return f"{named}: {module.__name__} does not export {rest[0]!r}"
        value: object = getattr(module, rest[0], None)
        for attribute in rest[1:]:
            if not hasattr(value, attribute):
                return f"{named}: {'.'.join(parts[: parts.index(attribute)])} has no {attribute!r}"
            value = getattr(value, attribute)
        return None
    return f"{named}: no module {named.module}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_name_a_page_tells_users_to_import_resolves_there(page: Path) -> None:
    """Each name a page says to import from a module is exported by that public module."""
    assert [found for named in named_in(page) if (found := problem(named))] == []


def test_the_scan_finds_each_way_a_page_names_an_import() -> None:
    """The scan reads code-block imports, dotted references, name runs and both API tables, so a broken pattern
    cannot pass by finding nothing."""
    found = {(named.page, named.module, named.name) for page in PAGES for named in named_in(page)}
    assert ("README.md", "agentkit.testing", "ScriptedCaller") in found  # a code block's import
    assert ("docs/providers.md", "agentkit.testing", "FakeOpenAIServer") in found  # "`X` from `M`"
    assert ("docs/api/index.md", "agentkit.providers", "TextResult") in found  # "`X` (in `M`)" in the surface table
    assert ("docs/api/index.md", "agentkit", "run_tool_loop") in found  # the surface table's import column
    assert ("docs/api/index.md", "agentkit.prompting", "reflective_prompt") in found  # the module table
    assert ("docs/local-model.md", "agentkit.providers.local", "LocalModel") in found  # a dotted reference
    assert not any(module == "agentkit.round" for _, module, _ in found)  # a span attribute, not a module


def test_a_private_or_unexported_name_is_reported() -> None:
    """The check refuses a private module, a name a public module does not export, and a missing attribute."""
    assert problem(Named(page="p", line=1, module="agentkit._results", name="RunEnding")) is not None
    assert problem(Named(page="p", line=1, module="agentkit.journal", name="Path")) is not None
    assert problem(Named(page="p", line=1, module="agentkit.journal", name="Journal.nothing")) is not None
    assert problem(Named(page="p", line=1, module="agentkit.providers.openai", name="OpenAICaller")) is None
    assert problem(Named(page="p", line=1, module="agentkit", name="journal")) is None  # a submodule


@cache
def defined_classes() -> set[str]:
    """The names of the classes the package defines at module level, public or not."""
    return {
        node.name
        for path in (ROOT / "agentkit").rglob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef)
    }


@cache
def exported_everywhere(name: str = "agentkit") -> set[str]:
    """Every name a public module exports, the package's public submodules walked."""
    module = importlib.import_module(name)
    found = set(getattr(module, "__all__", ()))
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        if not info.name.startswith("_"):
            found |= exported_everywhere(f"{name}.{info.name}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_page_names_no_class_that_only_a_private_module_holds(page: Path) -> None:
    """A class a page names in prose (``Critique``, ``ContextFunctionTool[Args, R, Ctx]``) that the package
    defines is exported by some public module, so a user who reads of it can import it."""
    label = str(page.relative_to(ROOT))
    private = defined_classes() - exported_everywhere()
    prose, _ = blank_fences(page.read_text(encoding="utf-8"))
    found = [
        f"{label}:{prose.count(chr(10), 0, match.start()) + 1}: {name}"
        for match in SPAN.finditer(prose)
        if (named := CLASS_NAME.fullmatch(match.group(1)))
        and (name := named.group(1)) in private
        and (label, name) not in OTHER_PROJECTS
    ]
    assert found == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_signature_a_page_gives_names_every_parameter(page: Path) -> None:
    """A whole signature a page gives for a top-level callable (``ToolLoop(caller, ..., *, same=None, ...)``)
    names exactly its parameters, so a keyword added later (``grants=``) is not left out of the docs."""
    prose, _ = blank_fences(page.read_text(encoding="utf-8"))
    wrong = []
    for match in SIGNATURE.finditer(prose):
        receiver, _, name = match.group(1).rpartition(".")
        if receiver:
            if receiver not in RECEIVERS:
                wrong.append(f"{match.group(1)}: a method of an object RECEIVERS does not name")
                continue
            module, _, owner = RECEIVERS[receiver].rpartition(".")
            value = getattr(getattr(importlib.import_module(module), owner), name)
        elif name in agentkit.__all__:
            value = getattr(agentkit, name)
        else:
            continue
        given = [part.split("=")[0].strip() for part in match.group(2).split(",")]
        if given != (actual := [n for n in signature_names(value) if n != "self"]):
            wrong.append(f"{match.group(1)}: {given} != {actual}")
    assert wrong == []


def signature_names(value: object) -> list[str]:
    """A callable's parameter names as a signature writes them, ``*`` before the keyword-only ones.

    ``**options: Unpack[SomeOptions]`` (the run's shared keyword options) stands for the typed dict's keys, which
    are what a caller writes.
    """
    names: list[str] = []
    for parameter in inspect.signature(value).parameters.values():  # type: ignore[arg-type]  # a public callable
        keywords = unpacked_keys(value, parameter)
        if (keywords or parameter.kind is parameter.KEYWORD_ONLY) and "*" not in names:
            names.append("*")
        names.extend(keywords or [parameter.name])
    return names


def unpacked_keys(value: object, parameter: inspect.Parameter) -> list[str]:
    """The keys of the typed dict a ``**kwargs: Unpack[...]`` parameter takes; none for any other parameter."""
    if parameter.kind is not parameter.VAR_KEYWORD:
        return []
    annotation = str(parameter.annotation)  # a string: the package's modules postpone their annotations
    if (match := re.fullmatch(r"Unpack\[(\w+)(?:\[.*\])?\]", annotation)) is None:
        return []
    function = value.__init__ if isinstance(value, type) else value  # type: ignore[misc]  # a class: its __init__
    assert isinstance(function, types.FunctionType), function
    # The module the function is defined in (its __module__ is rewritten to the public one) holds the typed dict.
    return list(function.__globals__[match.group(1)].__annotations__)


def test_a_signature_check_spells_out_the_shared_options() -> None:
    """``**options: Unpack[LoopOptions]`` counts as the keyword-only options it stands for, in their order."""
    assert signature_names(agentkit.run_tool_loop_tiered) == [
        *("caller", "agent", "tools", "ctx", "config"),
        *("*", "same", "observer", "answer", "grants"),
    ]


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "api").glob("*.md")), ids=lambda page: page.name)
def test_every_api_page_renders_a_public_object(page: Path) -> None:
    """Each mkdocstrings directive (``::: agentkit.x``) names a public module or an object it exports."""
    targets = MKDOCSTRINGS.findall(page.read_text(encoding="utf-8"))
    found = [problem(Named(page=page.name, line=0, module=target, name=None)) for target in targets]
    assert [reason for reason in found if reason] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_table_row_has_a_cell_per_column(page: Path) -> None:
    """A table row has as many cells as its header (a row short of one shifts what it says about the
    libraries to its right, or leaves one out)."""
    prose, _ = blank_fences(page.read_text(encoding="utf-8"))
    short = [
        f"{page.name}:{start + 1 + index}: {len(row)} cells, {len(header)} columns"
        for start, (header, *rows) in table_rows(prose)
        for index, row in enumerate(rows, start=1)
        if len(row) != len(header)
    ]
    assert short == []
