"""`AgentSpec`: what a client needs to start and read the runs of a durable agent, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

from pydantic import JsonValue, TypeAdapter, ValidationError

from agentkit.errors import UsageError

__all__ = ["AgentSpec"]

Ctx = TypeVar("Ctx")
R = TypeVar("R")


@dataclass(frozen=True, kw_only=True, init=False)
class AgentSpec(Generic[Ctx, R]):
    """A durable agent as a client knows it: its name, the type of its `ctx` and the type of its items.

    A client that only starts runs and reads their results needs no agent, no tools and no caller:
    `DurableRuns.start(spec, ctx)` validates `ctx` as the workflow will (a `UsageError` before
    anything starts) and gives a `RunHandle[R]` whose result's items are typed. A `DurableAgent`
    gives its own (`agent.spec`), so the worker's module and the client's can share one.

    Example:
        >>> PLANNER = AgentSpec(name="planner", ctx_type=Brief, item_type=Doc)  # doctest: +SKIP
        >>> handle = await runs.start(PLANNER, Brief(topic="refunds"))  # RunHandle[Doc]  # doctest: +SKIP

    An item type that is not a class (a union of item types) is given with the parameters written out:
    `AgentSpec[Brief, Doc | Note](name=..., ctx_type=Brief, item_type=Doc | Note)`.
    """

    name: str
    """The name the workers serve the agent under (`DurableAgent.name`)."""
    ctx_type: Any
    """The type a run's `ctx` is validated as (the agent's `ctx_type`)."""
    item_type: Any
    """The type of one item of the run's result (the agent's `item_type`)."""

    @overload
    def __init__(self, *, name: str, ctx_type: type[Ctx], item_type: type[R]) -> None: ...
    @overload
    def __init__(self, *, name: str, ctx_type: Any, item_type: Any) -> None: ...
    def __init__(self, *, name: str, ctx_type: Any, item_type: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "ctx_type", ctx_type)
        object.__setattr__(self, "item_type", item_type)

    @classmethod
    def named(cls, name: str) -> AgentSpec[JsonValue, JsonValue]:
        """The spec of an agent known only by name: its ctx and items are JSON values, checked by the workers."""
        return AgentSpec[JsonValue, JsonValue](name=name, ctx_type=JsonValue, item_type=JsonValue)

    @cached_property
    def ctx_adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.ctx_type)

    @cached_property
    def items_adapter(self) -> TypeAdapter[list[Any]]:
        return TypeAdapter(list[self.item_type])  # type: ignore[name-defined]  # a run-time type

    def ctx_json(self, ctx: object) -> JsonValue:
        """`ctx` as the JSON a run starts with, checked the way the workflow reads it back.

        Raises:
            UsageError: `ctx` is not of the agent's `ctx_type`, or its JSON does not validate back as it.
        """
        try:
            dumped: JsonValue = self.ctx_adapter.dump_python(self.ctx_adapter.validate_python(ctx), mode="json")
        except ValidationError as wrong:
            raise UsageError(self._refused(wrong)) from None
        self.ctx_of(dumped)
        return dumped

    def ctx_of(self, value: JsonValue) -> Any:
        """The run's ctx from its JSON, as the workflow reads it.

        Raises:
            UsageError: the JSON does not validate as the agent's `ctx_type`; the message names the agent
                and each validation error.
        """
        try:
            return self.ctx_adapter.validate_python(value)
        except ValidationError as wrong:
            raise UsageError(self._refused(wrong)) from None

    def _refused(self, wrong: ValidationError) -> str:
        """The words of a ctx refused by validation: the agent, the type, each error where it is."""
        errors = [f"{'.'.join(str(part) for part in e['loc']) or '(the ctx)'}: {e['msg']}" for e in wrong.errors()]
        return (
            f"the ctx of durable agent {self.name!r} does not validate as {_type_name(self.ctx_type)}: "
            f"{'; '.join(errors)}; start the run with a ctx of that type"
        )


def _type_name(kind: Any) -> str:
    return kind.__name__ if isinstance(kind, type) else repr(kind)
