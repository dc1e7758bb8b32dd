"""The caches of values worked out once: kept on their class, weakly keyed, or bounded by value."""

from __future__ import annotations

import gc
import pickle
import weakref

import pytest

from agentkit._cache import KEPT_PER_OWNER, SHARED_SIZE, _shared, _Store, kept_on, value_cache, weak_cache


def test_a_hashable_value_is_worked_out_once_and_an_unhashable_one_each_time() -> None:
    """value_cache works a hashable value out once and an unhashable one afresh each call."""
    calls: list[object] = []

    @value_cache(maxsize=4)
    def size(value: object) -> int:
        calls.append(value)
        return len(str(value))

    assert size((1, 2)) == size((1, 2)) == 6
    assert size([1, 2]) == size([1, 2]) == 6
    assert calls == [(1, 2), [1, 2], [1, 2]]


def test_a_failure_inside_is_raised_as_it_is_after_one_try() -> None:
    """An exception of the function comes out unchanged, and the function ran once."""
    calls: list[object] = []

    @value_cache(maxsize=4)
    def broken(value: object) -> int:
        calls.append(value)
        raise TypeError("not this one")

    with pytest.raises(TypeError, match="not this one"):
        broken("x")
    assert calls == ["x"]


class Value:
    """A value that refers to the class it was built from, as a step model refers to its args type."""

    def __init__(self, owner: type) -> None:
        self.owner = owner


def kept_once() -> tuple[weakref.ref[type], weakref.ref[Value]]:
    """A class with a value kept on it, both left for the collector; their weak references."""
    owner = type("Owner", (), {})
    built = [kept_on(owner, "v", lambda: Value(owner)) for _ in range(3)]
    assert built[0] is built[1] is built[2]
    return weakref.ref(owner), weakref.ref(built[0])


def test_a_value_kept_on_a_class_is_built_once_and_goes_with_the_class() -> None:
    """kept_on builds once per (class, key); the value refers to the class, yet both go once the class does."""
    gone = kept_once()
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def test_a_class_keeps_its_latest_values_only() -> None:
    """A class keeps at most KEPT_PER_OWNER values, the least recently used going first."""
    owner = type("Owner", (), {})
    first = kept_on(owner, 0, object)
    for key in range(1, KEPT_PER_OWNER + 1):
        kept_on(owner, key, object)
    assert len(owner.__dict__["__agentkit_kept__"]) == KEPT_PER_OWNER
    assert kept_on(owner, 0, object) is not first
    assert kept_on(owner, KEPT_PER_OWNER, object) is kept_on(owner, KEPT_PER_OWNER, object)


def test_a_subclass_does_not_see_its_base_classes_values() -> None:
    """Values are kept in the class's own __dict__: a subclass builds its own."""
    base = type("Base", (), {})
    sub = type("Sub", (base,), {})
    assert kept_on(base, "v", lambda: "base") == "base"
    assert kept_on(sub, "v", lambda: "sub") == "sub"


def test_owners_that_cannot_hold_attributes_share_one_bounded_store() -> None:
    """A builtin (or a generic alias) keeps its values in one shared store of SHARED_SIZE."""
    first = kept_on(str, "shared test", object)
    assert kept_on(str, "shared test", object) is first
    for key in range(SHARED_SIZE + 5):
        kept_on(list[int], ("shared test", key), object)
    assert len(_shared) == SHARED_SIZE
    assert kept_on(str, "shared test", object) is not first


def test_a_store_pickles_empty() -> None:
    """A class pickled by value does not carry its kept values along."""
    store = _Store({"v": object()})
    assert pickle.loads(pickle.dumps(store)) == _Store()


def test_a_weak_cache_entry_goes_with_its_key_and_a_plain_value_is_worked_out_each_time() -> None:
    """weak_cache works a function's result out once while the function lives; an int (no weak reference) afresh."""
    calls: list[str] = []

    @weak_cache
    def named(value: object) -> str:
        calls.append(type(value).__name__)  # not the value: that would keep it alive
        return repr(type(value))

    def target() -> None: ...

    assert named(target) == named(target)
    assert named(7) == named(7)
    assert calls == ["function", "int", "int"]
    held = weakref.ref(target)
    del target
    gc.collect()
    assert held() is None
