"""OpenAI's strict structured-output subset of JSON Schema, and the transform of a pydantic schema into it.

OpenAI constrains decoding to a schema only when the request says `strict: true`, and then it
refuses (HTTP 400) any schema outside its subset: every object closed with
`additionalProperties: false` and every property listed in `required`; unions as `anyOf`
only (no `oneOf`, no `discriminator`, no `allOf`); no `default`; a `$ref` with nothing
beside it; and only a few validation keywords. pydantic's schemas break most of these rules, so
`strict_schema` rewrites one into the subset, once per schema (the caller caches its plan).

The rewrite can only widen what the schema allows, never narrow it below what the pydantic model
accepts, except where the subset forces it: a field with a default becomes required (the model
writes a value, which validates), and an object's undeclared keys are closed off (a model with
`extra="allow"` still validates without them). Dropped constraints (`maxLength`,
`minLength`, `default`) are still enforced where the reply is validated: by pydantic,
against the real model. What the subset cannot express at all (a free-form `dict`, a tuple,
an untyped `Any`, a boolean subschema outside a union or an intersection) is a `UsageError`
naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentkit.errors import UsageError

__all__ = ["strict_schema"]

_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
"""The string formats OpenAI's strict mode supports; any other `format` is dropped."""
_KEPT = frozenset(
    {
        "type",
        "description",
        "title",
        "enum",
        "pattern",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "minItems",
        "maxItems",
    }
)
"""Keywords copied as they are; the structural ones are rebuilt, and everything else is dropped."""
_JSON_TYPES: dict[type, str] = {bool: "boolean", str: "string", int: "integer", float: "number"}
"""The JSON type of a `const` value, by its Python type (`bool` is its own, not an `int`)."""


def strict_schema(schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """`schema` rewritten into OpenAI's strict subset (a new dict; `schema` is not changed).

    Raises:
        UsageError: the schema holds something the strict subset cannot express.
    """
    return _Tightener(schema, name).root()


class _Tightener:
    def __init__(self, schema: Mapping[str, Any], name: str) -> None:
        self._schema = schema
        self._name = name

    def root(self) -> dict[str, Any]:
        body = {key: value for key, value in self._schema.items() if key != "$defs"}
        ref = body.get("$ref")
        if isinstance(ref, str):  # a recursive model's root is a reference into $defs
            del body["$ref"]
            body = {**self._resolve(ref), **body}
        out = self._node(body, "", frozenset())
        if out.get("type") != "object":
            raise self._refuse("", "the root is not an object", "ask for a pydantic model, not a bare type")
        defs = self._schema.get("$defs")
        if isinstance(defs, Mapping) and defs:
            out["$defs"] = {key: self._node(value, key, frozenset()) for key, value in defs.items()}
        return out

    def _node(self, node: Mapping[str, Any] | bool, path: str, inlining: frozenset[str]) -> dict[str, Any]:
        if node is True:  # a boolean schema: `true` is any value, which the subset cannot say
            raise self._refuse(path, "a value of any type (true)", "give the field a type")
        if node is False:
            raise self._refuse(path, "a schema no value matches (false)", "leave the field out")
        ref = node.get("$ref")
        if isinstance(ref, str):
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            if not siblings or ref in inlining:  # inlining a recursive reference again would never end
                return {"$ref": ref}
            # strict mode allows nothing beside a $ref, so a described reference is inlined
            return self._node({**self._resolve(ref), **siblings}, path, inlining | {ref})
        out: dict[str, Any] = {}
        for key, value in node.items():
            self._keyword(out, key, value, path, inlining)
        for key, value in self._intersection(node, path, inlining).items():
            out.setdefault(key, value)
        if _is_object(out):
            self._close(node, out, path)
        elif not {"type", "anyOf", "enum", "$ref"} & out.keys():
            raise self._refuse(path, "a value of any type", "give the field a type")
        return out

    def _keyword(self, out: dict[str, Any], key: str, value: Any, path: str, inlining: frozenset[str]) -> None:
        """Copy one keyword of a node into `out` in its strict form; a keyword strict mode refuses is dropped."""
        if key == "properties":
            out[key] = {field: self._node(sub, _join(path, field), inlining) for field, sub in value.items()}
        elif key in ("anyOf", "oneOf"):  # a discriminated union is still a union of closed objects
            out.setdefault("anyOf", []).extend(self._variants(value, path, inlining))
        elif key == "items":
            if not isinstance(value, (Mapping, bool)):
                raise self._refuse(path, "an array with per-position items", "use list[...] instead")
            out[key] = self._node(value, f"{path}[]", inlining)
        elif key == "prefixItems":
            raise self._refuse(path, "a tuple", "use a model with named fields, or list[...]")
        elif key == "const":
            out["enum"] = [value]
            kind = _JSON_TYPES.get(type(value))
            if kind is not None:  # the subset wants a type on every node; a const says it by its value
                out.setdefault("type", kind)
        elif key in _KEPT or (key == "format" and value in _FORMATS):
            out[key] = value

    def _intersection(self, node: Mapping[str, Any], path: str, inlining: frozenset[str]) -> dict[str, Any]:
        parts = node.get("allOf")
        if parts is None:
            return {}
        parts = [part for part in parts if part is not True]  # `true` takes nothing away from an intersection
        if not parts:
            return {}
        if len(parts) != 1:
            raise self._refuse(path, "an intersection (allOf)", "declare the fields in one model")
        return self._node(parts[0], path, inlining)

    def _variants(self, variants: list[Any], path: str, inlining: frozenset[str]) -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        for variant in variants:
            if variant is False and any(other is not False for other in variants):
                continue  # a variant no value matches adds nothing to the union (an optional `false` property)
            tight = self._node(variant, path, inlining)
            if tight.keys() == {"anyOf"}:  # a union inside a union: splice it in
                flat.extend(tight["anyOf"])
            else:
                flat.append(tight)
        return flat

    def _close(self, node: Mapping[str, Any], out: dict[str, Any], path: str) -> None:
        # a model's schema always has "properties" (empty for a model without fields); a dict's has none
        if "properties" not in node and node.get("additionalProperties", True) is not False:
            raise self._refuse(path, "a free-form object (a dict)", "give it a model with named fields")
        out["required"] = list(out.setdefault("properties", {}))
        out["additionalProperties"] = False

    def _resolve(self, ref: str) -> Mapping[str, Any]:
        target: Any = self._schema
        for part in ref.removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        if not ref.startswith("#/") or not isinstance(target, Mapping):
            raise self._refuse("", f"a reference {ref!r} outside the schema", "keep every model in one schema")
        return target

    def _refuse(self, path: str, what: str, fix: str) -> UsageError:
        where = f"field {path!r}" if path else "the schema"
        return UsageError(
            f"schema {self._name!r} cannot be sent in OpenAI's strict mode: {where} is {what}; "
            f"{fix}, or pass OpenAICaller(strict=False) (the schema is then sent as is, not enforced by OpenAI)"
        )


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field
