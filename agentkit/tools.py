"""Tools: the ``Tool`` protocol, the ``@tool`` decorator, and validation of a set of tools."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel

from agentkit.errors import UsageError
from agentkit.step import VALID_NAME
from agentkit.tiers import Tier, tier_choices

__all__ = ["FunctionTool", "Tool", "declared_tier", "tool", "tool_set", "validate_tool_names"]

Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

RESERVED_NAMES = frozenset({"done", "call", "rationale", "tool", "args"})


class Tool(Protocol[Args, R_co]):
    """A named operation the loop runs for the executor; one call returns a batch.

    ``tier`` must be a ``Tier``: a tool without one is never called.
    """

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``^[a-zA-Z0-9_-]{1,64}$``)."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def args_type(self) -> type[Args]:
        """The pydantic model of the tool's arguments."""
        ...

    @property
    def tier(self) -> Tier:
        """How reversible the tool's effect is."""
        ...

    async def call(self, args: Args) -> Sequence[R_co]:
        """Run the tool; raise ``ToolRetry`` when the call itself was wrong."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionTool(Generic[Args, R]):
    """A ``Tool`` made from a typed function by ``@tool``."""

    name: str
    description: str
    args_type: type[Args]
    tier: Tier
    fn: Callable[[Args], Sequence[R]] | Callable[[Args], Awaitable[Sequence[R]]]
    """The decorated function."""
    in_thread: bool = False
    """Run a sync function in one of agentkit's threads for blocking tools (for blocking I/O; at most
    ``TOOL_THREADS``, 32, at once in a process, see ``docs/concepts.md``)."""

    async def call(self, args: Args) -> Sequence[R]:
        """Run the function with ``args``."""
        if self.in_thread:
            # Kept off `import agentkit` (asyncio costs more than the rest). Agentkit's own bounded threads,
            # not the default executor: a call that timed out keeps its thread until it returns.
            from agentkit._tool_threads import run_in_tool_thread

            result: Any = await run_in_tool_thread(self.fn, args, name=self.name)
        else:
            result = self.fn(args)
        if inspect.isawaitable(result):
            result = await result
        return typing.cast("Sequence[R]", result)


class _ToolDecorator:
    def __init__(self, tier: Tier, name: str | None, description: str | None, in_thread: bool) -> None:
        self._tier = tier
        self._name = name
        self._description = description
        self._in_thread = in_thread

    @overload
    def __call__(self, fn: Callable[[Args], Awaitable[Sequence[R]]]) -> FunctionTool[Args, R]: ...
    @overload
    def __call__(self, fn: Callable[[Args], Sequence[R]]) -> FunctionTool[Args, R]: ...
    def __call__(self, fn: Callable[[Args], Any]) -> FunctionTool[Args, Any]:
        name = self._name or fn.__name__
        return FunctionTool(
            name=name,
            description=self._description or inspect.cleandoc(fn.__doc__ or "") or name,
            args_type=args_type_of(fn),
            tier=self._tier,
            fn=fn,
            in_thread=self._in_thread,
        )


def tool(
    *,
    tier: Tier,
    name: str | None = None,
    description: str | None = None,
    in_thread: bool = False,
) -> _ToolDecorator:
    """Turn a typed function ``(args: Args) -> Sequence[R]`` (sync or async) into a ``Tool``.

    The name comes from the function, the description from its docstring, the arguments' type
    from its first parameter's annotation (a pydantic model). ``tier`` is required: there is no
    default tier.

    Example:
        >>> @tool(tier=Tier.READ_ONLY)
        ... def search(args: SearchArgs) -> list[Doc]:
        ...     '''Search the corpus.'''
    """
    if not isinstance(tier, Tier):
        raise UsageError(f"@tool(tier=...) needs a Tier, got {tier!r}; choose one of {tier_choices()}")
    return _ToolDecorator(tier, name, description, in_thread)


def args_type_of(fn: Callable[..., Any], decorator: str = "@tool") -> type[Any]:
    """The pydantic model a tool function's first parameter is annotated with.

    Raises:
        UsageError: the function has no annotated parameter, or its annotation is not a pydantic model.
    """
    name = getattr(fn, "__name__", repr(fn))
    params = list(inspect.signature(fn).parameters.values())
    hints = typing.get_type_hints(fn)
    if not params or params[0].name not in hints:
        raise UsageError(f"{decorator} function {name!r} needs one annotated parameter, (args: YourArgsModel)")
    annotation = hints[params[0].name]
    if not (inspect.isclass(annotation) and issubclass(annotation, BaseModel)):
        raise UsageError(
            f"{decorator} function {name!r}: its parameter must be annotated with a pydantic model, got {annotation!r}"
        )
    return annotation


def tool_set(*tools: Tool[Any, R]) -> tuple[Tool[Any, R], ...]:
    """Group tools with different argument types into one typed set.

    A plain list of such tools kept in a variable is inferred by mypy as ``list[object]``; this
    keeps the result type: ``tool_set(search, delete)`` is a set of tools returning ``Doc``.
    """
    return tools


def declared_tier(candidate: object) -> Tier | None:
    """The tool's tier if it declares a real ``Tier``; ``None`` when it is missing or not a ``Tier``."""
    tier = getattr(candidate, "tier", None)
    return tier if isinstance(tier, Tier) else None


