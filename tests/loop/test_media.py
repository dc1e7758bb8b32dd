"""Images and documents in prompts: `ImagePart` and `DocumentPart` in a prompt's dynamic part, a tool's image items
shown to the model the next round, end to end through the loop against `FakeOpenAIServer`."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from agentkit import (
    LoopConfig,
    PriorCall,
    Prompt,
    RetryPolicy,
    RoleSpec,
    StructuredRequest,
    Tier,
    ToolRoundInfo,
    run_tool_loop,
    tool,
)
from agentkit._session import prompt_digest
from agentkit.errors import UsageError
from agentkit.prompting import DocumentPart, ImagePart, PromptPart, reflective_prompt
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, ScriptedCaller, call_step, done_step
from tests.media_support import JPEG, OTHER_PNG, PDF, PNG

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


class Page(BaseModel):
    url: str


@tool(tier=Tier.READ_ONLY)
def screenshot(args: Page) -> list[str | ImagePart]:
    """Take a screenshot of a page."""
    return [f"the page {args.url}", ImagePart(data=PNG, media_type="image/png")]


class Looker:
    """Renders the standard prompt with the request's own image next to its text."""

    def __init__(self, image: ImagePart) -> None:
        self.image = image
        self.infos: list[ToolRoundInfo[str | ImagePart]] = []

    def role(self) -> RoleSpec:
        return RoleSpec(model="vision")

    def render(self, ctx: str, info: ToolRoundInfo[str | ImagePart]) -> Prompt:
        self.infos.append(info)
        prompt = reflective_prompt("Compare pages.", ctx, info)
        return Prompt(
            system=prompt.system, parts=("The reference:", self.image, "\n", *(prompt.parts or (prompt.dynamic,)))
        )


def user_content(request: dict[str, Any]) -> Any:
    [user] = [m for m in request["messages"] if m["role"] == "user"]
    return user["content"]


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def test_an_image_part_holds_bytes_with_their_media_type_or_a_url() -> None:
    """Bytes go with the media type they are in, a URL is http(s); anything else is refused naming the fix."""
    image = ImagePart(data=PNG, media_type="image/png")
    assert (image.digest, image.data_url) == (hashlib.sha256(PNG).hexdigest(), data_url("image/png", PNG))
    assert ImagePart(url="https://example.com/a.png").data_url == "https://example.com/a.png"
    refused: list[dict[str, Any]] = [
        {},
        {"data": PNG, "media_type": "image/png", "url": "https://example.com/a.png"},
        {"data": PNG},
        {"data": PNG, "media_type": "image/jpeg"},
        {"data": b"", "media_type": "image/png"},
        {"url": "file:///etc/passwd"},
    ]
    for fields in refused:
        with pytest.raises(UsageError, match="ImagePart"):
            ImagePart(**fields)
    with pytest.raises(UsageError, match="PDF"):
        DocumentPart(data=PNG)


def test_a_dynamic_part_of_text_only_is_the_string_it_always_was() -> None:
    """Text parts are merged, and parts without media are the dynamic text: digested as that string."""
    prompt = Prompt(system="s", parts=("a ", "b"))
    assert (prompt.dynamic, prompt.parts) == ("a b", ())
    assert prompt_digest(prompt) == hashlib.sha256(json.dumps(["s", "a b"]).replace(" ", "", 1).encode()).hexdigest()
    image = ImagePart(data=PNG, media_type="image/png")
    with_image = Prompt(system="s", parts=("a", "b", image, ""))
    assert (with_image.parts, with_image.dynamic) == (("ab", image), f"ab[image image/png sha256:{image.digest[:12]}]")
    with pytest.raises(UsageError, match="str, ImagePart and DocumentPart"):
        Prompt(system="s", parts=("a", 3))  # type: ignore[arg-type]  # the mistake under test


