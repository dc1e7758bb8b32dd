"""Timeouts, with asyncio imported on first use so that `import agentkit` does not load it."""

from __future__ import annotations

from types import TracebackType
from typing import Any


class _Unbounded:
    """The scope of no timeout: nothing to arm, nothing that expires (`asyncio.timeout(None)`, for less)."""

    __slots__ = ()

    async def __aenter__(self) -> _Unbounded:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def expired(self) -> bool:
        return False


_UNBOUNDED = _Unbounded()


def timeout_scope(delay: float | None) -> Any:
    """`asyncio.timeout(delay)`: `None` never expires (and then arms nothing, every round)."""
    if delay is None:
        return _UNBOUNDED
    import asyncio  # see the module docstring

    return asyncio.timeout(delay)
