"""A dataset as pytest tests: one test per case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from agentkit.evals._dataset import Dataset

__all__ = ["parametrize"]

F = TypeVar("F", bound=Callable[..., Any])


def parametrize(dataset: Dataset[Any], argname: str = "case") -> Callable[[F], F]:
    """`pytest.mark.parametrize` over `dataset`'s cases, each test named after its case.

    Example:
        >>> @parametrize(QUESTIONS)
        ... async def test_question(case: Case[str]) -> None:
        ...     (await evaluate_case(QUESTIONS, case, loop.run)).assert_passed()
    """
    import pytest  # only a test process needs it

    mark: Callable[[F], F] = pytest.mark.parametrize(argname, dataset.cases, ids=[c.name for c in dataset.cases])
    return mark
