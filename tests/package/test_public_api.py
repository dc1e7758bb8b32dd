"""The public surface: a curated top level (sorted, complete, at most 60 names, each reporting ``agentkit`` as
its module), the public modules and no others, no import cycle, every name the design fixes importable where it
is documented, and a light import."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import agentkit

PACKAGE = Path(agentkit.__file__).parent

TOP_LEVEL = {
    "AfterProposal", "AgentkitError", "Approval", "AutonomyRung", "Cites", "Completion", "ContextTool", "ContextWindow",
    "FunctionTool", "LLMVerifier", "LoopConfig", "Observer", "OnceAgent", "OnceResult", "Outcome", "PairConfig",
    "PairResult", "PriorCall", "Prompt", "ProposedAction", "Rejection", "RepeatPolicy", "RetryPolicy", "Review",
    "RoleSpec", "RoundInfo", "RoundRecord", "RulesVerifier", "RunCheckpoint", "SameFunc", "StopReason",
    "StructuredCaller", "StructuredRequest", "Tier", "TieredLoopResult", "Tool", "ToolAgent",
    "ToolLoop", "ToolLoopResult", "ToolRetry", "ToolRoundInfo", "ToolStep", "Usage", "UsageError", "Verifier",
    "approve", "execute_approved", "generate_structured", "max_rung_for", "pair", "parse_tier", "reject",
    "resume_tool_loop", "run_once", "run_once_text", "run_tool_loop", "run_tool_loop_sync", "run_tool_loop_tiered",
    "tool", "tool_set",
}  # fmt: skip

PUBLIC_MODULES = {
    "decisions", "errors", "evals", "events", "journal", "mcp", "otel", "program", "prompting", "providers",
    "provenance", "temporal", "testing",
}  # fmt: skip

DESIGNED = {
    "agentkit": [
        "Outcome", "StopReason", "Tier", "AutonomyRung", "max_rung_for", "parse_tier", "ToolStep", "Tool", "tool",
        "ToolRetry", "ToolAgent", "ToolRoundInfo", "Prompt", "RoleSpec", "LoopConfig", "SameFunc", "run_tool_loop",
        "run_tool_loop_tiered", "ToolLoopResult", "TieredLoopResult", "ProposedAction", "StructuredCaller",
        "StructuredRequest", "Completion", "generate_structured", "Observer", "run_once", "OnceResult", "pair",
        "PairResult", "RunCheckpoint", "resume_tool_loop", "Approval", "Rejection", "approve", "RepeatPolicy",
        "AgentkitError", "UsageError",
    ],
    "agentkit.errors": [
        "AgentkitError", "UsageError", "Throttled", "StructuredOutputError", "ProviderError", "ToolError",
        "ResumeRefused", "CallRefused",
    ],
    "agentkit.providers.openai": ["OpenAICaller"],
    "agentkit.testing": ["ScriptedCaller"],
    "agentkit.journal": ["Journal", "JournalError", "JournalObserver", "open_journal"],
    "agentkit.temporal": ["DurableAgent", "DurableRuns"],
    "agentkit.mcp": ["McpTool", "connect_stdio"],
}  # fmt: skip
"""Names ../shared/DESIGN.md fixes, where its contract puts them (the top level, or the module it names)."""


def test_the_top_level_holds_exactly_the_curated_names() -> None:
    """__all__ is sorted, unique, at most 60 names, and exactly the curated set."""
    assert list(agentkit.__all__) == sorted(set(agentkit.__all__))
    assert len(agentkit.__all__) <= 60
    assert set(agentkit.__all__) == TOP_LEVEL


def test_all_names_every_public_attribute() -> None:
    """Every public name bound in the package is in __all__, and every entry exists."""
    public = {
        name
        for name, value in vars(agentkit).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("agentkit")
    }
    assert public <= set(agentkit.__all__)
    assert all(hasattr(agentkit, name) for name in agentkit.__all__)


def test_every_top_level_name_reports_a_public_module() -> None:
    """A class or function of the top level says ``agentkit`` where its home is a private module (as httpx's
    do), or names the public module it is defined in (``agentkit.errors``): never a private one."""
    for name in agentkit.__all__:
        value = getattr(agentkit, name)
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")):
            module = value.__module__
            assert module == "agentkit" or module.removeprefix("agentkit.") in PUBLIC_MODULES, (name, module)


def test_the_public_modules_are_exactly_these() -> None:
    """Every other module of the package is private (a leading underscore)."""
    found = {
        path.stem if path.is_file() else path.name
        for path in PACKAGE.iterdir()
        if not path.name.startswith("_") and (path.suffix == ".py" or (path / "__init__.py").exists())
    }
    assert found == PUBLIC_MODULES


@pytest.mark.parametrize(("module", "names"), sorted(DESIGNED.items()))
def test_every_name_the_design_fixes_is_importable_where_documented(module: str, names: list[str]) -> None:
    """The design's contract names resolve where it puts them."""
    loaded = importlib.import_module(module)
    assert [name for name in names if not hasattr(loaded, name)] == []


