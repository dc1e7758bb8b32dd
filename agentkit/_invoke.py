"""The one place a tool call is admitted and run.

Every path that runs a tool goes through here: the tool loop, program gating (`apply_plan`),
approval (`execute_approved`), the journal's `execute` and the Temporal tool activity. So a
condition raises the same error whichever path meets it, and a tool's timeout, `ToolRetry`,
batch check and failure are handled once.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from agentkit._copy import owned
from agentkit._tiers import Tier, tier_choices
from agentkit._tools import NO_CTX, AnyTool, ContextTool, Tool, check_args_type, declared_tier, takes_ctx
from agentkit.errors import (
    CallRefused,
    MissingTierError,
    ReplayDiverged,
    TierChanged,
    ToolError,
    ToolRetry,
    ToolTimeout,
    UsageError,
)

R = TypeVar("R")


def check_ctx(tool: AnyTool, ctx: object) -> None:
    """Refuse, before anything runs, a tool that takes the run's ctx when no ctx was given.

    Raises:
        UsageError: naming the tool and the fix.
    """
    if ctx is NO_CTX and takes_ctx(tool):
        raise UsageError(
            f"tool {getattr(tool, 'name', tool)!r} takes the run's ctx and none was given; nothing ran. "
            "Pass ctx=... (the object the run had, or one built for this call)"
        )


def missing_tier(name: str) -> MissingTierError:
    """The one error for a tool that declares no tier."""
    return MissingTierError(f"tool {name!r} declares no tier; choose one of {tier_choices()}", tool_name=name)


def admit(tool: AnyTool, *, name: str | None = None, tier: Tier | None = None) -> Tier:
    """The tool's declared tier, once the tool is shown to be the one a call may run on.

    The tier is read from the tool now, never cached, so nothing set on the tool after wiring can
    slip a call past a check.

    Args:
        tool: The tool about to run.
        name: The tool name the call was made (proposed, approved) for, when there is one.
        tier: The tier the call was proposed and approved at, when there is one.

    Raises:
        UsageError: `tool` is not the tool named `name`, or its args type leaves a field out of
            its dump (wiring mistakes).
        MissingTierError: the tool declares no tier.
        TierChanged: the tool's tier is no longer `tier`.
    """
    actual = getattr(tool, "name", None)
    if name is not None and actual != name:
        raise UsageError(f"the call is for tool {name!r}, not {actual!r}; pass the tool named {name!r}")
    declared = declared_tier(tool)
    if declared is None:
        raise missing_tier(str(actual))
    args_type = getattr(tool, "args_type", None)
    if isinstance(args_type, type) and issubclass(args_type, BaseModel):
        check_args_type(str(actual), args_type)
    if tier is not None and declared is not tier:
        raise TierChanged(
            f"tool {actual!r} now declares Tier.{declared.name} but its call was approved at Tier.{tier.name}; "
            "nothing ran. Propose the call again so that it is approved at the tool's current tier",
            tool_name=str(actual),
        )
    return declared


def refused(tool_name: str, why: str) -> CallRefused:
    """A call refused before its tool ran, for a reason of the caller's."""
    return CallRefused(f"call to {tool_name!r} refused, nothing ran: {why}", tool_name=tool_name)


def describe(raised: BaseException) -> str:
    """`Type: message` for an exception, even one whose `__str__` itself raises."""
    try:
        text = str(raised)
    except Exception as broken:  # a hostile or buggy __str__ must not take the run down with it
        text = f"<str() of the exception raised {type(broken).__name__}>"
    return f"{type(raised).__name__}: {text}" if text else type(raised).__name__


@dataclass(frozen=True, kw_only=True, slots=True)
class Invocation(Generic[R]):
    """What came of one tool call."""

    tool_name: str
    """The tool called."""
    batch: Sequence[R] = ()
    """The batch exactly as the tool returned it (empty unless it ran and succeeded)."""
    observation: str | None = None
    """The `ToolRetry` message: the tool said the call itself was wrong."""
    error: ToolError | None = None
    """The tool raised, returned something other than a batch, or timed out."""
    seconds: float = 0.0
    """How long the call took."""

    @property
    def ran(self) -> bool:
        """The tool ran and returned a batch."""
        return self.error is None and self.observation is None

    def failure(self) -> ToolError | None:
        """The outcome as an error where no next round can hear an observation (approval, journal)."""
        if self.observation is not None and self.error is None:
            message = f"tool {self.tool_name!r} refused the call: {self.observation}"
            return ToolError(message, tool_name=self.tool_name)
        return self.error


