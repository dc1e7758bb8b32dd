"""`agentkit._copy.owned`: each audience's copy of a model is its own, made cheaply where nothing can change."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from agentkit import LoopConfig, Outcome, StopReason, Tier, run_tool_loop, tool
from agentkit._copy import owned
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, Query


class Flat(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str
    count: int = 0
    score: float | None = None
    _note: str = PrivateAttr(default="")


class Nested(BaseModel):
    tags: list[str]


class CopiesItsOwnWay(BaseModel):
    text: str

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> CopiesItsOwnWay:
        return CopiesItsOwnWay(text=f"{self.text} (deep)")


def test_a_copy_of_a_flat_model_shares_nothing_that_can_change() -> None:
    """Fields, extras and private attributes set on the copy leave the original as it was."""
    original = Flat.model_validate({"text": "a", "count": 1, "score": 0.5, "extra_field": "x"})
    original._note = "kept"
    mine = owned(original)
    assert mine == original
    assert mine is not original
    mine.text, mine.count, mine._note = "b", 2, "changed"
    setattr(mine, "extra_field", "y")  # noqa: B010  # an extra: not a declared attribute
    assert (original.text, original.count, original._note) == ("a", 1, "kept")
    assert original.model_extra == {"extra_field": "x"}


def test_a_model_holding_anything_mutable_is_copied_deep() -> None:
    """A list field (or a mutable extra) makes the copy deep: editing it in place leaves the original alone."""
    original = Nested(tags=["a"])
    mine = owned(original)
    mine.tags.append("b")
    assert original.tags == ["a"]
    with_extra = Flat.model_validate({"text": "a", "extra_field": ["x"]})
    theirs = owned(with_extra)
    assert theirs.model_extra is not None
    theirs.model_extra["extra_field"].append("y")
    assert with_extra.model_extra == {"extra_field": ["x"]}


def test_a_model_with_its_own_deepcopy_is_copied_its_own_way() -> None:
    assert owned(CopiesItsOwnWay(text="a")).text == copy.deepcopy(CopiesItsOwnWay(text="a")).text == "a (deep)"


@tool(tier=Tier.READ_ONLY)
def renaming(args: Query) -> list[Doc]:
    """Looks up a document, and (rudely) sets a field of the arguments it was given."""
    found = [Doc(id=args.query)]
    args.query = "MUTATED"
    return found


async def test_a_tool_setting_a_field_of_its_args_changes_neither_the_trace_nor_the_repeat_guard() -> None:
    """The tool's copy of flat args is its own too: the trace records what the model asked, and a repeat is
    still a repeat."""
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), renaming, "ctx", LoopConfig(max_rounds=5))
    assert result.trace[0].call == Query(query="a")
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert [doc.id for doc in result.items] == ["a"]
