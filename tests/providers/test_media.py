"""OpenAICaller sends a prompt's images and documents in OpenAI's chat wire format, in every structured mode and
as plain text, checked by FakeOpenAIServer's strict content-part rules."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import StructuredRequest
from agentkit.errors import UsageError
from agentkit.prompting import DocumentPart, ImagePart, PromptPart
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.media_support import PDF, PNG


class Total(BaseModel):
    amount: int


PDF_B64 = base64.b64encode(PDF).decode()
PARTS: tuple[PromptPart, ...] = (
    "The invoice:",
    DocumentPart(data=PDF, filename="invoice.pdf"),
    "and its stamp:",
    ImagePart(data=PNG, media_type="image/png"),
    ImagePart(url="https://example.com/logo.png"),
)
WIRE = [
    {"type": "text", "text": "The invoice:"},
    {
        "type": "file",
        "file": {
            "filename": "invoice.pdf",
            "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode(),
        },
    },
    {"type": "text", "text": "and its stamp:"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}},
    {"type": "image_url", "image_url": {"url": "https://example.com/logo.png"}},
]


def user(request: dict[str, Any]) -> Any:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


@pytest.mark.parametrize("mode", list(StructuredMode))
async def test_images_and_documents_go_out_as_content_parts_in_every_mode(mode: StructuredMode) -> None:
    """image_url parts (data URL or URL) and a file part (file_data, filename), in order; the system message stays
    text; MD_JSON's fence request follows as a text part."""
    async with (
        FakeOpenAIServer([FakeReply.value({"amount": 12})]) as server,
        OpenAICaller(base_url=server.base_url, mode=mode) as caller,
    ):
        done = await caller.complete(StructuredRequest(model="m", system="Read it.", dynamic="", parts=PARTS), Total)
    server.assert_complete()
    assert done.value == Total(amount=12)
    [request] = server.requests
    sent = user(request)
    if mode is StructuredMode.MD_JSON:
        assert sent[-1]["type"] == "text"
        assert "```json" in sent[-1]["text"]
        sent = sent[:-1]
    assert sent == WIRE
    assert isinstance(request["messages"][0]["content"], str)


async def test_a_reask_keeps_the_images_of_the_request() -> None:
    """A schema-invalid reply is re-asked with the same parts (the model sees the image again)."""
    async with (
        FakeOpenAIServer([FakeReply.value({"amount": "many"}), FakeReply.value({"amount": 3})]) as server,
        OpenAICaller(base_url=server.base_url) as caller,
    ):
        await caller.complete(StructuredRequest(model="m", system="Read it.", dynamic="", parts=PARTS), Total)
    assert [user(request) for request in server.requests] == [WIRE, WIRE]


async def test_a_plain_text_call_sends_the_parts_too() -> None:
    """complete_text sends the same content parts."""
    async with FakeOpenAIServer([FakeReply.text("twelve")]) as server, OpenAICaller(base_url=server.base_url) as caller:
        reply = await caller.complete_text(StructuredRequest(model="m", system="", dynamic="", parts=PARTS))
    assert reply.text == "twelve"
    assert server.requests[0]["messages"] == [{"role": "user", "content": WIRE}]


async def test_instructor_caller_refuses_media_naming_the_callers_that_send_it() -> None:
    """InstructorCaller sends text only: a prompt with an image is a UsageError before any request."""
    instructor = pytest.importorskip("instructor")
    import openai

    from agentkit.providers.instructor import InstructorCaller

    client = instructor.from_openai(openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"))
    caller = InstructorCaller(client)
    with pytest.raises(UsageError, match="use OpenAICaller"):
        await caller.complete(StructuredRequest(model="m", system="", dynamic="", parts=PARTS), Total)
