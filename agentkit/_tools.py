"""Tools: the `Tool` protocol, the `@tool` decorator, and validation of a set of tools.

A tool may also take the run's `ctx` as a second parameter (a `ContextTool`): per-run
clients, caches and source lists then reach it without a closure. The loops type-check that its
ctx type fits the run's; a tool without one fits any run.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeGuard, TypeVar, overload

from pydantic import BaseModel

from agentkit._step import VALID_NAME
from agentkit._tiers import Tier, tier_choices
from agentkit._trust import Trust, check_declarations
from agentkit.errors import UsageError

__all__ = [
    "ContextFunctionTool",
    "ContextTool",
    "FunctionTool",
    "NO_CTX",
    "NoCtx",
    "Tool",
    "declared_tier",
    "takes_ctx",
    "tool",
    "tool_set",
    "validate_tool_names",
]

Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Ctx = TypeVar("Ctx")
Ctx_contra = TypeVar("Ctx_contra", contravariant=True)

RESERVED_NAMES = frozenset({"done", "call", "rationale", "tool", "args"})


class Tool(Protocol[Args, R_co]):
    """A named operation the loop runs for the executor; one call returns a batch.

    `tier` must be a `Tier`: a tool without one is never called.
    """

    @property
    def name(self) -> str:
        """The name the model calls the tool by (`^[a-zA-Z0-9_-]{1,64}$`)."""
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
        """Run the tool; raise `ToolRetry` when the call itself was wrong."""
        ...


class ContextTool(Protocol[Args, R_co, Ctx_contra]):
    """A `Tool` that also gets the run's `ctx`: the object the loop was given and renders with.

    Typed: a loop over `ctx: C` takes a `ContextTool[Args, R, C]` (or one whose ctx type is a
    supertype of `C`, a protocol `C` satisfies, say); any other ctx type is a type error. Outside
    a loop (`execute_approved`, `apply_plan`, a journal's `execute` and `work`) the ctx is
    passed as `ctx=`; without it the call is refused with a `UsageError` before anything runs.
    """

    @property
    def name(self) -> str:
        """The name the model calls the tool by (`^[a-zA-Z0-9_-]{1,64}$`)."""
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

    @property
    def takes_ctx(self) -> Literal[True]:
        """Marks the tool as one that is called with the run's ctx."""
        ...

    async def call(self, args: Args, ctx: Ctx_contra, /) -> Sequence[R_co]:
        """Run the tool with the run's `ctx` (the very object, not a copy); raise `ToolRetry` when
        the call itself was wrong."""
        ...


@typing.final
class NoCtx:
    """The type of `NO_CTX`: no ctx was given (`None` may be a run's ctx, so it cannot mean "none")."""

    def __repr__(self) -> str:
        return "NO_CTX"


NO_CTX: typing.Final = NoCtx()
"""The default of `ctx=` outside a loop; a tool that takes the ctx refuses to run with it."""


AnyTool: TypeAlias = "Tool[Any, Any] | ContextTool[Any, Any, Any]"
"""Either kind of tool, where only what they share is used (name, tier, args type)."""


def takes_ctx(candidate: object) -> TypeGuard[ContextTool[Any, Any, Any]]:
    """Whether `candidate` is a tool that is called with the run's ctx (its `takes_ctx` is `True`)."""
    return getattr(candidate, "takes_ctx", False) is True


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionTool(Generic[Args, R]):
    """A `Tool` made from a typed function by `@tool`."""

    name: str
    description: str
    args_type: type[Args]
    tier: Tier
    trust: Trust = Trust.TRUSTED
    """What its results are: the user's own data, or text a third party can write (see `ProvenancePolicy`)."""
    egress: bool = False
    """It sends data out (an email, an HTTP request, a post, a share, an invite)."""
    result_type: object = None
    """The type of one item it returns, where the function's return annotation does not say it (`None`: read
    from the annotation)."""
    fn: Callable[[Args], Sequence[R]] | Callable[[Args], Awaitable[Sequence[R]]]
    """The decorated function."""
    in_thread: bool = False
    """Run a sync function in one of agentkit's threads for blocking tools (for blocking I/O; at most
    `TOOL_THREADS`, 32, at once in a process, see `docs/concepts.md`)."""

    def __post_init__(self) -> None:
        if wants_ctx(self.fn):
            raise UsageError(
                f"tool {self.name!r}: its function takes a second parameter (the run's ctx), which a FunctionTool "
                "never passes; make it with @tool or ContextFunctionTool(...)"
            )

    async def call(self, args: Args) -> Sequence[R]:
        """Run the function with `args`."""
        return typing.cast("Sequence[R]", await _run(self.fn, args, in_thread=self.in_thread, name=self.name))


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextFunctionTool(Generic[Args, R, Ctx]):
    """A `ContextTool` made by `@tool` from a typed function `(args: Args, ctx: Ctx) -> Sequence[R]`."""

    name: str
    description: str
    args_type: type[Args]
    tier: Tier
    trust: Trust = Trust.TRUSTED
    """What its results are: the user's own data, or text a third party can write (see `ProvenancePolicy`)."""
    egress: bool = False
    """It sends data out (an email, an HTTP request, a post, a share, an invite)."""
    result_type: object = None
    """The type of one item it returns, where the function's return annotation does not say it (`None`: read
    from the annotation)."""
    fn: Callable[[Args, Ctx], Sequence[R]] | Callable[[Args, Ctx], Awaitable[Sequence[R]]]
    """The decorated function."""
    in_thread: bool = False
    """Run a sync function in one of agentkit's threads for blocking tools (see `FunctionTool`)."""

    @property
    def takes_ctx(self) -> Literal[True]:
        """Always `True`: the loop calls it with the run's ctx."""
        return True

    async def call(self, args: Args, ctx: Ctx, /) -> Sequence[R]:
        """Run the function with `args` and the run's `ctx`."""
        fn = self.fn
        result = await _run(lambda given: fn(given, ctx), args, in_thread=self.in_thread, name=self.name)
        return typing.cast("Sequence[R]", result)


async def _run(fn: Callable[[Any], Any], args: BaseModel, *, in_thread: bool, name: str) -> Any:
    """`fn(args)`, in a thread for blocking tools when asked, awaited when it returns an awaitable."""
    if in_thread:
        # Kept off `import agentkit` (asyncio costs more than the rest). Agentkit's own bounded threads,
        # not the default executor: a call that timed out keeps its thread until it returns.
        from agentkit._tool_threads import run_in_tool_thread

        result: Any = await run_in_tool_thread(fn, args, name=name)
    else:
        result = fn(args)
    if inspect.isawaitable(result):
        result = await result
    return result


@dataclass(frozen=True, kw_only=True, slots=True)
class _ToolDecorator:
    tier: Tier
    name: str | None
    description: str | None
    in_thread: bool
    trust: Trust
    egress: bool
    args_type: type[BaseModel] | None
    result_type: object

    # A function that can be called with the args alone is a plain tool (a second parameter with a
    # default stays the function's own); one whose second parameter has no default takes the ctx.
    @overload
    def __call__(self, fn: Callable[[Args], Awaitable[Sequence[R]]]) -> FunctionTool[Args, R]: ...
    @overload
    def __call__(self, fn: Callable[[Args], Sequence[R]]) -> FunctionTool[Args, R]: ...
    @overload
    def __call__(self, fn: Callable[[Args, Ctx], Awaitable[Sequence[R]]]) -> ContextFunctionTool[Args, R, Ctx]: ...
    @overload
    def __call__(self, fn: Callable[[Args, Ctx], Sequence[R]]) -> ContextFunctionTool[Args, R, Ctx]: ...
    def __call__(self, fn: Callable[..., Any]) -> FunctionTool[Any, Any] | ContextFunctionTool[Any, Any, Any]:
        name = self.name or getattr(fn, "__name__", None) or repr(fn)
        description = self.description or inspect.cleandoc(getattr(fn, "__doc__", None) or "") or name
        args_type = args_type_of(fn, given=self.args_type)
        made = ContextFunctionTool if wants_ctx(fn) else FunctionTool
        return made(
            name=name,
            description=description,
            args_type=args_type,
            tier=self.tier,
            fn=fn,
            in_thread=self.in_thread,
            trust=self.trust,
            egress=self.egress,
            result_type=self.result_type,
        )


def tool(
    *,
    tier: Tier,
    name: str | None = None,
    description: str | None = None,
    in_thread: bool = False,
    trust: Trust = Trust.TRUSTED,
    egress: bool = False,
    args_type: type[BaseModel] | None = None,
    result_type: object = None,
) -> _ToolDecorator:
    """Turn a typed function `(args: Args) -> Sequence[R]` (sync or async) into a `Tool`.

    The name comes from the function, the description from its docstring, the arguments' type
    from its first parameter's annotation (a pydantic model). `tier` is required: there is no
    default tier.

    `trust` says what its results are (`Trust.UNTRUSTED`: anything a third party can write, such as a
    web page, an email or a message) and `egress` whether it sends data out; once an untrusted result
    has entered a run, `LoopConfig.provenance` lowers what still runs live (see docs/provenance.md).

    `args_type` and `result_type` give the arguments' model and the item type where the function's
    annotations do not (a function made at run time, a third party's function wrapped as it is); an
    annotation that disagrees with `args_type` is a `UsageError`.

    A function `(args: Args, ctx: Ctx) -> Sequence[R]` (a second parameter without a default)
    becomes a `ContextTool`: each call gets the run's `ctx`, and a loop type-checks that `Ctx`
    fits its own.

    Example:
        >>> @tool(tier=Tier.READ_ONLY)
        ... def search(args: SearchArgs) -> list[Doc]:
        ...     '''Search the corpus.'''
        >>> @tool(tier=Tier.READ_ONLY)
        ... def lookup(args: SearchArgs, ctx: Clients) -> list[Doc]:
        ...     '''Search with this run's client.'''
    """
    if not isinstance(tier, Tier):
        raise UsageError(f"@tool(tier=...) needs a Tier, got {tier!r}; choose one of {tier_choices()}")
    check_declarations(trust, egress, "@tool")
    if args_type is not None and not (inspect.isclass(args_type) and issubclass(args_type, BaseModel)):
        raise UsageError(f"@tool(args_type=...) needs a pydantic model class, got {args_type!r}")
    return _ToolDecorator(
        tier=tier,
        name=name,
        description=description,
        in_thread=in_thread,
        trust=trust,
        egress=egress,
        args_type=args_type,
        result_type=result_type,
    )


def args_type_of(
    fn: Callable[..., Any], decorator: str = "@tool", *, given: type[BaseModel] | None = None
) -> type[Any]:
    """The pydantic model a tool function's first parameter is annotated with (or `given`, which an
    annotation, where there is one, must agree with).

    Raises:
        UsageError: the function has no annotated parameter and none is given, its annotation is not a
            pydantic model, or it is another model than `given`.
    """
    name = getattr(fn, "__name__", repr(fn))
    params = list(inspect.signature(fn).parameters.values())
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that cannot be resolved: only a given type can say it
        if given is None:
            raise
        hints = {}
    if given is not None:
        annotated = hints.get(params[0].name) if params else None
        if annotated is not None and annotated is not given:
            raise UsageError(
                f"{decorator} function {name!r}: its parameter is annotated {annotated!r} but args_type is "
                f"{given.__name__}; give one of them, or make them agree"
            )
        return given
    if not params or params[0].name not in hints:
        raise UsageError(
            f"{decorator} function {name!r} needs one annotated parameter, (args: YourArgsModel), or "
            "args_type=YourArgsModel"
        )
    annotation = hints[params[0].name]
    if not (inspect.isclass(annotation) and issubclass(annotation, BaseModel)):
        raise UsageError(
            f"{decorator} function {name!r}: its parameter must be annotated with a pydantic model, got {annotation!r}"
        )
    return annotation


def wants_ctx(fn: Callable[..., Any]) -> bool:
    """Whether a tool function takes the run's ctx: its second parameter is positional and has no default."""
    if isinstance(fn, types.FunctionType):  # the common case, read from the code object (inspect is ~50x slower)
        required = fn.__code__.co_argcount - len(fn.__defaults__ or ())
        return required >= 2
    try:
        params = list(inspect.signature(fn).parameters.values())[1:2]
    except (TypeError, ValueError):  # no signature to read (a builtin, say): called with the args alone
        return False
    return bool(params) and params[0].kind in _POSITIONAL and params[0].default is inspect.Parameter.empty


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@overload
def tool_set(*tools: Tool[Any, R]) -> tuple[Tool[Any, R], ...]: ...
@overload
def tool_set(
    *tools: Tool[Any, R] | ContextTool[Any, R, Ctx],
) -> tuple[Tool[Any, R] | ContextTool[Any, R, Ctx], ...]: ...
def tool_set(*tools: AnyTool) -> tuple[AnyTool, ...]:
    """Group tools with different argument types into one typed set.

    A plain list of such tools kept in a variable is inferred by mypy as `list[object]`; this
    keeps the result type: `tool_set(search, delete)` is a set of tools returning `Doc`. With
    tools that take the run's ctx, the set carries their ctx type too.
    """
    return tools


def declared_tier(candidate: object) -> Tier | None:
    """The tool's tier if it declares a real `Tier`; `None` when it is missing or not a `Tier`."""
    tier = getattr(candidate, "tier", None)
    return tier if isinstance(tier, Tier) else None


def check_name(name: object, what: str = "tool") -> str:
    """`name` if it is a valid tool name (`VALID_NAME`: what the model can call).

    Raises:
        UsageError: naming the problem and the fix.
    """
    if not isinstance(name, str) or not name:
        raise UsageError(f"{what} {name!r} has an empty name; give it a name of letters, digits, '_' or '-' (1-64)")
    if not VALID_NAME.fullmatch(name):
        raise UsageError(f"{what} name {name!r} is not valid for the model; use letters, digits, '_' or '-' (1-64)")
    return name


def lossy_fields(args_type: type[BaseModel], _seen: frozenset[type[BaseModel]] = frozenset()) -> list[str]:
    """The fields (dotted, nested models included) that a dump of `args_type` leaves out.

    A proposal's digest covers the args' dump: a field excluded from it (`Field(exclude=True)`)
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


def validate_tool_names(tools: Sequence[AnyTool]) -> None:
    """Refuse empty, malformed, reserved or duplicate names, and a missing `args_type`.

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
