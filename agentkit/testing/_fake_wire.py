"""The wire rules of `FakeOpenAIServer`: what a real server rejects, and what it answers unscripted."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
"""OpenAI's rule for function and schema names, matched against the whole name (`fullmatch`)."""
_ROLES = ("system", "developer", "user", "assistant", "tool")
_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")
_FORMAT_TYPES = ("text", "json_object", "json_schema")
_MAX_DEPTH = 16
# OpenAI's strict mode: the keywords it accepts in a schema and the string formats it knows
_STRICT_KEYWORDS = frozenset(
    {
        "$defs",
        "$ref",
        "additionalProperties",
        "anyOf",
        "description",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "format",
        "items",
        "maxItems",
        "maximum",
        "minItems",
        "minimum",
        "multipleOf",
        "pattern",
        "properties",
        "required",
        "title",
        "type",
    }
)
_STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})


class RequestRejected(ValueError):
    """A request a real server answers with HTTP 400; the message says what is wrong, as OpenAI's do."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def validate_request(body: object) -> dict[str, Any]:
    """Check a chat-completions request body; raise `RequestRejected` where a real server answers 400."""
    if not isinstance(body, dict):
        raise RequestRejected("We could not parse the JSON body of your request: expected a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestRejected("You must provide a model parameter.", "model")
    _check_messages(body.get("messages"))
    _check_response_format(body.get("response_format"))
    tools = _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"), tools)
    _check_parallel_tool_calls(body, tools)
    _check_options(body)
    return body


def _check_messages(messages: object) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestRejected("Invalid 'messages': expected a non-empty array of messages.", "messages")
    awaiting: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RequestRejected(f"Invalid '{where}': expected an object.", where)
        role = message.get("role")
        if role not in _ROLES:
            raise RequestRejected(f"Invalid value for '{where}.role': {role!r}; expected one of {list(_ROLES)}.", where)
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in awaiting:
                raise RequestRejected(
                    f"Invalid '{where}': messages with role 'tool' must be a response to a preceding message "
                    f"with 'tool_calls' (tool_call_id {call_id!r} was not called).",
                    where,
                )
            awaiting.discard(call_id)
            _check_content(message.get("content"), where, role)
            continue
        if awaiting:
            raise RequestRejected(
                f"Invalid '{where}': an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id' (missing {sorted(awaiting)}).",
                where,
            )
        calls = message.get("tool_calls")
        if role == "assistant" and calls is not None:
            awaiting = _check_tool_calls(calls, where)
            if message.get("content") not in (None, ""):
                _check_content(message.get("content"), where, role)
            continue
        _check_content(message.get("content"), where, role)
    if awaiting:
        raise RequestRejected(f"Invalid 'messages': tool calls {sorted(awaiting)} have no tool message.", "messages")


def _check_content(content: object, where: str, role: object = "user") -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise RequestRejected(f"Invalid '{where}.content': expected a string or a non-empty array of parts.", where)
    allowed = _PARTS_OF_ROLE.get(str(role), ("text",))
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        if not isinstance(part, dict) or part.get("type") not in _PART_TYPES:
            raise RequestRejected(f"Invalid content part in '{where}': {part!r}.", where)
        kind = part["type"]
        if kind not in allowed:
            raise RequestRejected(
                f"Invalid '{at}': a message with role {role!r} cannot hold content parts of type '{kind}' "
                f"(it takes {', '.join(repr(a) for a in allowed)}).",
                at,
            )
        extra = set(part) - {"type", kind}
        if extra:
            raise RequestRejected(f"Invalid '{at}': unrecognized keys {sorted(extra)} in a '{kind}' part.", at)
        _check_part(kind, part, where, at)


def _check_part(kind: str, part: Mapping[str, Any], where: str, at: str) -> None:
    """One content part's own shape, by its type."""
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise RequestRejected(f"Invalid text part in '{where}': 'text' must be a string.", where)
    elif kind == "image_url":
        _check_image_url(part.get("image_url"), f"{at}.image_url")
    elif kind == "file":
        _check_file(part.get("file"), f"{at}.file")
    elif kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or audio.get("format") not in ("wav", "mp3") or set(audio) != {"data", "format"}:
            raise RequestRejected(f"Invalid '{at}.input_audio': expected an object with 'data' and 'format'.", at)
        _base64(audio.get("data"), f"{at}.input_audio.data")
    elif not isinstance(part.get("refusal"), str):
        raise RequestRejected(f"Invalid '{at}.refusal': expected a string.", at)


_PARTS_OF_ROLE: dict[str, tuple[str, ...]] = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
}
"""The content part types each role may send (OpenAI's chat completions)."""
_IMAGE_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_DATA_URL = re.compile(r"\Adata:([a-z]+/[a-z0-9.+-]+);base64,(.*)\Z", re.DOTALL)


