"""ToolStep: validation and schema names valid for OpenAI."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from agentkit import ToolStep
from agentkit.step import ToolCall, build_step_model, schema_name

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class SearchArgs(BaseModel):
    query: str


class DeleteArgs(BaseModel):
    id: str


def test_not_done_without_call_is_invalid() -> None:
    """done=false with no call is a validation error whose text tells the model the fix."""
    with pytest.raises(ValidationError, match="must carry a call"):
        ToolStep[SearchArgs].model_validate({"done": False})


def test_done_without_call_is_valid() -> None:
    """done=true needs no call."""
    step = ToolStep[SearchArgs].model_validate({"done": True, "rationale": "enough"})
    assert step.done
    assert step.call is None


def test_call_is_validated_as_args_type() -> None:
    """The call is validated as the tool's args model."""
    step = ToolStep[SearchArgs].model_validate({"done": False, "call": {"query": "x"}})
    assert step.call == SearchArgs(query="x")
    with pytest.raises(ValidationError):
        ToolStep[SearchArgs].model_validate({"done": False, "call": {"q": "x"}})


def test_parametrised_schema_name_is_valid_for_openai() -> None:
    """ToolStep[Args]'s schema title is a valid OpenAI function name."""
    title = ToolStep[SearchArgs].model_json_schema()["title"]
    assert OPENAI_NAME.match(title)
    assert title == "ToolStep_SearchArgs"


def test_rationale_comes_before_done_in_schema() -> None:
    """Reasoning is emitted before the decision under constrained decoding."""
    assert list(ToolStep[SearchArgs].model_json_schema()["properties"]) == ["rationale", "done", "call"]


def test_multi_tool_step_is_discriminated_by_tool() -> None:
    """A set of tools gives a call shaped {"tool": name, "args": {...}}, validated per tool."""
    model = build_step_model((("search", SearchArgs), ("delete", DeleteArgs)))
    step = model.model_validate({"done": False, "call": {"tool": "delete", "args": {"id": "7"}}})
    assert isinstance(step.call, ToolCall)
    assert step.call.args == DeleteArgs(id="7")  # type: ignore[attr-defined]  # built at run time
    with pytest.raises(ValidationError):
        model.model_validate({"done": False, "call": {"tool": "delete", "args": {"query": "x"}}})
    with pytest.raises(ValidationError):
        model.model_validate({"done": False, "call": {"tool": "nope", "args": {}}})
    assert OPENAI_NAME.match(model.model_json_schema()["title"])


def test_single_tool_in_a_sequence_still_uses_the_tagged_shape() -> None:
    """A sequence of one tool uses the {"tool", "args"} wire shape."""
    model = build_step_model((("search", SearchArgs),))
    step = model.model_validate({"done": False, "call": {"tool": "search", "args": {"query": "x"}}})
    assert step.call.args == SearchArgs(query="x")  # type: ignore[union-attr]  # built at run time


def test_rationale_bound_appears_in_schema() -> None:
    """A rationale length bound becomes maxLength and is enforced."""
    model = build_step_model(SearchArgs, rationale_max_length=20)
    assert model.model_json_schema()["properties"]["rationale"]["maxLength"] == 20
    with pytest.raises(ValidationError):
        model.model_validate({"done": True, "rationale": "x" * 21})


def test_step_models_are_built_once() -> None:
    """The same tools give the same cached model, so no schema is rebuilt per round."""
    assert build_step_model(SearchArgs) is build_step_model(SearchArgs)
    pair = (("search", SearchArgs), ("delete", DeleteArgs))
    assert build_step_model(pair) is build_step_model(pair)


@given(st.text(min_size=0, max_size=200))
def test_schema_name_is_always_valid(raw: str) -> None:
    """Any raw name is turned into a valid OpenAI name."""
    assert OPENAI_NAME.match(schema_name(raw))


def test_long_names_stay_distinct() -> None:
    """Two long names sharing a prefix keep distinct schema names."""
    a, b = schema_name("X" * 80 + "a"), schema_name("X" * 80 + "b")
    assert a != b
    assert len(a) <= 64
