"""McpArgs: an MCP tool's arguments checked against its input JSON schema, and the schema the model sees.

No server is needed here: the args model is built from a schema as ``McpConnection.tools`` builds
it from a listed tool (tests/mcp/test_mcp.py covers the listed ones).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from agentkit._proposals import call_digest, canonical_json
from agentkit._step import build_step_model
from agentkit.errors import UsageError
from agentkit.mcp import McpArgs
from agentkit.mcp._args import UnusableSchema, args_model
from agentkit.providers._strict import strict_schema

SEARCH = {
    "type": "object",
    "$defs": {
        "Filter": {
            "type": "object",
            "properties": {"prefix": {"type": "string"}, "depth": {"type": "integer", "default": 1}},
            "required": ["prefix"],
        }
    },
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "default": 5},
        "filter": {"anyOf": [{"$ref": "#/$defs/Filter"}, {"type": "null"}], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["query"],
}

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(
    query=st.text(min_size=1, max_size=10),
    limit=st.none() | st.integers(1, 100),
    tags=st.none() | st.lists(st.text(max_size=5), max_size=3),
    extra=st.dictionaries(st.text(min_size=1, max_size=5).filter(lambda k: k not in SEARCH["properties"]), json_values),
)
def test_valid_args_round_trip_through_json_with_the_same_digest(
    query: str, limit: int | None, tags: list[str] | None, extra: dict[str, Any]
) -> None:
    """What is validated is what is stored, reloaded, digested and sent: JSON round trips keep it exactly."""
    search = args_model("search", SEARCH)
    raw: dict[str, Any] = {**extra, "query": query, "limit": limit, "tags": tags}
    args = search.model_validate(raw)
    sent = args.root
    assert "limit" not in sent or sent["limit"] == limit
    assert all(value is not None for key, value in sent.items() if key in ("limit", "tags"))
    reloaded = search.model_validate_json(canonical_json(args))
    assert reloaded == args
    assert canonical_json(reloaded) == canonical_json(args)
    assert call_digest("search", reloaded) == call_digest("search", args)


def test_a_null_is_dropped_only_for_optional_properties_that_refuse_null() -> None:
    """null means "leave it out" for an optional property whose schema refuses null; a nullable one keeps it."""
    search = args_model("search", SEARCH)
    assert search.model_validate({"query": "q", "limit": None, "filter": None}).root == {"query": "q", "filter": None}
    with pytest.raises(ValidationError, match=r"query: None is not of type 'string'"):
        search.model_validate({"query": None})


def test_the_published_schema_inlines_refs_and_makes_optional_properties_nullable() -> None:
    """The model sees no $defs; required stays as the server said; optional properties accept null."""
    schema = args_model("search", SEARCH).model_json_schema()
    assert "$defs" not in json.dumps(schema)
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {
        "anyOf": [{"type": "integer", "minimum": 1, "default": 5}, {"type": "null"}],
        "default": None,
    }
    assert schema["properties"]["filter"]["anyOf"][0]["properties"]["prefix"] == {"type": "string"}


def test_the_step_schema_fits_openai_strict_mode() -> None:
    """The strict rewrite of a step over MCP args closes every object and requires every property."""
    step = build_step_model((("search", args_model("search", SEARCH)),))
    strict = strict_schema(step.model_json_schema(), "step")
    call = strict["properties"]["decision"]["anyOf"][1]["properties"]["call"]  # written in place: used once
    args = call["properties"]["args"]
    assert args["additionalProperties"] is False
    assert sorted(args["required"]) == ["filter", "limit", "query", "tags"]


def test_a_tool_without_properties_takes_an_empty_object() -> None:
    """``{"type": "object"}`` alone is published with no properties, so strict mode can close it."""
    none = args_model("ping", {"type": "object"})
    assert none.model_json_schema() == {"type": "object", "properties": {}}
    assert none.model_validate({}).root == {}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"n": {"type": "nope"}}}, r"not a valid JSON schema"),
        ({"type": "array"}, r"of type 'array'"),
        (
            {"type": "object", "$defs": {"N": {"properties": {"next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"},
            r"recursive",
        ),
        ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, r"refers outside itself"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, r"does not resolve"),
    ],
)
def test_unusable_schemas_are_refused(schema: dict[str, Any], message: str) -> None:
    """An invalid, non-object, recursive or unresolvable schema cannot be wired."""
    with pytest.raises(UnusableSchema, match=message):
        args_model("t", schema)


def test_args_must_be_a_json_object() -> None:
    """A list, or a value that is not JSON, is refused before the schema is consulted."""
    search = args_model("search", SEARCH)
    with pytest.raises(ValidationError, match=r"must be a JSON object, not list"):
        search.model_validate([1])
    with pytest.raises(ValidationError, match=r"not JSON"):
        search.model_validate({"query": object()})


def test_many_violations_are_listed_up_to_five() -> None:
    """The error names the first five violations by path and counts the rest."""
    wide = args_model(
        "wide", {"type": "object", "properties": {f"f{i}": {"type": "integer"} for i in range(7)}, "required": []}
    )
    with pytest.raises(ValidationError) as raised:
        wide.model_validate({f"f{i}": "x" for i in range(7)})
    text = str(raised.value)
    assert "f0: 'x' is not of type 'integer'" in text
    assert "(and 2 more)" in text


def test_the_base_class_holds_any_json_object() -> None:
    """McpArgs itself checks only that the arguments are a JSON object (a tool checks its own schema)."""
    assert McpArgs.model_validate({"a": [1, {"b": None}]}).root == {"a": [1, {"b": None}]}
    assert McpArgs.model_json_schema() == {"type": "object", "additionalProperties": True}


def test_the_same_schema_gives_the_same_args_type() -> None:
    """Wiring a tool again gives the same args class (so step models stay cached); a new schema gives a new one."""
    assert args_model("search", SEARCH) is args_model("search", dict(reversed(list(SEARCH.items()))))
    assert args_model("search", SEARCH) is not args_model("search", {**SEARCH, "required": []})
    assert args_model("search", SEARCH) is not args_model("find", SEARCH)


@pytest.mark.parametrize("name", ["default", "enum", "const", "examples", "$defs", "definitions", "$ref"])
def test_a_property_named_like_a_keyword_has_its_ref_inlined(name: str) -> None:
    """A property's name is a name, whatever it is: its `$ref` is inlined and the args type validates and shows it."""
    schema = {
        "type": "object",
        "properties": {name: {"$ref": "#/$defs/Word"}},
        "required": [name],
        "$defs": {"Word": {"type": "string", "pattern": "^[a-z]+$"}},
    }
    named = args_model(f"t_{name}", schema)
    assert named.model_json_schema() == {
        "type": "object",
        "properties": {name: {"type": "string", "pattern": "^[a-z]+$"}},
        "required": [name],
    }
    assert named.model_validate({name: "abc"}).root == {name: "abc"}
    with pytest.raises(ValidationError, match=r"does not match"):
        named.model_validate({name: "ABC"})


