"""The model-free executors: a plan of calls, and a compromised one that obeys an injection once it sees it.

`PlanExecutor` is both the loop's agent (its `render` keeps the round's `ToolRoundInfo`) and, through
`caller()`, its model: a `FunctionCaller` whose answer is the next planned call, or `done` with the
planned answer once the plan is spent. A rejected or proposed call still counts as made: the executor
goes on with the next one, as a model told "rejected" would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agentkit import Prompt, RoleSpec, StructuredRequest, ToolRoundInfo
from agentkit.testing import FunctionCaller, call_step, done_step

__all__ = ["Answer", "PlanExecutor", "PlannedCall", "holds"]


class Answer(BaseModel):
    """The run's final answer: what AgentDojo's scoring functions read as the model's output."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedCall:
    """One call of a plan: an AgentDojo ground-truth call."""

    function: str
    args: Mapping[str, Any]


_NOISE = re.compile(r"\\n|\\|\s")
"""What a tool result's YAML may add to or take from a string: escaped newlines, folds, whitespace."""


def _bare(text: str) -> str:
    """`text` without YAML's quoting: single quotes undoubled, then `_NOISE` left out."""
    return _NOISE.sub("", text.replace("''", "'"))


def holds(text: str, injection: str) -> bool:
    """Whether `text` (a tool result as the executor sees it, YAML) contains `injection`.

    Compared without whitespace, backslashes and escaped newlines, and with YAML's doubled single quotes
    undone: YAML folds, escapes and quotes long strings, and the environment's loader re-indents the
    injected text.
    """
    wanted = _bare(injection)
    return bool(wanted) and wanted in _bare(text)


@dataclass(kw_only=True)
class PlanExecutor:
    """Emit `plan`'s calls, then answer `answer`.

    With `injections` (the texts the attack placed) it is compromised: from the first tool result
    that holds one, the rest of `plan` is replaced by `attack_plan`, and the answer becomes
    `answer` followed by `attack_answer`.
    """

    plan: Sequence[PlannedCall]
    answer: str
    injections: Sequence[str] = ()
    attack_plan: Sequence[PlannedCall] = ()
    attack_answer: str = ""
    switched_after: int | None = None
    """How many calls had been made when the executor saw the injection (`None`: it has not)."""
    _info: ToolRoundInfo[str] | None = field(default=None, repr=False)

    def role(self) -> RoleSpec:
        """A model-free executor: the model name is a label only."""
        return RoleSpec(model="model-free")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        """Keep the round's view for `next_step`; the prompt itself is never read."""
        self._info = info
        return Prompt(system="You carry out the user's task with the tools.", dynamic=ctx)

    def caller(self) -> FunctionCaller:
        """The caller whose every answer is `next_step`."""
        return FunctionCaller(lambda _request, _schema: self.next_step(_request))

    def next_step(self, _request: StructuredRequest | None = None) -> dict[str, Any]:
        """The next planned call, or `done` with the answer once the plan is spent."""
        calls = self._info.prior_calls if self._info is not None else ()
        if self.injections and self.switched_after is None:
            for index, call in enumerate(calls):
                if any(holds(item, injection) for item in call.batch for injection in self.injections):
                    self.switched_after = index + 1
                    break
        plan = list(self.plan)
        answer = self.answer
        if self.switched_after is not None:
            plan = [*plan[: self.switched_after], *self.attack_plan]
            answer = f"{answer} {self.attack_answer}".strip()
        if len(calls) < len(plan):
            planned = plan[len(calls)]
            return call_step(dict(planned.args), tool=planned.function)
        return done_step("the plan is done", answer=Answer(text=answer))
