"""Timeouts, with asyncio imported on first use so that ``import agentkit`` does not load it."""

from __future__ import annotations

from typing import Any


def timeout_scope(delay: float | None) -> Any:
    """``asyncio.timeout(delay)``: ``None`` never expires."""
    import asyncio  # see the module docstring

    return asyncio.timeout(delay)
