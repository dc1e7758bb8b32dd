"""Images and documents in a prompt: `ImagePart`, `DocumentPart`, and the parts of a prompt's dynamic part.

A prompt's dynamic part with images is a tuple of parts (`Prompt.parts`, `StructuredRequest.parts`):
strings, `ImagePart`s and `DocumentPart`s, in the order the model is to read them, while `dynamic`
stays a string, their text view (`text_of`: each image a placeholder with its digest), so code typed
against a text prompt goes on. `split_parts` is the one normal form: adjacent strings merged, and
parts without media joined into `dynamic` (a prompt of text only is the string it always was, and
is sent, digested and recorded exactly as before).

A part is identified by its `digest` (SHA-256 of its bytes, or of its URL): the journal records a
prompt by `part_digest`, never by bytes, and a replay tells a changed image from the same one by it.
As a JSON value (a tool's image items in a run's state, a request in a Temporal payload) a part is
an object with a `type` (`"image"` or `"document"`) and its bytes in base64, or its URL.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from agentkit.errors import UsageError

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

__all__ = [
    "DocumentMediaType",
    "DocumentPart",
    "ImageMediaType",
    "ImagePart",
    "PromptPart",
    "media_digests",
    "media_of",
    "part_digest",
    "parts_of",
    "sniffed",
    "split_parts",
    "text_of",
]

ImageMediaType: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
"""The image formats every provider agentkit speaks to takes."""
DocumentMediaType: TypeAlias = Literal["application/pdf"]
"""The document formats a `DocumentPart` may hold (PDF, where the provider takes it)."""

_IMAGE_TYPES: frozenset[str] = frozenset(get_args(ImageMediaType))
_URL_SCHEMES = ("https://", "http://")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImagePart:
    """An image in a prompt (or a tool's result item): its bytes with their media type, or a URL.

    `ImagePart(data=png_bytes, media_type="image/png")` sends the bytes inline;
    `ImagePart(url="https://example.com/chart.png")` sends the URL, which the provider fetches.

    Raises:
        UsageError: neither or both of `data` and `url`, bytes without a media type agentkit
            knows, empty bytes, or a URL that is not `http(s)://`.
    """

    data: bytes | None = None
    """The image's bytes (with `media_type`); `None` for an image by `url`."""
    media_type: ImageMediaType | None = None
    """`"image/png"`, `"image/jpeg"`, `"image/gif"` or `"image/webp"`; required with `data`."""
    url: str | None = None
    """Where the provider fetches the image from (`http(s)://`); `None` for an image by `data`."""

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise UsageError(
                "ImagePart takes either data=... (the image's bytes, with media_type=...) or url=..., exactly one"
            )
        if self.data is not None:
            if not isinstance(self.data, bytes | bytearray | memoryview) or not self.data:
                raise UsageError(f"ImagePart(data=...) must be the image's bytes, not empty; got {_shown(self.data)}")
            if isinstance(self.data, bytearray | memoryview):
                object.__setattr__(self, "data", bytes(self.data))
            if self.media_type not in _IMAGE_TYPES:
                raise UsageError(
                    f"ImagePart(data=...) needs media_type= one of {sorted(_IMAGE_TYPES)}; got {self.media_type!r}"
                )
            found = sniffed(self.data)
            if found != self.media_type:
                raise UsageError(
                    f"ImagePart(data=...) bytes are {'a ' + found if found else 'no image format agentkit knows'}, "
                    f"not {self.media_type}: give the media type of the bytes (providers refuse a mismatch)"
                )
        elif not isinstance(self.url, str) or not self.url.startswith(_URL_SCHEMES):
            raise UsageError(
                f"ImagePart(url=...) must be an http(s):// URL; got {_shown(self.url)} "
                "(for bytes you hold, pass data=... with media_type=...)"
            )
        elif self.media_type is not None and self.media_type not in _IMAGE_TYPES:
            raise UsageError(f"ImagePart media_type must be one of {sorted(_IMAGE_TYPES)}; got {self.media_type!r}")

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the bytes, or of the URL: what the journal records and a replay compares."""
        return hashlib.sha256(self.data if self.data is not None else (self.url or "").encode()).hexdigest()

    @property
    def data_url(self) -> str:
        """The image as one URL: a `data:` URL of its bytes in base64, or its `url`."""
        if self.data is None:
            return self.url or ""
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def __repr__(self) -> str:
        if self.data is None:
            return f"ImagePart(url={self.url!r})"
        return f"ImagePart(media_type={self.media_type!r}, {len(self.data)} bytes, sha256={self.digest[:12]})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return _core_schema(cls, "image")


@dataclass(frozen=True, kw_only=True, slots=True)
class DocumentPart:
    """A document in a prompt: a PDF's bytes, sent where the provider takes documents.

    Raises:
        UsageError: empty bytes, a media type other than PDF, or an empty filename.
    """

    data: bytes
    """The document's bytes."""
    media_type: DocumentMediaType = "application/pdf"
    """The document's format: PDF."""
    filename: str = "document.pdf"
    """The name the provider is given for it (OpenAI's `file` part requires one)."""

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes | bytearray | memoryview) or not self.data:
            raise UsageError(f"DocumentPart(data=...) must be the document's bytes, not empty; got {_shown(self.data)}")
        if isinstance(self.data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(self.data))
        if self.media_type != "application/pdf":
            raise UsageError(f"DocumentPart media_type must be 'application/pdf'; got {self.media_type!r}")
        if not self.data.startswith(b"%PDF-"):
            raise UsageError("DocumentPart(data=...) must be a PDF's bytes (they start with %PDF-)")
        if not isinstance(self.filename, str) or not self.filename:
            raise UsageError(f"DocumentPart filename must be a non-empty string; got {self.filename!r}")

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the bytes: what the journal records and a replay compares."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def data_url(self) -> str:
        """The document as a `data:` URL of its bytes in base64."""
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def __repr__(self) -> str:
        return f"DocumentPart(filename={self.filename!r}, {len(self.data)} bytes, sha256={self.digest[:12]})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return _core_schema(cls, "document")


