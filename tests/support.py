"""What many test modules share: small args and item models, a recording tool, and an executor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from agentkit import Prompt, RoleSpec, RunCheckpoint, Tier, ToolRoundInfo
from agentkit.decisions import Equals, Grant, Range

R = TypeVar("R")


class Query(BaseModel):
    query: str


class PathArgs(BaseModel):
    path: str


class Doc(BaseModel):
    id: str


class Executor(Generic[R]):
    """A minimal tool-loop executor: names its model, renders ``"{ctx} round {n}"``, records each round."""

    def __init__(
        self, model: str = "m", *, fallback_model: str | None = None, prompt_type: str = "", system: str = "s"
    ) -> None:
        self.spec = RoleSpec(model=model, fallback_model=fallback_model, prompt_type=prompt_type)
        self.system = system
        self.infos: list[ToolRoundInfo[R]] = []
        """What the executor was shown, one entry per round."""

    def role(self) -> RoleSpec:
        return self.spec

    def render(self, ctx: object, info: ToolRoundInfo[R]) -> Prompt:
        self.infos.append(info)
        return Prompt(system=self.system, dynamic=f"{ctx} round {info.round}")


class Recording:
    """A tool with a settable tier that records every call it receives."""

    def __init__(self, name: str, tier: Any, args_type: type[BaseModel] = Query) -> None:
        self.name = name
        self.description = f"the {name} tool"
        self.args_type = args_type
        self.tier = tier
        self.calls: list[BaseModel] = []

    async def call(self, args: BaseModel) -> Sequence[Doc]:
        self.calls.append(args)
        return [Doc(id=f"{self.name}:{len(self.calls)}")]


def rechained(
    checkpoint: RunCheckpoint, *, entry: int | None = None, version: int | None = None, **changes: object
) -> RunCheckpoint:
    """``checkpoint`` with one entry's fields changed (or its ``version``), its digests chained afresh: a
    state a hand edit made to look intact (only a check other than the digests can refuse it)."""
    state = RunCheckpoint.start(
        checkpoint.run_id, checkpoint.config, checkpoint.tools, parent=checkpoint.parent, forked_at=checkpoint.forked_at
    )
    if version is not None:
        state = state._with(version=version)
        state = state._with(digest=state.head_digest())
    for index, kept in enumerate(checkpoint.entries):
        state = state.appended(kept.model_copy(update=changes) if index == entry else kept)
    return state


class Transfer(BaseModel):
    """Args with several fields of several kinds, for amending a call."""

    account: str
    amount: int = Field(ge=0)
    memo: str = ""


class Payments:
    """An irreversible transfer tool that counts its calls (tool-side)."""

    name = "transfer"
    description = "move money"
    tier = Tier.IRREVERSIBLE
    args_type = Transfer

    def __init__(self) -> None:
        self.calls: list[Transfer] = []

    async def call(self, args: Transfer) -> Sequence[Doc]:
        self.calls.append(args)
        return [Doc(id=f"paid {args.amount} to {args.account}")]


def small_payments(**changes: Any) -> Grant:
    """A grant of ``Payments`` calls to acme of at most 50 (two uses unless ``changes`` say otherwise)."""
    fields: dict[str, Any] = {
        "tool_name": "transfer",
        "where": {"account": Equals(value="acme"), "amount": Range(max=50)},
        "max_uses": 2,
        "granted_by": "ops",
        "reason": "small payments to acme",
        "allow_irreversible": True,
    }
    return Grant(**(fields | changes))
