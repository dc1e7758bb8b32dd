"""The keyword options of a run, written once: every loop entry point takes them as `**options`.

`ToolLoop`, `run_tool_loop_tiered`, `iter_tool_loop_tiered` take `LoopOptions`; the plain loop and its
stream take `RunOptions` (a plain run proposes nothing, so it takes no grants); `resume_tool_loop`
and `Journal.resume` take `ResumeOptions`. A new keyword of a run is a new key here, and each entry
point, its typing (mypy and pyright read `**options: Unpack[...]` as these keyword-only parameters)
and its API page (mkdocstrings expands them) have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from pydantic import BaseModel
from typing_extensions import TypedDict
from typing_extensions import TypeVar as DefaultedTypeVar

if TYPE_CHECKING:
    from agentkit._context import Summarizer
    from agentkit._degeneration import SameFunc
    from agentkit._grants import Grants
    from agentkit._observe import ObserverArg

__all__ = ["LoopOptions", "ResumeOptions", "RunOptions"]

Args = TypeVar("Args", bound=BaseModel)
Answer = DefaultedTypeVar("Answer", default=None)


class RunOptions(TypedDict, Generic[Args, Answer], total=False):
    """The keyword options of every run, each optional."""

    same: SameFunc[Args] | None
    """Degeneration comparator: whether two calls are materially the same; default compares args by value."""
    observer: ObserverArg
    """One observer, several, or none."""
    answer: type[Answer] | None
    """The type of the final answer (a pydantic model, say): the done step then carries it, validated, as
    `result.answer`. A run whose tools stop at the round ceiling, the budget or a stalemate gets one closing
    round that asks for it (`LoopConfig.closing_round`)."""


class LoopOptions(RunOptions[Args, Answer], total=False):
    """The keyword options of a tiered run: a plain run's, and standing grants."""

    grants: Grants | None
    """Standing grants (an `agentkit.decisions.Grants`): a proposal a live grant matches is approved by it
    (recorded as `grant:<id>`, one use counted) and runs once, in the round that proposed it; the executor
    sees its result. A call no live grant matches is proposed as usual."""


class ResumeOptions(LoopOptions[Args, Answer], total=False):
    """The keyword options of a resumed run: a tiered run's, given again, and its summarizer.

    A function cannot be stored in a run's state (its `module.qualname` is): `same` and `summarize` are
    required exactly when the run had one, and of the same name; `answer` is the run's answer type, given
    again.
    """

    summarize: Summarizer | None
    """The run's `ContextWindow.summarize`, given again (its bounds and its running summary are in the
    state)."""
