"""Events as JSON: one form per event class, a union discriminated by `kind`, and its JSON Schema.

The form is what pydantic makes of the event dataclasses: a `TypeAdapter` per class writes an event, one
over the `Event` union reads any event back and gives the schema. The fields whose Python value is not
data say their JSON form where they are declared (`agentkit._jsonform`), and `round` is a computed field
where an event has it from another value; so a new event class needs nothing here: in the `Event` union,
it has its form, its place in the schema and its way back.
"""

from __future__ import annotations

import functools
import typing
from typing import Annotated, Any

from pydantic import ConfigDict, Field, JsonValue, TypeAdapter, ValidationError
from pydantic_core import from_json

from agentkit._events import Event
from agentkit.errors import UsageError

__all__ = ["event_schema", "parse_event"]

_SCHEMA_TITLE = "agentkit event"


_UNION: TypeAdapter[Event] = TypeAdapter(
    Annotated[Event, Field(discriminator="kind")],
    # What `to_json` writes always has every field, defaults included: the schema says so.
    config=ConfigDict(json_schema_serialization_defaults_required=True),
)
"""Reads any event: the discriminator makes reading one a lookup of its `kind`, not a trial of each class."""


def parse_event(text: str | bytes) -> Event:
    """An event from its JSON form (`event.to_json()`).

    Tool args come back as `EventArgs` (their fields as the JSON had them), errors as `ReportedError`
    (class name and message); everything else is the value that was written, so
    `parse_event(e.to_json()).to_json() == e.to_json()` for every event.

    The text is read as strictly as the schema describes it: every member the schema requires must be there
    (`seq` included, although an event made in Python has it 0 by default), and a member the schema gives a JSON
    type must have it: a number is not read from a string (`"seq": "4"`), nor an integer from a boolean.

    Raises:
        UsageError: the text is not an event's JSON form; the message names what is wrong.
    """
    try:
        event = _UNION.validate_json(text)
    except ValidationError as wrong:
        raise _refused(f"{wrong.error_count()} problem(s): {_first(wrong)}") from None
    problem = _unlike_schema(from_json(text), event.kind)  # an object: validation read it as one
    if problem:
        raise _refused(problem)
    return event


def _refused(problem: str) -> UsageError:
    return UsageError(
        f"not an agentkit event's JSON form ({problem}); "
        "give the text an event's to_json() wrote, as agentkit.events.EVENT_SCHEMA describes it"
    )


def _unlike_schema(data: dict[str, Any], kind: str) -> str:
    """What in `data` the schema of `kind` refuses and validation let through: a required member missing
    (validation fills a default), or a member of another JSON type than the schema's (validation coerces
    `"4"` and `true` to numbers); empty when there is none. Members are checked one level deep, where the
    schema gives them a JSON type (their contents are validation's)."""
    required, types = _shapes()[kind]
    for name in required:
        if name not in data:
            return f"{kind!r} lacks {name!r}, which its JSON form always has"
    for name, allowed in types.items():
        if name in data and not any(_is(data[name], json_type) for json_type in allowed):
            wanted = " or ".join(allowed)
            return f"{kind!r} has {name!r} as {type(data[name]).__name__}, where its JSON form has {wanted}"
    return ""


def _is(value: object, json_type: str) -> bool:
    """Whether `value` (as `from_json` read it) is of `json_type`, as JSON Schema counts it (`1.0` is an integer)."""
    match json_type:
        case "integer":
            return (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and value.is_integer()
            )
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "array":
            return isinstance(value, list)
        case "object":
            return isinstance(value, dict)
    return True  # a type JSON Schema does not have: nothing to check


@functools.cache
def _shapes() -> dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]]:
    """Each event kind's required members and, for each member the schema gives JSON types, those types."""
    definitions = typing.cast("dict[str, dict[str, Any]]", event_schema()["$defs"])
    shapes = {}
    for definition in definitions.values():
        properties: dict[str, dict[str, Any]] = definition.get("properties", {})
        kind = properties.get("kind", {}).get("const")
        if not isinstance(kind, str):
            continue
        types = {name: _json_types(member) for name, member in properties.items()}
        shapes[kind] = (tuple(definition.get("required", ())), {name: got for name, got in types.items() if got})
    return shapes


def _json_types(member: dict[str, Any]) -> tuple[str, ...]:
    """The JSON types a member's schema allows, where it says them plainly (`type`, or an `anyOf` of `type`s);
    empty where it does not (a reference, a schema of its own)."""
    if isinstance(member.get("type"), str):
        return (member["type"],)
    options = member.get("anyOf")
    if isinstance(options, list) and all(isinstance(option.get("type"), str) for option in options):
        return tuple(option["type"] for option in options)
    return ()


def _first(wrong: ValidationError) -> str:
    error = wrong.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "the top level"
    return f"{where}: {error['msg']}"


@functools.cache
def event_schema() -> dict[str, JsonValue]:
    """The JSON Schema (draft 2020-12) of every event's JSON form: a `oneOf` discriminated by `kind`."""
    schema = _UNION.json_schema(mode="serialization")
    schema["title"] = _SCHEMA_TITLE
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return typing.cast("dict[str, JsonValue]", schema)  # pydantic types its schema dict[str, Any]
