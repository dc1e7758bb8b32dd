"""The JSON form of the values in events whose Python value is not data: tool args, errors, the caller.

Each is an `Annotated` type used where the field is declared (in `agentkit._events`, `agentkit._agent`,
`agentkit._results`): to mypy it is the plain type, to pydantic it says how the value is written as JSON,
read back, and described in a JSON Schema (the validator comes first: a plain validator replaces the schema,
serializer and all). The events' writers and the union's reader (`agentkit._event_json`) are `TypeAdapter`s
made from these declarations, so an event class added to the union needs nothing more for its JSON form.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, PlainSerializer, PlainValidator
from pydantic_core import CoreSchema, core_schema
from typing_extensions import TypedDict

from agentkit.errors import AgentkitError, ReportedError

__all__ = ["NOT_READ", "EventArgs", "JsonArgs", "JsonCaller", "JsonError", "JsonException", "Unwritten"]


class EventArgs(BaseModel):
    """Tool args read back from an event's JSON: the fields as the JSON had them (the tool's own args
    class lives in the process that ran the run)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ErrorJson(TypedDict):
    """An error's JSON form."""

    type: str
    """The exception's class name (`ToolError`, `CancelledError`, ...)."""
    message: str


def _args_json(args: BaseModel) -> dict[str, Any]:
    return args.model_dump(mode="json")


def _args_back(value: object) -> BaseModel:
    if isinstance(value, BaseModel):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"tool args are a JSON object, not {type(value).__name__}")
    return EventArgs.model_validate(value)


def _error_json(error: BaseException) -> ErrorJson:
    name = error.type_name if isinstance(error, ReportedError) else type(error).__name__
    try:
        message = str(error)
    except Exception as broken:  # the event must be written even when the error's text cannot be
        message = f"<str() of the {type(error).__name__} raised {type(broken).__name__}>"
    return {"type": name, "message": message}


def _error_back(value: object) -> BaseException:
    if isinstance(value, BaseException):
        return value
    fields = value if isinstance(value, dict) else {}
    if not isinstance(fields.get("type"), str) or not isinstance(fields.get("message"), str):
        raise ValueError('an error is a JSON object {"type": <class name>, "message": <text>}')
    return ReportedError(fields["message"], type_name=fields["type"])


def _agentkit_error_back(value: object) -> AgentkitError:
    error = _error_back(value)
    if not isinstance(error, AgentkitError):
        raise ValueError(f"expected an agentkit error, got {type(error).__name__}")
    return error


def _caller_json(caller: object) -> str | None:
    if caller is None or isinstance(caller, str):  # a caller's name read back from the JSON form is that name
        return caller
    return type(caller).__name__


def _caller_back(value: object) -> object:
    return value


JsonArgs = Annotated[
    BaseModel,
    PlainValidator(_args_back, json_schema_input_type=dict[str, Any]),
    PlainSerializer(_args_json, return_type=dict[str, Any]),
]
"""Tool args (any pydantic model): their JSON object; read back as `EventArgs`."""

JsonError = Annotated[
    AgentkitError,
    PlainValidator(_agentkit_error_back, json_schema_input_type=ErrorJson),
    PlainSerializer(_error_json, return_type=ErrorJson),
]
"""An agentkit error: its class name and message; read back as a `ReportedError`."""

JsonException = Annotated[
    BaseException,
    PlainValidator(_error_back, json_schema_input_type=ErrorJson),
    PlainSerializer(_error_json, return_type=ErrorJson),
]
"""Any exception (a run's abort): its class name and message; read back as a `ReportedError`."""

JsonCaller = Annotated[
    object,
    PlainValidator(_caller_back, json_schema_input_type=str | None),
    PlainSerializer(_caller_json, return_type=str | None),
]
"""The caller a run asks: its class name (`OpenAICaller`); read back as that name."""


class _NotRead:
    """The field's type is not described to pydantic (it may hold code: a summarizer, a comparator)."""

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.any_schema()


NOT_READ = _NotRead()
"""With `Unwritten`: `Annotated[T, NOT_READ, Unwritten]` is a field pydantic neither writes nor reads."""

Unwritten = Field(exclude=True)
"""A field left out of the JSON form (it repeats what earlier events said, or is code, not data)."""
