"""The public surface: a sorted, complete __all__ and a light import."""

from __future__ import annotations

import subprocess
import sys

import agentkit


def test_all_is_sorted_and_unique() -> None:
    """__all__ is sorted and has no duplicates."""
    assert list(agentkit.__all__) == sorted(set(agentkit.__all__))


def test_all_names_every_public_attribute() -> None:
    """Every public name bound in the package is in __all__, and every entry exists."""
    public = {
        name
        for name, value in vars(agentkit).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("agentkit")
    }
    assert public <= set(agentkit.__all__)
    assert all(hasattr(agentkit, name) for name in agentkit.__all__)


def test_import_is_light() -> None:
    """`import agentkit` imports neither openai, instructor, any optional extra, nor asyncio and tenacity."""
    heavy = ["openai", "instructor", "opentelemetry", "psycopg", "xllamacpp", "httpx", "asyncio", "tenacity"]
    code = f"import sys, agentkit; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_lazy_names_resolve_to_their_modules() -> None:
    """Names loaded on first use resolve to the objects their modules define, and dir() lists them."""
    from agentkit.once import run_once
    from agentkit.pair import pair

    assert agentkit.run_once is run_once
    assert agentkit.pair is pair
    assert {"run_once", "pair", "iter_tool_loop", "approve"} <= set(dir(agentkit))


def test_unknown_attribute_is_attribute_error() -> None:
    """A name the package does not have raises AttributeError, as for any module."""
    import pytest

    with pytest.raises(AttributeError, match="no_such_name"):
        agentkit.no_such_name  # noqa: B018  # the attribute access is the test
