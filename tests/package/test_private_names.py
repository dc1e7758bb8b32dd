"""No module of agentkit reads a private name (`_x`, not a dunder) of another package.

An AST scan of agentkit/: an import of a private module or name of another package, an attribute `_x`
read on a name bound by such an import (`httpx2._client`, `openai.AsyncOpenAI._x`), on `super()`, or on
any object where agentkit itself defines no `_x` (`client._make_status_error_from_response`,
`http._transport`) is a finding. Allowed are only the names their owner documents despite the underscore,
listed in ALLOWED with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "agentkit"

ALLOWED = {
    ("os", "_exit"): "documented in the os module: exit without cleanup (a forked or crashed worker)",
    ("argparse", "_SubParsersAction"): "the documented return type of add_subparsers(), which has no public name",
    # Overrides of argparse's HelpFormatter hooks in agentkit/_cli.py (_PlainFormatter), the way argparse's own
    # formatter classes customise help; argparse names only the classes public. Left for the CLI's owner.
    ("super()", "_format_text"): "argparse.HelpFormatter hook overridden by agentkit/_cli.py's _PlainFormatter",
    ("super()", "_expand_help"): "argparse.HelpFormatter hook overridden by agentkit/_cli.py's _PlainFormatter",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _own_private_names(trees: list[ast.Module]) -> set[str]:
    """Every private name agentkit defines: functions, classes, attributes set on `self` or `cls`, slots, fields,
    globals and locals, and names imported from its own modules."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
            ):
                names.update(
                    part.value
                    for part in ast.walk(node.value)
                    if isinstance(part, ast.Constant) and isinstance(part.value, str)
                )
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("agentkit")):
                names.update(alias.asname or alias.name for alias in node.names)
    return {name for name in names if _private(name)}


def _external_bindings(tree: ast.Module) -> dict[str, str]:
    """Names a module binds by importing another package: local name -> the package's dotted name."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("agentkit"):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("agentkit"):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _import_findings(node: ast.stmt, where: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [
            f"{where}:{node.lineno}: import {alias.name}"
            for alias in node.names
            if not alias.name.startswith("agentkit") and any(map(_private, alias.name.split(".")))
        ]
    assert isinstance(node, ast.ImportFrom)
    module = node.module or ""
    if node.level or module.startswith("agentkit"):
        return []
    return [
        f"{where}:{node.lineno}: from {module} import {alias.name}"
        for alias in node.names
        if (any(map(_private, module.split("."))) or _private(alias.name)) and (module, alias.name) not in ALLOWED
    ]


def _attribute_finding(node: ast.Attribute, where: Path, bound: dict[str, str], own: set[str]) -> str | None:
    root = _root(node.value)
    value = ast.unparse(node.value)
    if isinstance(root, ast.Name) and root.id in ("self", "cls"):
        return None
    external = isinstance(root, ast.Name) and root.id in bound
    is_super = isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super"
    if ((bound.get(value, value) if external else value), node.attr) in ALLOWED:
        return None
    if external or is_super or node.attr not in own:
        return f"{where}:{node.lineno}: {value}.{node.attr}"
    return None


def findings(trees: list[tuple[Path, ast.Module]]) -> list[str]:
    own = _own_private_names([tree for _, tree in trees])
    found: list[str] = []
    for path, tree in trees:
        where = path.relative_to(PACKAGE.parent)
        bound = _external_bindings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend(_import_findings(node, where))
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                finding = _attribute_finding(node, where, bound, own)
                if finding is not None:
                    found.append(finding)
            elif isinstance(node, ast.Call) and _by_name(node, own):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def _by_name(call: ast.Call, own: set[str]) -> bool:
    """`getattr`, `hasattr` or `setattr` of a private name agentkit does not define, on anything but self or cls."""
    if (
        not (isinstance(call.func, ast.Name) and call.func.id in ("getattr", "hasattr", "setattr"))
        or len(call.args) < 2
    ):
        return False
    target, name = call.args[0], call.args[1]
    if isinstance(target, ast.Name) and target.id in ("self", "cls"):
        return False
    return (
        isinstance(name, ast.Constant)
        and isinstance(name.value, str)
        and _private(name.value)
        and name.value not in own
    )


def test_agentkit_reads_no_private_name_of_another_package() -> None:
    """No import of, and no attribute read of, another package's private names anywhere in agentkit/."""
    assert findings(list(_modules())) == []


def test_the_scan_finds_what_a_private_road_reads() -> None:
    """The scan reports a private module import, a private attribute of an imported package, and one read on an
    object of another package (a name agentkit does not define)."""
    source = (
        "import httpx2\n"
        "from httpx2._client import ClientState\n"
        "def f(client, http):\n"
        "    client._make_status_error_from_response\n"
        "    http.cookies.jar._cookies\n"
        "    httpx2._models\n"
        "    getattr(http, '_transport', None)\n"
    )
    tree = ast.parse(source)
    got = findings([(PACKAGE / "providers" / "probe.py", tree)])
    assert sorted(got) == [
        "agentkit/providers/probe.py:2: from httpx2._client import ClientState",
        "agentkit/providers/probe.py:4: client._make_status_error_from_response",
        "agentkit/providers/probe.py:5: http.cookies.jar._cookies",
        "agentkit/providers/probe.py:6: httpx2._models",
        "agentkit/providers/probe.py:7: getattr(http, '_transport', None)",
    ]