IN_A_PUBLIC_MODULE = {
    "agentkit.events": ["Event", "LoggingObserver", "RunEnding", "iter_tool_loop", "iter_tool_loop_tiered"],
    "agentkit.prompting": ["reflective_prompt"],
    "agentkit.provenance": [
        "ArgOrigin", "CallProvenance", "ItemOrigin", "Origin", "ProvenancePolicy", "RunProvenance", "Trust",
    ],
    "agentkit.providers": ["TextCaller", "TextCompletion", "TextResult"],
    "agentkit.providers.local": ["check_installed"],
}  # fmt: skip
"""Names docs/api/index.md places in a public module rather than at the top level, which is full."""


@pytest.mark.parametrize(("module", "names"), sorted(IN_A_PUBLIC_MODULE.items()))
def test_names_kept_off_the_top_level_are_exported_by_their_public_module(module: str, names: list[str]) -> None:
    """Each is in its module's ``__all__`` and not in ``agentkit.__all__``: one place to import it from."""
    exported = set(importlib.import_module(module).__all__)
    assert [name for name in names if name not in exported or name in agentkit.__all__] == []


def module_imports() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports when imported or called (module- and
    function-level imports alike; ``if TYPE_CHECKING:`` blocks left out), parent packages aside."""
    files = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}
    names = {name.removesuffix(".__init__"): path for name, path in files.items()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()

        def visit(node: ast.AST, found: set[str] = found) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for other in child.orelse:
                        visit(other)
                    continue
                if isinstance(child, ast.Import):
                    found.update(alias.name for alias in child.names)
                elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                    found.add(child.module)
                    found.update(f"{child.module}.{alias.name}" for alias in child.names)
                visit(child)

        visit(ast.parse(path.read_text()))
        graph[name] = {d for d in found if d in names and d != name and not name.startswith(d + ".")}
    return graph


def test_the_package_has_no_import_cycle() -> None:
    """No module reaches itself through the modules it imports (a function-level import counts too)."""
    graph = module_imports()
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str], done: set[str]) -> None:
        for nxt in graph[node]:
            if nxt in path:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in done:
                walk(nxt, [*path, nxt], done)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            walk(start, [start], done)
    assert cycles == []


def test_import_is_light() -> None:
    """`import agentkit` imports neither openai, instructor, any optional extra, nor asyncio and tenacity."""
    heavy = ["openai", "instructor", "opentelemetry", "psycopg", "xllamacpp", "httpx", "asyncio", "tenacity"]
    heavy += ["starlette", "jinja2", "uvicorn", "multipart"]
    code = f"import sys, agentkit; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_lazy_names_resolve_to_their_modules() -> None:
    """Names loaded on first use resolve to the objects their modules define, and dir() lists them."""
    from agentkit._approval import approve
    from agentkit._once import run_once
    from agentkit._pair import pair

    assert agentkit.run_once is run_once
    assert agentkit.pair is pair
    assert agentkit.approve is approve
    assert {"run_once", "pair", "approve"} <= set(dir(agentkit))


def test_unknown_attribute_is_attribute_error() -> None:
    """A name the package does not have raises AttributeError, as for any module."""
    with pytest.raises(AttributeError, match="no_such_name"):
        agentkit.no_such_name  # noqa: B018  # the attribute access is the test