PromptPart: TypeAlias = str | ImagePart | DocumentPart
"""One part of a prompt's dynamic part: text, an image or a document."""


def sniffed(data: bytes) -> ImageMediaType | None:
    """The image format `data` is in, by its first bytes; `None` when it is none of PNG, JPEG, GIF or WebP."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _shown(value: object) -> str:
    return f"{type(value).__name__} of {len(value)}" if isinstance(value, bytes | str) and value else repr(value)


def parts_of(dynamic: str | Sequence[PromptPart]) -> str | tuple[PromptPart, ...]:
    """`dynamic` in its normal form: adjacent strings merged, and the text alone when no part is media.

    Raises:
        UsageError: a part that is neither a string, an `ImagePart` nor a `DocumentPart`.
    """
    if type(dynamic) is str:
        return dynamic
    if isinstance(dynamic, str):
        return str(dynamic)
    if not isinstance(dynamic, Sequence):
        raise UsageError(
            f"a prompt's dynamic part is a string or a tuple of parts (str, ImagePart, DocumentPart); got {dynamic!r}"
        )
    parts: list[PromptPart] = []
    for part in dynamic:
        if isinstance(part, str):
            if parts and isinstance(parts[-1], str):
                parts[-1] += part
            elif part:
                parts.append(part)
        elif isinstance(part, ImagePart | DocumentPart):
            parts.append(part)
        else:
            raise UsageError(
                f"a prompt's dynamic part holds str, ImagePart and DocumentPart parts; got {type(part).__name__} "
                f"({part!r}): render other values as text, or wrap image bytes in ImagePart(data=..., media_type=...)"
            )
    if not any(isinstance(part, ImagePart | DocumentPart) for part in parts):
        return "".join(str(part) for part in parts)
    return tuple(parts)


def split_parts(dynamic: str, parts: Sequence[PromptPart]) -> tuple[str, tuple[PromptPart, ...]]:
    """A prompt's `dynamic` and `parts` as they are kept: parts of text only joined into `dynamic` (and no parts);
    with media, the parts normalised and `dynamic` their text view unless given."""
    normal = parts_of(parts)
    if isinstance(normal, str):
        return dynamic or normal, ()
    return dynamic or text_of(normal), normal


def media_of(dynamic: str | Sequence[PromptPart]) -> tuple[ImagePart | DocumentPart, ...]:
    """The images and documents of a dynamic part, in order."""
    if type(dynamic) is str:
        return ()
    return tuple(part for part in dynamic if isinstance(part, ImagePart | DocumentPart))


def part_digest(part: ImagePart | DocumentPart) -> dict[str, str]:
    """How a prompt's digest (and the journal) records a part: its kind, media type and SHA-256, never its bytes."""
    if isinstance(part, ImagePart):
        kind = "image_url" if part.data is None else "image"
        return {"type": kind, "media_type": part.media_type or "", "sha256": part.digest}
    return {"type": "document", "media_type": part.media_type, "sha256": part.digest}


