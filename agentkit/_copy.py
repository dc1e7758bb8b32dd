"""Each audience's own copy of a model: deep, except where nothing in it can change."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["owned"]

M = TypeVar("M", bound=BaseModel)

_ATOMIC = frozenset({str, int, float, bool, bytes, type(None)})
"""Types whose values cannot change: a model that holds only these shares nothing a copy could change."""


def owned(model: M) -> M:
    """`model.model_copy(deep=True)`: a copy that nothing else holds.

    A model whose values (fields, extras and private attributes) are all atomic (text, numbers,
    booleans, bytes, `None`) gets a shallow copy: it has its own `__dict__`, so setting a field on
    it changes only it, and the values it shares cannot change, so it is the deep copy, made
    without `copy.deepcopy`'s walk. A model that overrides `__deepcopy__` always gets its own.
    """
    if type(model).__deepcopy__ is BaseModel.__deepcopy__ and (
        _atomic(model.__dict__)
        and _atomic(model.__pydantic_extra__)
        and _atomic(getattr(model, "__pydantic_private__", None))
    ):
        return model.model_copy()
    return model.model_copy(deep=True)


def _atomic(values: dict[str, Any] | None) -> bool:
    return values is None or all(type(value) in _ATOMIC for value in values.values())
