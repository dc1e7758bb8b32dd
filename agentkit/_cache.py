"""Caches for values worked out once per config, type or function rather than once per run or round.

Services define tools per request (a `Literal` of the files this user may read, a tool named
`search_<tenant>`), so a cache keyed by the types a run is built from must not keep those types
alive after their run: a bounded cache full of dead tool sets holds megabytes that are never used
again. Three kinds, by what the cached value refers to:

- `kept_on(owner, key, build)`: a value built from a class that refers to it (a step model built
  from an args type refers to that type) is kept **on the class itself**, in a small store in its
  `__dict__`. Value and class then live exactly as long as each other: a class defined at import
  time keeps its values for good, one made per request takes them with it when it goes. A weak-keyed
  dictionary cannot do this: its values would keep their keys alive. Each class keeps at most
  `KEPT_PER_OWNER` values (a long-lived args type under per-request tool names keeps the latest);
  what cannot hold attributes (`str`, `list[Doc]`) goes to one shared store of
  `SHARED_SIZE`.
- `weak_cache`: a function of one object whose result does not refer to it (the item type read
  from a tool function's annotations) is cached in a `WeakKeyDictionary`: the entry goes with the
  object.
- `value_cache`: a function of one value that may not be hashable (a config), bounded.
"""

from __future__ import annotations

import functools
import threading
import typing
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["KEPT_PER_OWNER", "SHARED_SIZE", "kept_on", "value_cache", "weak_cache"]

A = TypeVar("A")
T = TypeVar("T")

KEPT_PER_OWNER = 16
"""Values one class keeps (`kept_on`), most recently used first."""
SHARED_SIZE = 64
"""Values kept for owners that cannot hold attributes (builtins, generic aliases), most recently used first."""

_SLOT = "__agentkit_kept__"
_lock = threading.Lock()


class _Store(OrderedDict[Hashable, Any]):
    """One owner's values. It pickles empty: a class pickled by value (cloudpickle) does not carry it."""

    def __reduce__(self) -> tuple[type[_Store], tuple[()]]:
        return (_Store, ())


_shared = _Store()
"""The values of owners that cannot hold attributes, keyed by `(owner, key)`."""


def kept_on(owner: object, key: Hashable, build: Callable[[], T], *, size: int = KEPT_PER_OWNER) -> T:
    """`build()`, kept on `owner` (a class) under `key` as long as the class lives (see the module docstring).

    `build` runs outside the lock; when two threads build at once, both get the value stored first.
    An owner or key that cannot be hashed where the shared store needs it is built afresh.
    """
    store, slot = _store_of(owner), key
    if store is None:
        store, slot, size = _shared, (owner, key), SHARED_SIZE
        try:
            hash(slot)
        except TypeError:
            return build()
    with _lock:
        if slot in store:
            store.move_to_end(slot)
            return typing.cast("T", store[slot])
    value = build()
    with _lock:
        if slot in store:
            return typing.cast("T", store[slot])
        store[slot] = value
        while len(store) > size:
            store.popitem(last=False)
    return value


def _store_of(owner: object) -> _Store | None:
    """The class's own store (never a base class's), made on first use; `None` for an owner that is not a class
    or cannot hold attributes."""
    if not isinstance(owner, type):
        return None
    store = owner.__dict__.get(_SLOT)
    if isinstance(store, _Store):
        return store
    store = _Store()
    try:
        type.__setattr__(owner, _SLOT, store)
    except (AttributeError, TypeError):  # a builtin or an extension type
        return None
    return store


def weak_cache(fn: Callable[[A], T]) -> Callable[[A], T]:
    """Cache `fn(value)` for as long as `value` lives; for results that do not refer to `value`.

    A value that cannot be weakly referenced or hashed is worked out afresh each time.
    """
    results: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
    missing: Any = object()

    @functools.wraps(fn)
    def lookup(value: A) -> T:
        try:
            found = results.get(value, missing)
        except TypeError:  # not weakly referenceable, or not hashable
            return fn(value)
        if found is missing:
            found = results[value] = fn(value)
        return typing.cast("T", found)

    return lookup


def value_cache(maxsize: int) -> Callable[[Callable[[A], T]], Callable[[A], T]]:
    """`functools.lru_cache(maxsize)` for a function of one value; a value that cannot be hashed (a
    config holding a summarizer object, an annotation holding a list) is worked out afresh each time.

    For values worked out once per config rather than once per run or round. Bounded, so that values
    made per request leave memory flat.
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