def check_name(name: object, what: str = "tool") -> str:
    """``name`` if it is a valid tool name (``VALID_NAME``: what the model can call).

    Raises:
        UsageError: naming the problem and the fix.
    """
    if not isinstance(name, str) or not name:
        raise UsageError(f"{what} {name!r} has an empty name; give it a name matching {VALID_NAME.pattern}")
    if not VALID_NAME.match(name):
        raise UsageError(f"{what} name {name!r} is not valid for the model; use letters, digits, '_' or '-' (1-64)")
    return name


def lossy_fields(args_type: type[BaseModel], _seen: frozenset[type[BaseModel]] = frozenset()) -> list[str]:
    """The fields (dotted, nested models included) that a dump of ``args_type`` leaves out.

    A proposal's digest covers the args' dump: a field excluded from it (``Field(exclude=True)``)
    could differ between the call a human approved and the call that runs.
    """
    found: list[str] = []
    for name, info in args_type.model_fields.items():
        if info.exclude:
            found.append(name)
            continue
        for nested in _models_in(info.annotation):
            if nested not in _seen:
                found += [f"{name}.{inner}" for inner in lossy_fields(nested, _seen | {args_type})]
    return found


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in _models_in(argument)]


def check_args_type(name: str, args_type: type[BaseModel]) -> None:
    """Refuse an args type whose dump leaves a field out (the digest would not cover the whole call).

    Raises:
        UsageError: naming the tool, the type and the fields.
    """
    lossy = lossy_fields(args_type)
    if lossy:
        raise UsageError(
            f"tool {name!r}: {args_type.__name__} leaves {lossy} out of its dump (Field(exclude=True)), so an "
            "approval could not cover the whole call; remove exclude=True from the args type"
        )


def validate_tool_names(tools: Sequence[Tool[Any, Any]]) -> None:
    """Refuse empty, malformed, reserved or duplicate names, and a missing ``args_type``.

    Raises:
        UsageError: naming the tool and the fix.
    """
    if not tools:
        raise UsageError("no tools given; pass one Tool or a non-empty sequence of tools")
    seen: set[str] = set()
    for candidate in tools:
        name = check_name(getattr(candidate, "name", None) or candidate)
        if name in RESERVED_NAMES:
            raise UsageError(
                f"tool name {name!r} collides with a step field; rename it (reserved: {sorted(RESERVED_NAMES)})"
            )
        if name in seen:
            raise UsageError(f"two tools are named {name!r}; tool names must be unique in a set")
        seen.add(name)
        args_type = getattr(candidate, "args_type", None)
        if not (isinstance(args_type, type) and issubclass(args_type, BaseModel)):
            raise UsageError(f"tool {name!r} has no pydantic args_type; got {args_type!r}")
        check_args_type(name, args_type)