class Relayed(Exception):
    """Raised by a stand-in tool whose call ran elsewhere, through `invoke` there (a Temporal tool
    activity): `invoke` returns that call's `error` as it is, not as a failure of the stand-in."""

    def __init__(self, error: ToolError) -> None:
        super().__init__(str(error))
        self.error = error


async def invoke(  # the loop's deadline arithmetic lives with the caller
    tool: Tool[Any, R] | ContextTool[Any, R, Any],
    args: BaseModel,
    *,
    ctx: object = NO_CTX,
    limit: float | None = None,
    around: Callable[[Awaitable[Sequence[R]]], Awaitable[Sequence[R]]] | None = None,
) -> Invocation[R]:
    """Run one admitted call within `limit` seconds (`None`: no limit).

    A tool that takes the run's ctx is called with `ctx` itself (the very object: it carries the
    run's clients and caches); callers check first with `check_ctx` that there is one.

    The tool gets its own deep copy of `args`: whatever it does to them, the call the model made
    (and a human approved) stays as it was in traces, proposals and the repeat guard. Nothing the
    tool raises escapes, except cancellation. `around` wraps the tool's own awaitable (the
    observers' contexts), so what the tool does runs inside them and its exceptions pass through.
    """
    from agentkit._timing import timeout_scope  # asyncio is loaded on first use, not at import

    check_ctx(tool, ctx)
    name = tool.name
    started = time.monotonic()
    expired: list[ToolTimeout] = []

    async def timed() -> object:
        # The timeout is inside the observers' contexts, so what they see end the call is the call's own
        # error: a ToolTimeout, not the cancellation the timer uses to stop the tool.
        try:
            async with timeout_scope(limit) as scope:
                own = owned(args)
                result = await (tool.call(own, ctx) if takes_ctx(tool) else typing.cast("Tool[Any, R]", tool).call(own))
        except TimeoutError:
            if not scope.expired():
                raise  # a TimeoutError the tool raised (a socket's) is its own failure
            expired.append(_timed_out(name, limit))
            raise expired[-1] from None
        if limit is not None and time.monotonic() - started > limit:
            # A sync tool holds the event loop, so the timer could not interrupt it: its late result
            # is discarded all the same.
            expired.append(_timed_out(name, limit))
            raise expired[-1]
        return result

    try:
        work = typing.cast("Awaitable[Sequence[R]]", timed())
        batch: object = await (around(work) if around is not None else work)
    except ToolRetry as retry:
        return Invocation(tool_name=name, observation=_message_of(retry), seconds=time.monotonic() - started)
    except ReplayDiverged:
        raise  # a replayed tool was called as the recording never was: the replay's wiring, not the tool, failed
    except Relayed as relayed:
        return Invocation(tool_name=name, error=relayed.error, seconds=time.monotonic() - started)
    except ToolTimeout as timed_out:
        error = timed_out if expired and timed_out is expired[-1] else _failed(name, timed_out)
        return Invocation(tool_name=name, error=error, seconds=time.monotonic() - started)
    except Exception as raised:
        return Invocation(tool_name=name, error=_failed(name, raised), seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    if not isinstance(batch, Sequence) or isinstance(batch, str | bytes):
        wrong = TypeError(f"returned {type(batch).__name__}; a tool returns a sequence (a batch) of items")
        return Invocation(tool_name=name, error=_failed(name, wrong), seconds=seconds)
    return Invocation(tool_name=name, batch=typing.cast("Sequence[R]", batch), seconds=seconds)


def _message_of(retry: ToolRetry) -> str:
    message = getattr(retry, "message", None)
    return message if isinstance(message, str) else describe(retry)


def _timed_out(name: str, limit: float | None) -> ToolTimeout:
    return ToolTimeout(f"tool {name!r} timed out after {limit}s", tool_name=name)


def _failed(name: str, raised: BaseException) -> ToolError:
    error = ToolError(f"tool {name!r} failed: {describe(raised)}", tool_name=name)
    error.__cause__ = raised
    return error