def test_refs_under_pattern_properties_and_nested_defs_are_inlined() -> None:
    """Every schema map is walked (patternProperties too), and no `$defs` is left anywhere to hold a dangling `$ref`."""
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "object", "patternProperties": {"^enum$": {"$ref": "#/$defs/N"}}}},
        "patternProperties": {"^x-": {"$ref": "#/$defs/N"}},
        "$defs": {"N": {"type": "integer", "$defs": {"M": {"$ref": "#/$defs/N"}}}},
    }
    published = json.dumps(args_model("maps", schema).model_json_schema())
    assert "$ref" not in published
    assert "$defs" not in published
    assert args_model("maps", schema).model_validate({"tags": {"enum": 1}, "x-a": 2}).root == {
        "tags": {"enum": 1},
        "x-a": 2,
    }


REF_VALUE = {"$ref": "#/$defs/N"}
"""A value shaped like a reference to an existing definition: inlined, it would become an integer schema."""
DATA_REFS = {
    "type": "object",
    "properties": {
        "exact": {"const": REF_VALUE, "description": "the literal reference"},
        "mode": {"enum": [REF_VALUE, "plain"], "default": REF_VALUE},
        "nested": {"const": {"at": [REF_VALUE, 1]}},
        "n": {"$ref": "#/$defs/N", "examples": [REF_VALUE]},
    },
    "required": ["exact"],
    "$defs": {"N": {"type": "integer"}},
}


