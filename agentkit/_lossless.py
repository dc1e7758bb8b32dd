"""Text kept losslessly wherever it goes: a JSON value, a database column, a Temporal payload.

A lone surrogate (how Python carries bytes that were not UTF-8, after `surrogateescape`) cannot
be encoded as UTF-8, and PostgreSQL text cannot hold NUL. `to_stored` writes those characters
(and its own escape character) as U+FFFF and four hex digits, and `from_stored` gives the text
back exactly. `Text` is a `str` field that is written that way to JSON and read back from it,
so a model holding any text serialises, and round-trips, exactly.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

__all__ = ["Text", "from_stored", "to_stored"]

_ESCAPE = "\uffff"
"""Starts an escape in stored text: a Unicode noncharacter, never meant to appear in interchanged text."""
_UNSTORABLE = re.compile("[\x00\ud800-\udfff\uffff]")
"""What PostgreSQL text cannot hold (NUL), what no UTF-8 database can (lone surrogates, such as the
`surrogateescape` form of non-UTF-8 bytes), and the escape character itself."""
_ESCAPED = re.compile("\uffff([0-9a-f]{4})")


def to_stored(text: str) -> str:
    """`text` in a form every backend stores as is; `from_stored` gives `text` back exactly.

    Text without NUL, lone surrogates or U+FFFF is stored unchanged (so equality in SQL, and
    every row written before, keep working); each of those characters becomes U+FFFF and its four
    hex digits.
    """
    if (text.isascii() and "\x00" not in text) or _UNSTORABLE.search(text) is None:  # ASCII: only NUL to look for
        return text
    return _UNSTORABLE.sub(lambda found: f"{_ESCAPE}{ord(found.group()):04x}", text)


def from_stored(text: str) -> str:
    """The text `to_stored` was given."""
    if _ESCAPE not in text:
        return text
    return _ESCAPED.sub(lambda found: chr(int(found.group(1), 16)), text)


def _read(value: Any) -> Any:
    return from_stored(value) if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_read), PlainSerializer(to_stored, return_type=str, when_used="json")]
"""A `str` field whose JSON is `to_stored` of it, read back with `from_stored`."""
