"""``value_cache``: one value worked out once, an unhashable one afresh, a failure raised once."""

from __future__ import annotations

import pytest

from agentkit._cache import value_cache


def test_a_hashable_value_is_worked_out_once_and_an_unhashable_one_each_time() -> None:
    calls: list[object] = []

    @value_cache(maxsize=4)
    def size(value: object) -> int:
        calls.append(value)
        return len(str(value))

    assert size((1, 2)) == size((1, 2)) == 6
    assert size([1, 2]) == size([1, 2]) == 6
    assert calls == [(1, 2), [1, 2], [1, 2]]


def test_a_failure_inside_is_raised_as_it_is_after_one_try() -> None:
    calls: list[object] = []

    @value_cache(maxsize=4)
    def broken(value: object) -> int:
        calls.append(value)
        raise TypeError("not this one")

    with pytest.raises(TypeError, match="not this one"):
        broken("x")
    assert calls == ["x"]
