"""`resolve`: the object a `MODULE:QUALNAME` text names, for the command line and the journal's args types."""

from __future__ import annotations

import importlib

__all__ = ["resolve"]


def resolve(path: str) -> object:
    """The object `path` names: `MODULE:QUALNAME`, the qualname perhaps dotted (`pkg.mod:Outer.Inner`).

    Raises:
        ValueError: `path` is not `MODULE:QUALNAME`.
        ImportError: the module does not import.
        AttributeError: the module (or an object on the way) lacks the name.
    """
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"{path!r} is not MODULE:QUALNAME")
    found: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found
