"""`McpArgs`: the arguments of an MCP tool call, checked against the tool's own input JSON schema.

Why a model that carries the server's JSON schema, and not a pydantic model rebuilt from it:

* **Fidelity.** The server states its contract in JSON Schema (patterns, `oneOf`, `$ref`,
  `additionalProperties`, numeric bounds...). `jsonschema` checks exactly that contract; a
  translation into pydantic field types would be lossy, and could accept what the server refuses.
* **What is checked is what is sent, approved and digested.** The arguments are one JSON object,
  held as it is: no defaults or `None` values are added by a model dump, so the object a human
  approves (`canonical_json`) is byte for byte the object sent to the server, and a journal
  round trip rebuilds the same value and the same digest.
* **The model sees the server's schema,** with two rewrites: local `$ref` are inlined (a schema
  nested in the step schema cannot keep its own `$defs`), and an optional top-level property
  also accepts `null` (OpenAI's strict mode makes every property required, so `null` is how
  the model says "leave it out"; such a `null` is dropped before validation). A `$ref` key inside
  a value (`const`, `enum`, `default`, `examples`) is data, never inlined; as schema builders take
  it for a reference, such a value is spelt out as a schema, or left out (`_data_apart`). The
  provider rewrites the result into OpenAI's strict subset where it sends strict schemas.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pydantic_core
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import GetJsonSchemaHandler, RootModel, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from agentkit._step import schema_name

__all__ = ["McpArgs", "UnusableSchema", "args_model"]

_MAX_ERRORS = 5
"""How many schema violations one error message lists (the model needs the first few, not all)."""


class UnusableSchema(ValueError):
    """A tool's input schema cannot be checked or cannot be shown to the model."""


class McpArgs(RootModel[dict[str, Any]]):
    """The arguments of one MCP tool call: a JSON object, in `root`.

    Each MCP tool has its own subclass (its `args_type`), which validates against that tool's
    input JSON schema: building one from invalid arguments raises `pydantic.ValidationError`,
    so the loop re-asks the model and nothing reaches the server. `McpArgs` itself holds any
    JSON object (as reloaded proposals may); the tool checks its arguments again before sending.
    """

    _spec: ClassVar[_Spec | None] = None

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if isinstance(data, McpArgs):
            data = data.root
        spec = cls._spec
        if spec is None:
            return _json_object(data)
        return spec.check(data)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        spec = cls._spec
        if spec is None:
            return {"type": "object", "additionalProperties": True}
        return copy.deepcopy(spec.published)


@dataclass(frozen=True, slots=True)
class _Spec:
    """One tool's input schema: the validator, and the schema shown to the model."""

    tool: str
    validator: Validator
    published: dict[str, Any]
    optional: frozenset[str]
    """Top-level properties that are optional and whose own schema refuses `null`: a `null` there means absent."""

    def check(self, data: Any) -> dict[str, Any]:
        obj = _json_object(data)
        for key in self.optional:
            if key in obj and obj[key] is None:
                del obj[key]
        errors = sorted(self.validator.iter_errors(obj), key=lambda error: list(map(str, error.absolute_path)))
        if errors:
            listed = "; ".join(f"{_where(error.absolute_path)}: {error.message}" for error in errors[:_MAX_ERRORS])
            more = f" (and {len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
            raise ValueError(f"arguments do not match the input schema of tool {self.tool!r}: {listed}{more}")
        return obj


def args_model(tool: str, input_schema: Mapping[str, Any]) -> type[McpArgs]:
    """A `McpArgs` subclass that validates against `input_schema`.

    The same tool name and schema give the same class, however often the tools are wired: an
    args type stays one type across connections, and the step models built from it stay cached.

    Raises:
        UnusableSchema: the schema is not a valid JSON schema, is not an object schema, or is
            recursive (a recursive schema cannot be inlined into the step schema).
    """
    return _args_model(tool, json.dumps(input_schema, sort_keys=True, separators=(",", ":")))