def _check_image_url(spec: object, at: str) -> None:
    if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
        raise RequestRejected(f"Invalid '{at}': expected an object with a string 'url'.", at)
    extra = set(spec) - {"url", "detail"}
    if extra:
        raise RequestRejected(f"Invalid '{at}': unrecognized keys {sorted(extra)}.", at)
    if spec.get("detail", "auto") not in ("auto", "low", "high"):
        raise RequestRejected(f"Invalid '{at}.detail': expected 'auto', 'low' or 'high'; got {spec['detail']!r}.", at)
    url: str = spec["url"]
    if url.startswith(("https://", "http://")):
        return
    match = _DATA_URL.match(url)
    if match is None or match.group(1) not in _IMAGE_MAGIC:
        raise RequestRejected(
            f"Invalid '{at}.url': expected an http(s) URL or a base64-encoded data URL with an image MIME type "
            f"({', '.join(sorted(_IMAGE_MAGIC))}), e.g. 'data:image/png;base64,...'; got {url[:40]!r}.",
            at,
        )
    data = _base64(match.group(2), f"{at}.url")
    if not data.startswith(_IMAGE_MAGIC[match.group(1)]) or (match.group(1) == "image/webp" and data[8:12] != b"WEBP"):
        raise RequestRejected(
            f"Invalid '{at}.url': you uploaded an unsupported image; its bytes are not a valid {match.group(1)}.", at
        )


def _check_file(spec: object, at: str) -> None:
    if not isinstance(spec, dict):
        raise RequestRejected(f"Invalid '{at}': expected an object.", at)
    extra = set(spec) - {"file_data", "file_id", "filename"}
    if extra:
        raise RequestRejected(f"Invalid '{at}': unrecognized keys {sorted(extra)}.", at)
    if ("file_data" in spec) == ("file_id" in spec):
        raise RequestRejected(f"Invalid '{at}': expected exactly one of 'file_data' and 'file_id'.", at)
    if "file_id" in spec:
        if not isinstance(spec["file_id"], str) or not spec["file_id"]:
            raise RequestRejected(f"Invalid '{at}.file_id': expected a non-empty string.", at)
        return
    if not isinstance(spec.get("filename"), str) or not spec["filename"]:
        raise RequestRejected(f"Invalid '{at}': 'filename' is required with 'file_data'.", at)
    data_url = spec["file_data"]
    match = _DATA_URL.match(data_url) if isinstance(data_url, str) else None
    if match is None or match.group(1) != "application/pdf":
        raise RequestRejected(
            f"Invalid '{at}.file_data': expected a base64-encoded data URL of a PDF "
            "('data:application/pdf;base64,...').",
            at,
        )
    if not _base64(match.group(2), f"{at}.file_data").startswith(b"%PDF-"):
        raise RequestRejected(f"Invalid '{at}.file_data': the file is not a valid PDF.", at)


def _base64(text: object, at: str) -> bytes:
    try:
        if not isinstance(text, str) or not text:
            raise ValueError("empty")
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise RequestRejected(f"Invalid '{at}': the data is not valid base64.", at) from None


def _check_tool_calls(calls: object, where: str) -> set[str]:
    if not isinstance(calls, list) or not calls:
        raise RequestRejected(f"Invalid '{where}.tool_calls': expected a non-empty array.", where)
    ids: set[str] = set()
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not isinstance(function, dict):
            raise RequestRejected(f"Invalid tool call in '{where}': {call!r}.", where)
        _check_name(function.get("name"), f"{where}.tool_calls.function.name")
        if not isinstance(function.get("arguments"), str):
            raise RequestRejected(f"Invalid tool call in '{where}': 'arguments' must be a JSON string.", where)
        ids.add(call["id"])
    return ids