def test_a_prompts_digest_counts_an_image_by_its_digest_not_its_bytes() -> None:
    """The same image digests the same; a changed one, or another media type, digests otherwise."""
    same = [Prompt(system="s", parts=("look", ImagePart(data=PNG, media_type="image/png"))) for _ in range(2)]
    changed = Prompt(system="s", parts=("look", ImagePart(data=OTHER_PNG, media_type="image/png")))
    jpeg = Prompt(system="s", parts=("look", ImagePart(data=JPEG, media_type="image/jpeg")))
    digests = {prompt_digest(p) for p in [*same, changed, jpeg]}
    assert len(digests) == 3


def test_parts_round_trip_through_json_as_base64_or_url() -> None:
    """A request with parts survives pydantic's JSON (a Temporal payload): bytes as base64, a URL as itself."""
    parts: tuple[PromptPart, ...] = (
        "see",
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/a.png"),
        DocumentPart(data=PDF, filename="invoice.pdf"),
    )
    request = StructuredRequest(model="m", system="s", dynamic="", parts=parts)
    adapter = TypeAdapter(StructuredRequest)
    dumped = adapter.dump_json(request)
    assert base64.b64encode(PNG) in dumped
    assert adapter.validate_json(dumped) == request


def test_reflective_prompt_shows_a_tools_image_items_as_images() -> None:
    """An item that is an ImagePart goes into the prompt as the image, where its line in the earlier calls is."""
    image = ImagePart(data=PNG, media_type="image/png")

    info: ToolRoundInfo[str | ImagePart] = ToolRoundInfo(
        round=2,
        max_rounds=3,
        is_final_round=False,
        prior_calls=(PriorCall(round=1, tool_name="screenshot", args=Page(url="a"), batch=("caption", image)),),
    )
    prompt = reflective_prompt("Look.", "compare", info)
    text, shown, rest = prompt.parts
    assert prompt.dynamic.endswith("Reflect on the results above, then reply with your next step.")
    assert shown is image
    assert isinstance(text, str)
    assert text.endswith("returned 2 results:\n   - caption\n   - an image (image/png):\n")
    assert isinstance(rest, str)
    assert "Reflect on the results above" in rest


async def test_a_tools_image_reaches_the_model_the_next_round_as_an_image_url_part() -> None:
    """End to end: round 1 sends the request's image; the tool returns a screenshot; round 2 sends both images as
    image_url parts in reading order, and the executor's view of the earlier call holds the image part."""
    reference = ImagePart(data=JPEG, media_type="image/jpeg")
    looker = Looker(reference)
    async with (
        FakeOpenAIServer([call_step(Page(url="a")), done_step("same")]) as server,
        OpenAICaller(base_url=server.base_url) as caller,
    ):
        result = await run_tool_loop(caller, looker, screenshot, "compare the page", FAST)
    server.assert_complete()
    assert result.rounds == 2
    first, second = (user_content(request) for request in server.requests)
    assert [part["type"] for part in first] == ["text", "image_url", "text"]
    assert first[1] == {"type": "image_url", "image_url": {"url": data_url("image/jpeg", JPEG)}}
    assert [part["type"] for part in second] == ["text", "image_url", "text", "image_url", "text"]
    assert second[3] == {"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}}
    assert second[2]["text"].endswith("- the page a\n   - an image (image/png):\n")
    assert looker.infos[1].prior_calls[0].batch[1] == ImagePart(data=PNG, media_type="image/png")


async def test_a_caller_that_reads_text_sees_a_placeholder_and_the_parts_beside_it() -> None:
    """`StructuredRequest.dynamic` stays text (each image a placeholder with its digest) for callers that send
    text; `parts` holds the dynamic part in full for callers that send images."""
    reference = ImagePart(data=JPEG, media_type="image/jpeg")
    caller = ScriptedCaller([done_step("same")])
    await run_tool_loop(caller, Looker(reference), screenshot, "compare", FAST)
    [request] = caller.requests
    assert request.dynamic.startswith(f"The reference:[image image/jpeg sha256:{reference.digest[:12]}]\nRequest:")
    assert request.parts[:2] == ("The reference:", reference)
    text_only = StructuredRequest(model="m", system="s", dynamic="", parts=("a", "b"))
    assert (text_only.dynamic, text_only.parts) == ("ab", ())
