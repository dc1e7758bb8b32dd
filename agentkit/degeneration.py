"""The degeneration guard: is the executor repeating itself?"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel

__all__ = ["SameFunc", "is_repeat", "same_args"]

Args = TypeVar("Args", bound=BaseModel)

SameFunc = Callable[[Args, Args], bool]
"""``(a, b) -> bool``: whether two calls are materially the same."""


def same_args(a: BaseModel, b: BaseModel) -> bool:
    """The default comparator: same type and equal field values (pydantic equality)."""
    return a == b


def is_repeat(
    tool_name: str,
    args: Args,
    recent: Sequence[tuple[str, Args]],
    same: SameFunc[Args] | None,
    window: int,
) -> bool:
    """Whether ``(tool_name, args)`` repeats one of the last ``window`` calls.

    A call repeating any of the last few (not only the last) catches an A, B, A, B cycle as
    well as an immediate repeat. Calls to different tools are never the same.
    """
    compare = same or same_args
    return any(name == tool_name and compare(prior, args) for name, prior in recent[-window:])