@functools.lru_cache(maxsize=1024)
def _args_model(tool: str, schema_json: str) -> type[McpArgs]:
    schema = json.loads(schema_json)
    validator_class = validator_for(schema, default=Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as invalid:
        raise UnusableSchema(f"its input schema is not a valid JSON schema: {invalid.message}") from invalid
    published, optional = _published(schema)
    spec = _Spec(tool=tool, validator=validator_class(schema), published=published, optional=optional)
    name = schema_name(f"{tool}_args")
    return type(name, (McpArgs,), {"_spec": spec, "__module__": __name__, "__qualname__": name})


def _json_object(data: Any) -> dict[str, Any]:
    """`data` as JSON-native values (a fresh copy), or `ValueError` if it is not a JSON object."""
    if not isinstance(data, Mapping):
        raise ValueError(f"the arguments must be a JSON object, not {type(data).__name__}")
    try:
        obj = json.loads(pydantic_core.to_json(data))
    except (pydantic_core.PydanticSerializationError, ValueError) as invalid:
        raise ValueError(f"the arguments are not JSON: {invalid}") from invalid
    if not isinstance(obj, dict):
        raise ValueError("the arguments must be a JSON object with string keys")
    return obj


def _where(path: Any) -> str:
    parts = [str(part) for part in path]
    return ".".join(parts) if parts else "(arguments)"


def _published(schema: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    root = _Inliner(schema).node(schema, ())
    if not isinstance(root, dict):
        raise UnusableSchema("its input schema is not an object schema")
    for key in ("$schema", "$id"):
        root.pop(key, None)
    kind = root.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise UnusableSchema(f"its input schema is of type {kind!r}; MCP tool arguments are an object")
    root["type"] = "object"
    properties = root.setdefault("properties", {})
    if not isinstance(properties, dict):
        raise UnusableSchema("its input schema's properties are not an object")
    required = set(root.get("required", ()))
    optional = set()
    for key, sub in properties.items():
        if key not in required and not _accepts_null(sub):
            properties[key] = {"anyOf": [sub, {"type": "null"}], "default": None}
            optional.add(key)
    return root, frozenset(optional)


def _accepts_null(node: Any) -> bool:
    """Whether the schema `node` accepts `null` (`true` accepts every value, `false` none)."""
    if isinstance(node, bool):
        return node
    if not isinstance(node, Mapping):
        return True  # not a schema (check_schema refused it already): leave it as it is
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in node.get("enum", ()) or ("const" in node and node["const"] is None):
        return True
    variants = [*node.get("anyOf", ()), *node.get("oneOf", ())]
    return any(_accepts_null(variant) for variant in variants)


_DATA = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are JSON data, not schemas: a `$ref` in them is a value, never inlined."""
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
"""Keywords whose values map names to schemas: the names are data (a property may be called `default`)."""
_DEFINITIONS = frozenset({"$defs", "definitions"})
"""Dropped wherever they are: every reference into them is inlined, and a `$ref` left in one would dangle."""


class _Inliner:
    """Replaces every local `$ref` by a copy of its target (keeping sibling keywords)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema

    def node(self, value: Any, resolving: tuple[str, ...]) -> Any:
        """`value`, a schema (an object or a boolean) or a list of schemas, with its references inlined."""
        if isinstance(value, list):
            return [self.node(item, resolving) for item in value]
        if not isinstance(value, dict):
            return value
        ref = value.get("$ref")
        if isinstance(ref, str):
            if ref in resolving:
                raise UnusableSchema(f"its input schema is recursive ({ref!r} refers to itself)")
            target = self._resolve(ref)
            siblings = {key: sub for key, sub in value.items() if key != "$ref"}
            if isinstance(target, bool):  # `true` adds nothing to its siblings; `false` refuses whatever they say
                return self.node(siblings, (*resolving, ref)) if target and siblings else target
            return self.node({**target, **siblings}, (*resolving, ref))
        inlined = {key: self._keyword(key, sub, resolving) for key, sub in value.items() if key not in _DEFINITIONS}
        return _data_apart(inlined)

    def _keyword(self, key: str, value: Any, resolving: tuple[str, ...]) -> Any:
        if key in _DATA:
            return value
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            return {name: self.node(sub, resolving) for name, sub in value.items()}
        return self.node(value, resolving)

    def _resolve(self, ref: str) -> dict[str, Any] | bool:
        target: Any = self._schema
        if ref != "#" and not ref.startswith("#/"):
            raise UnusableSchema(f"its input schema refers outside itself ({ref!r})")
        for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        if isinstance(target, bool):
            return target
        if not isinstance(target, Mapping):
            raise UnusableSchema(f"its input schema has a reference that does not resolve ({ref!r})")
        return dict(target)


def _data_apart(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with no `$ref` key left in its data (`const`, `enum`, `default`, `examples`).

    Whatever builds a JSON schema from the published one (pydantic, the step schema) takes every `{"$ref": ...}`
    it meets for a reference, in data too, and fails on it (or inlines it). So such a value is not published
    as data: a `const` or `enum` value becomes the schema that admits exactly it (`_literal`), and a `default` or
    `examples` is left out (they only inform; the server's own schema, with them, still checks the arguments).
    """
    held = [key for key in _DATA if key in node and _holds_ref(node[key])]
    if not held:
        return node
    out = {key: sub for key, sub in node.items() if key not in held}
    exact: list[dict[str, Any]] = []
    if "const" in held:
        exact.append(_literal(node["const"]))
    if "enum" in held and isinstance(node["enum"], list):
        variants = [_literal(item) for item in node["enum"] if _holds_ref(item)]
        plain = [item for item in node["enum"] if not _holds_ref(item)]
        exact.append({"anyOf": [*variants, {"enum": plain}] if plain else variants})
    for schema in exact:
        if schema.keys() & out.keys():  # both say the same keyword: each must hold
            out["allOf"] = [*out.get("allOf", ()), schema]
        else:  # beside the node's own keywords (an enum's `anyOf` where `_accepts_null` looks for it)
            out.update(schema)
    return out


_REFERENCING = frozenset({"$ref", "$defs"})
"""The keys pydantic reads as references or definitions wherever they are, in data too."""


def _holds_ref(value: Any) -> bool:
    """Whether the JSON value `value` has an object with a `$ref` (or `$defs`) key anywhere in it."""
    if isinstance(value, dict):
        return not _REFERENCING.isdisjoint(value) or any(_holds_ref(sub) for sub in value.values())
    if isinstance(value, list):
        return any(_holds_ref(sub) for sub in value)
    return False


def _literal(value: Any) -> dict[str, Any]:
    """The schema that admits exactly the JSON value `value` (as `{"const": value}` does), with no `$ref` key in
    data: an object or array holding one is spelt out key by key, item by item."""
    if isinstance(value, dict) and _holds_ref(value):
        return {
            "type": "object",
            "properties": {key: _literal(sub) for key, sub in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list) and _holds_ref(value):
        items = [_literal(sub) for sub in value]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}
    return {"const": value}