def _check_name(name: object, param: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RequestRejected(
            f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern "
            f"'^[a-zA-Z0-9_-]+$' (1 to 64 characters), got {name!r}.",
            param,
        )


def _check_response_format(response_format: object) -> None:
    if response_format is None:
        return
    if not isinstance(response_format, dict) or response_format.get("type") not in _FORMAT_TYPES:
        raise RequestRejected(
            f"Invalid 'response_format': {response_format!r}; 'type' must be one of {list(_FORMAT_TYPES)}.",
            "response_format",
        )
    if response_format["type"] != "json_schema":
        return
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise RequestRejected("Missing required parameter: 'response_format.json_schema'.", "response_format")
    _check_name(spec.get("name"), "response_format.json_schema.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise RequestRejected("Invalid 'response_format.json_schema.schema': expected an object.", "response_format")
    if _strict(spec, "response_format.json_schema.strict"):
        check_strict_schema(schema, f"response_format {spec['name']!r}", "response_format")


def _check_tools(tools: object) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list) or not tools:
        raise RequestRejected("Invalid 'tools': expected a non-empty array.", "tools")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise RequestRejected(f"Invalid 'tools[{index}]': expected {{'type': 'function', 'function': {{...}}}}.")
        name = function.get("name")
        _check_name(name, f"tools[{index}].function.name")
        parameters = function.get("parameters", {})
        if not isinstance(parameters, dict):
            raise RequestRejected(f"Invalid 'tools[{index}].function.parameters': expected an object.", "tools")
        if _strict(function, f"tools[{index}].function.strict"):
            check_strict_schema(parameters, f"function {name!r}", f"tools[{index}].function.parameters")
        if name in names:
            raise RequestRejected(f"Invalid 'tools': the function name {name!r} appears twice.", "tools")
        names.add(str(name))
    return names


def _check_tool_choice(choice: object, tools: set[str]) -> None:
    if choice is None or choice == "none":
        return
    if choice in ("auto", "required"):
        if not tools:
            raise RequestRejected("Invalid 'tool_choice': it is only allowed when 'tools' are given.", "tool_choice")
        return
    function = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(function, dict):
        raise RequestRejected(f"Invalid 'tool_choice': {choice!r}.", "tool_choice")
    if function.get("name") not in tools:
        raise RequestRejected(
            f"Invalid 'tool_choice': the function {function.get('name')!r} is not among the tools {sorted(tools)}.",
            "tool_choice",
        )


def _strict(spec: Mapping[str, Any], param: str) -> bool:
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise RequestRejected(f"Invalid '{param}': {strict!r}; expected a boolean.", param)
    return strict is True


def check_strict_schema(schema: Mapping[str, Any], label: str, param: str) -> None:
    """Reject, as OpenAI does, a schema marked `strict` that breaks the strict-mode rules.

    The root is a closed object; every object is closed (`additionalProperties: false`) and lists
    every property in `required`; only the strict keywords appear (no `oneOf`,
    `discriminator`, `allOf`, `default`, `minLength`...); every node has a `type` unless it
    is a union, an enum or a `$ref`, and nothing sits beside a `$ref`.
    """
    if schema.get("type") != "object" or "anyOf" in schema:
        raise RequestRejected(f"Invalid schema for {label}: the root must be an object, not a union.", param)
    _check_strict_node(schema, (), label, param)


def _check_strict_node(node: object, context: tuple[str, ...], label: str, param: str) -> None:
    def refuse(problem: str) -> RequestRejected:
        return RequestRejected(f"Invalid schema for {label}: In context={context}, {problem}", param)

    if not isinstance(node, dict):
        raise refuse("a schema must be an object.")
    _check_strict_keywords(node, refuse)
    kind = node.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node:
        _check_strict_object(node, refuse)
        for name, sub in (node.get("properties") or {}).items():
            _check_strict_node(sub, (*context, "properties", name), label, param)
    if "items" in node:
        _check_strict_node(node["items"], (*context, "items"), label, param)
    for index, variant in enumerate(node.get("anyOf") or ()):
        _check_strict_node(variant, (*context, "anyOf", str(index)), label, param)
    for name, sub in (node.get("$defs") or {}).items():
        _check_strict_node(sub, ("$defs", name), label, param)


def _check_strict_keywords(node: Mapping[str, Any], refuse: Callable[[str], RequestRejected]) -> None:
    for key in node:
        if key not in _STRICT_KEYWORDS:
            raise refuse(f"'{key}' is not permitted.")
    if "$ref" in node and set(node) - {"$ref", "$defs"}:
        raise refuse(f"'$ref' cannot have keywords {sorted(set(node) - {'$ref', '$defs'})}.")
    if not {"type", "anyOf", "enum", "$ref"} & set(node):
        raise refuse("schema must have a 'type' key.")
    if "format" in node and node["format"] not in _STRICT_FORMATS:
        raise refuse(f"format {node['format']!r} is not supported.")


def _check_strict_object(node: Mapping[str, Any], refuse: Callable[[str], RequestRejected]) -> None:
    if node.get("additionalProperties") is not False:
        raise refuse("'additionalProperties' is required to be supplied and to be false.")
    properties = node.get("properties") or {}
    required = node.get("required")
    missing = [name for name in properties if not isinstance(required, list) or name not in required]
    if missing or not isinstance(required, list) or set(required) - set(properties):
        raise refuse(
            "'required' is required to be supplied and to be an array including every key in properties. "
            f"Missing {missing}."
        )


def _check_parallel_tool_calls(body: Mapping[str, Any], tools: set[str]) -> None:
    parallel = body.get("parallel_tool_calls")
    if parallel is None:
        return
    if not isinstance(parallel, bool):
        raise RequestRejected(
            f"Invalid 'parallel_tool_calls': {parallel!r}; expected a boolean.", "parallel_tool_calls"
        )
    if not tools:
        raise RequestRejected(
            "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are specified.", "parallel_tool_calls"
        )


def _check_options(body: Mapping[str, Any]) -> None:
    ranges = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}
    for name, (low, high) in ranges.items():
        value = body.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high
        ):
            raise RequestRejected(f"Invalid '{name}': {value!r}; expected a number from {low} to {high}.", name)
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RequestRejected(f"Invalid '{name}': {value!r}; expected an integer >= 1.", name)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestRejected(f"Invalid 'seed': {seed!r}; expected an integer.", "seed")
    if body.get("n", 1) != 1:
        raise RequestRejected("The fake server answers one choice only; drop 'n' or set it to 1.", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestRejected(f"Invalid 'stream': {stream!r}; expected a boolean.", "stream")
    if body.get("stream_options") is not None and not stream:
        raise RequestRejected(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
        )


def forced_tool(request: Mapping[str, Any]) -> str | None:
    """The function the request forces a call of, if it does."""
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        return str(choice["function"]["name"])
    tools = request.get("tools") or []
    if choice == "required" and len(tools) == 1:
        return str(tools[0]["function"]["name"])
    return None


def schema_of(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema the request carries: the forced tool's, the response format's, or one in the prompt."""
    forced = forced_tool(request)
    if forced is not None:
        for tool in request.get("tools") or []:
            if tool["function"]["name"] == forced:
                return dict(tool["function"].get("parameters") or {})
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return dict(response_format["json_schema"].get("schema") or {})
    for message in request["messages"]:
        if (found := _schema_in_text(_text_of(message))) is not None:
            return found
    return None


def _text_of(message: Mapping[str, Any]) -> str:
    """A message's text: its content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and part.get("type") == "text")
    return content if isinstance(content, str) else ""


def _schema_in_text(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict) and ("properties" in value or value.get("type") == "object"):
            return value
        position = text.find("{", end)
    return None


def wants_fence(request: Mapping[str, Any]) -> bool:
    """The prompt asks for the JSON inside a fenced ```json block (instructor's MD_JSON mode)."""
    return any("```json" in _text_of(message) for message in request["messages"] if message.get("role") == "user")


def auto_text(request: Mapping[str, Any]) -> str:
    """The unscripted reply to a request that carries no schema."""
    if (request.get("response_format") or {}).get("type") == "json_object":
        return "{}"
    return "This is a reply from the fake OpenAI server."


def instance_of(schema: Mapping[str, Any]) -> Any:
    """A minimal instance of a JSON schema: defaults where given, first options, booleans true."""
    return _instance(schema, schema, 0)


def _instance(node: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return None
    if "$ref" in node:
        return _instance(_resolve(str(node["$ref"]), root), root, depth + 1)
    for key in ("default", "const"):
        if key in node:
            return node[key]
    if node.get("enum"):
        return node["enum"][0]
    options = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
    if options:
        chosen = [option for option in options if option.get("type") != "null"] or options
        return _instance(chosen[0], root, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((name for name in kind if name != "null"), "null")
    if kind == "object" or "properties" in node:
        properties = node.get("properties") or {}
        return {name: _instance(prop, root, depth + 1) for name, prop in properties.items()}
    if kind == "array":
        return [_instance(node.get("items") or {}, root, depth + 1) for _ in range(int(node.get("minItems", 0)))]
    if kind == "string":
        return _string(node)
    if kind in ("integer", "number"):
        return _number(node, integer=kind == "integer")
    return True if kind == "boolean" else None


def _resolve(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def _string(node: Mapping[str, Any]) -> str:
    formats = {
        "date-time": "2024-01-01T00:00:00Z",
        "date": "2024-01-01",
        "uri": "https://example.com",
        "email": "a@example.com",
    }
    text = formats.get(str(node.get("format")), "example")
    low, high = int(node.get("minLength", 0)), node.get("maxLength")
    text = text.ljust(low, "x")
    return text if high is None else text[: int(high)]


def _number(node: Mapping[str, Any], *, integer: bool) -> int | float:
    value: float = 0
    if "minimum" in node and value < node["minimum"]:
        value = node["minimum"]
    if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
        value = node["exclusiveMinimum"] + 1
    if "maximum" in node and value > node["maximum"]:
        value = node["maximum"]
    if "exclusiveMaximum" in node and value >= node["exclusiveMaximum"]:
        value = node["exclusiveMaximum"] - 1
    return int(value) if integer else float(value)
