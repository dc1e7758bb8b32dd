"""``value_cache``: a bounded cache for functions of one value that may not be hashable."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


def value_cache(maxsize: int) -> Callable[[Callable[[A], T]], Callable[[A], T]]:
    """``functools.lru_cache(maxsize)`` for a function of one value; a value that cannot be hashed (a
    config holding a summarizer object, an annotation holding a list) is worked out afresh each time.

    For values worked out once per config, tool or type rather than once per run or round.
    Bounded, so that values made per request (tools defined per request) leave memory flat.
    """

    def decorate(fn: Callable[[A], T]) -> Callable[[A], T]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def lookup(value: A) -> T:
            try:
                hash(value)
            except TypeError:
                return fn(value)
            return cached(value)

        return lookup

    return decorate
