"""Agentkit errors across the Temporal boundary: a type name, the message, the error's own fields as JSON.

A model activity reports its error this way (the workflow rebuilds it, and the loop core treats it as
in-process), and so does a run's result (`DurableResult.error` is the error the run ended with, rebuilt
on the client). One encoding for both, so an error reads the same wherever it is rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from agentkit import errors
from agentkit._usage import Usage
from agentkit.errors import AgentkitError

__all__ = ["error_fields", "error_kind", "rebuild_error"]

_SCALARS = (str, int, float, bool, type(None))


def error_kind(error: AgentkitError) -> str:
    """The name of the nearest class of `agentkit.errors` the error is an instance of (a private subclass,
    such as the workflow's lost-outcome error, travels as the public one it derives from)."""
    for kind in type(error).__mro__:
        name: str = kind.__name__
        if getattr(errors, name, None) is kind:
            return name
    return AgentkitError.__name__


def error_fields(error: AgentkitError) -> dict[str, JsonValue]:
    """The error's own fields (`tool_name`, `transient`, `retry_after`, `problems`...), those JSON can
    carry; its usage travels on its own."""
    fields: dict[str, JsonValue] = {}
    for name, value in vars(error).items():
        if name.startswith("_") or name == "usage":
            continue
        if isinstance(value, _SCALARS):
            fields[name] = value
        elif isinstance(value, tuple | list) and all(isinstance(part, _SCALARS) for part in value):
            fields[name] = list(value)
    return fields


def rebuild_error(kind: str, message: str, fields: Mapping[str, Any], *, usage: Usage | None = None) -> AgentkitError:
    """The error `error_kind`/`error_fields` described: the same class (`AgentkitError` for a name this
    agentkit does not know), the same message, the same fields."""
    found = getattr(errors, kind, None)
    cls = found if isinstance(found, type) and issubclass(found, AgentkitError) else AgentkitError
    # Not the class's constructor: each takes its own keywords; the fields are set as the constructor set them.
    error = cls.__new__(cls)
    AgentkitError.__init__(error, message, usage=usage)
    for name, value in fields.items():
        setattr(error, name, tuple(value) if isinstance(value, list) else value)
    return error