def test_a_ref_shaped_value_in_const_enum_default_or_examples_is_data_not_a_reference() -> None:
    """A ``$ref`` key inside ``const``, ``enum``, ``default`` or ``examples`` is never inlined and never reaches
    pydantic as a reference: the args model's and the step's JSON schemas build, and the value validates as
    itself (an integer, as if the reference had been inlined, does not)."""
    data = args_model("data", DATA_REFS)
    schema = data.model_json_schema()
    build_step_model((("data", data),)).model_json_schema()
    published = Draft202012Validator(schema)
    good = {"exact": REF_VALUE, "mode": REF_VALUE, "nested": {"at": [REF_VALUE, 1]}, "n": 2}
    assert published.is_valid(good)
    assert data.model_validate(good).root == good
    for wrong in ({"exact": 1}, {"exact": {**REF_VALUE, "x": 1}}, {"exact": REF_VALUE, "mode": 1}):
        assert not published.is_valid(wrong)
        with pytest.raises(ValidationError):
            data.model_validate(wrong)
    assert "$defs" not in schema
    assert schema["properties"]["exact"]["description"] == "the literal reference"


def test_a_ref_shaped_value_in_strict_mode_is_spelt_out_field_by_field() -> None:
    """The strict rewrite of a step over such args keeps the value exact: an object whose one field is the
    reference's text."""
    step = build_step_model(
        (("data", args_model("data", {**DATA_REFS, "properties": {"exact": {"const": REF_VALUE}}})),)
    )
    strict = strict_schema(step.model_json_schema(), "step")
    call = strict["properties"]["decision"]["anyOf"][1]["properties"]["call"]
    assert call["properties"]["args"]["properties"]["exact"] == {
        "type": "object",
        "properties": {"$ref": {"enum": ["#/$defs/N"], "type": "string"}},
        "required": ["$ref"],
        "additionalProperties": False,
    }


ref_keys = st.sampled_from(["$ref", "a", "$defs"])
ref_values = st.recursive(
    json_scalars | st.just("#/$defs/N"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ref_keys, inner, max_size=3),
    max_leaves=8,
)


@given(value=ref_values)
def test_any_const_value_builds_and_admits_exactly_itself(value: Any) -> None:
    """For every JSON value, a ``const`` of it builds a JSON schema that admits the value, and not the value
    wrapped in a list."""
    schema = {"type": "object", "properties": {"v": {"const": value}}, "required": ["v"], "$defs": {"N": {}}}
    published = Draft202012Validator(args_model("data", schema).model_json_schema())
    assert published.is_valid({"v": value})
    assert not published.is_valid({"v": [value]})


def test_boolean_subschemas_mean_any_value_and_no_value() -> None:
    """`true` takes any value (null included, so it is not made nullable); an optional `false` can only be left out."""
    schema = {
        "type": "object",
        "properties": {"anything": True, "nothing": False, "ref": {"$ref": "#/$defs/Any", "description": "free"}},
        "$defs": {"Any": True},
    }
    flags = args_model("flags", schema)
    assert flags.model_json_schema()["properties"] == {
        "anything": True,
        "nothing": {"anyOf": [False, {"type": "null"}], "default": None},
        "ref": {"anyOf": [{"description": "free"}, {"type": "null"}], "default": None},
    }
    assert flags.model_validate({"anything": [1, None], "nothing": None, "ref": {"a": 1}}).root == {
        "anything": [1, None],
        "ref": {"a": 1},
    }
    with pytest.raises(ValidationError, match=r"False schema does not allow 1"):
        flags.model_validate({"nothing": 1})


@pytest.mark.parametrize(
    ("properties", "field"),
    [
        ({"q": True}, r"q' is a value of any type \(true\)"),
        ({"q": {"type": "array", "items": True}}, r"q\[\]' is a value of any type \(true\)"),
        ({"q": {"anyOf": [{"type": "string"}, True]}}, r"q' is a value of any type \(true\)"),
    ],
)
def test_a_true_subschema_in_strict_mode_is_a_usage_error_naming_the_field(
    properties: dict[str, Any], field: str
) -> None:
    """Strict mode cannot say "any value": a `true` subschema is refused by name, not crashed on."""
    schema = args_model("loose", {"type": "object", "properties": properties, "required": ["q"]}).model_json_schema()
    with pytest.raises(UsageError, match=field):
        strict_schema(schema, "loose")


def test_an_optional_false_property_in_strict_mode_can_only_be_null() -> None:
    """An optional `false` property is the union of nothing and null: strict mode keeps the null and requires it."""
    schema = args_model("never", {"type": "object", "properties": {"q": False}}).model_json_schema()
    assert strict_schema(schema, "never") == {
        "type": "object",
        "properties": {"q": {"anyOf": [{"type": "null"}]}},
        "required": ["q"],
        "additionalProperties": False,
    }
    with pytest.raises(UsageError, match=r"field 'q' is a schema no value matches \(false\)"):
        strict_schema({"type": "object", "properties": {"q": False}}, "never")