def media_digests(dynamic: str | Sequence[PromptPart]) -> tuple[str, ...]:
    """Each image and document of a dynamic part as `kind:media_type:sha256`, in order (what a round's journal
    entry records of them)."""
    return tuple(":".join(part_digest(part).values()) for part in media_of(dynamic))


def text_of(dynamic: str | Sequence[PromptPart]) -> str:
    """The dynamic part as text, each image or document shown as a bracketed placeholder with its digest."""
    if type(dynamic) is str:
        return dynamic
    return "".join(part if isinstance(part, str) else _placeholder(part) for part in dynamic)


def _placeholder(part: ImagePart | DocumentPart) -> str:
    if isinstance(part, ImagePart):
        what = f"image {part.url}" if part.data is None else f"image {part.media_type}"
    else:
        what = f"document {part.filename}"
    return f"[{what} sha256:{part.digest[:12]}]"


def _to_json(part: ImagePart | DocumentPart) -> dict[str, str]:
    if isinstance(part, DocumentPart):
        data = base64.b64encode(part.data).decode("ascii")
        return {"type": "document", "media_type": part.media_type, "filename": part.filename, "data": data}
    if part.data is None:
        shown = {"type": "image", "url": part.url or ""}
        if part.media_type is not None:
            shown["media_type"] = part.media_type
        return shown
    return {"type": "image", "media_type": part.media_type or "", "data": base64.b64encode(part.data).decode("ascii")}


def _from_json(kind: Literal["image", "document"]) -> Any:
    def made(value: Mapping[str, Any]) -> ImagePart | DocumentPart:
        if value.get("type") != kind:
            raise ValueError(f"not an {kind} part (its 'type' is {value.get('type')!r})")
        extra = set(value) - {"type", "media_type", "data", "url", "filename"}
        if extra:
            raise ValueError(f"unknown fields of an {kind} part: {sorted(extra)}")
        raw = value.get("data")
        data: bytes | None = None
        if raw is not None:
            if not isinstance(raw, str):
                raise ValueError(f"an {kind} part's 'data' is its bytes in base64")
            try:
                data = base64.b64decode(raw, validate=True)
            except binascii.Error as error:
                raise ValueError(f"an {kind} part's 'data' is not base64: {error}") from error
        try:
            if kind == "document":
                if data is None:
                    raise ValueError("a document part needs its 'data'")
                return DocumentPart(
                    data=data,
                    media_type=value.get("media_type", "application/pdf"),
                    filename=value.get("filename", "document.pdf"),
                )
            return ImagePart(data=data, media_type=value.get("media_type"), url=value.get("url"))
        except UsageError as error:
            raise ValueError(str(error)) from error

    return made


def _core_schema(cls: type[ImagePart | DocumentPart], kind: Literal["image", "document"]) -> CoreSchema:
    """The pydantic schema of a part: an instance passes as it is; JSON is `_to_json`'s object."""
    from pydantic_core import core_schema

    from_json = core_schema.no_info_after_validator_function(
        _from_json(kind), core_schema.dict_schema(keys_schema=core_schema.str_schema())
    )
    return core_schema.json_or_python_schema(
        json_schema=from_json,
        python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_json]),
        serialization=core_schema.plain_serializer_function_ser_schema(_to_json, when_used="json"),
    )
