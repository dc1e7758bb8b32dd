"""The degeneration guard: is the executor repeating itself?"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel

__all__ = ["SameFunc", "is_repeat", "repeat_of", "same_args"]

Args = TypeVar("Args", bound=BaseModel)

SameFunc = Callable[[Args, Args], bool]
"""`(a, b) -> bool`: whether two calls are materially the same."""


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
    """Whether `(tool_name, args)` repeats one of the last `window` calls.

    A call repeating any of the last few (not only the last) catches an A, B, A, B cycle as
    well as an immediate repeat. Calls to different tools are never the same.
    """
    return repeat_of(tool_name, args, recent, same, window) is not None


def repeat_of(
    tool_name: str,
    args: Args,
    recent: Sequence[tuple[str, Args]],
    same: SameFunc[Args] | None,
    window: int,
) -> int | None:
    """The index in `recent` of the latest of the last `window` calls that `(tool_name, args)`
    repeats, or `None` when it repeats none (`is_repeat` as a position)."""
    compare = same or same_args
    start = max(len(recent) - window, 0)
    for index in range(len(recent) - 1, start - 1, -1):
        name, prior = recent[index]
        if name == tool_name and compare(prior, args):
            return index
    return None
