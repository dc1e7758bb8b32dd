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
from typing import Annotated

from pydantic import ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

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

    Raises:
        UsageError: the text is not an event's JSON form; the message names what is wrong.
    """
    try:
        return _UNION.validate_json(text)
    except ValidationError as wrong:
        raise UsageError(
            f"not an agentkit event's JSON form ({wrong.error_count()} problem(s): {_first(wrong)}); "
            "give the text an event's to_json() wrote, as agentkit.events.EVENT_SCHEMA describes it"
        ) from None


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
