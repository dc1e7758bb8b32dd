"""assert_type checks for images and documents in prompts (mypy only)."""

from __future__ import annotations

from typing import Literal, assert_type

from agentkit import Prompt, StructuredRequest, Tier, ToolRoundInfo, tool
from agentkit._tools import FunctionTool
from agentkit.prompting import DocumentPart, ImagePart, PromptPart, reflective_prompt
from tests.typing.models import SearchArgs

PNG = b"\x89PNG\r\n\x1a\n"


@tool(tier=Tier.READ_ONLY)
def screenshot(args: SearchArgs) -> list[str | ImagePart]:
    """A page and its screenshot."""
    return [args.query, ImagePart(data=PNG, media_type="image/png")]


def check(info: ToolRoundInfo[str | ImagePart]) -> None:
    image = ImagePart(data=PNG, media_type="image/png")
    by_url = ImagePart(url="https://example.com/a.png")
    document = DocumentPart(data=b"%PDF-1.4", filename="a.pdf")
    assert_type(image.data, bytes | None)
    assert_type(image.media_type, Literal["image/png", "image/jpeg", "image/gif", "image/webp"] | None)
    assert_type(by_url.url, str | None)
    assert_type(image.digest, str)
    assert_type(image.data_url, str)
    assert_type(document.data, bytes)
    assert_type(document.media_type, Literal["application/pdf"])
    assert_type(document.filename, str)
    parts: tuple[PromptPart, ...] = ("look:", image, document)
    prompt = Prompt(system="s", parts=parts)
    assert_type(prompt.dynamic, str)  # the text view, for code that reads the prompt as text
    assert_type(prompt.parts, tuple[str | ImagePart | DocumentPart, ...])
    request = StructuredRequest(model="m", system="s", dynamic="", parts=parts)
    assert_type(request.dynamic, str)  # text for callers that send text only
    assert_type(request.parts, tuple[str | ImagePart | DocumentPart, ...])
    assert_type(reflective_prompt("d", ("request", image), info), Prompt)
    assert_type(screenshot, FunctionTool[SearchArgs, str | ImagePart])
    assert_type(info.prior_calls[0].batch[0], str | ImagePart)
