"""The reflective prompt: the standard framing of a tool-loop round, so `render()` is a few lines.

`reflective_prompt` puts everything stable (the doctrine, how a round works, the tools, an
optional worked example) in `Prompt.system`, byte-identical across rounds so provider prompt
caching works, and everything that changes (the request, where the round sits in the budget, the
earlier calls with their results, observations and proposals, what to check this round) in
`Prompt.dynamic`:

```python
def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
    return reflective_prompt(DOCTRINE, ctx, info, render_item=lambda doc: doc.title)
```

Measured on a 0.5B model: a worked example is followed only when it is laid out exactly as the
real rounds are, and a round is acted on only when its prompt ends with what to check. So
`worked_example` renders its rounds with the code that renders the real ones, and both take
the same `check` line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from agentkit._agent import PriorCall, Prompt, ToolRoundInfo
from agentkit._media import DocumentMediaType, DocumentPart, ImageMediaType, ImagePart, PromptPart
from agentkit._proposals import ProposedAction, call_digest
from agentkit._tools import AnyTool
from agentkit.errors import UsageError

__all__ = [
    "USE_THE_TOOL",
    "DocumentMediaType",
    "DocumentPart",
    "ImageMediaType",
    "ImagePart",
    "PromptPart",
    "reflective_prompt",
    "worked_example",
]

R = TypeVar("R")

# Their home is private; this module is where they are imported from.
ImagePart.__module__ = DocumentPart.__module__ = __name__

USE_THE_TOOL = (
    "Use the tool to find what the request needs; do not answer from memory, even when you think you "
    "know the answer: look it up first. Only what the tool returned counts as known."
)
"""A doctrine line for retrieval agents: look it up, never recall it (small models need it said)."""

_HOW_A_ROUND_WORKS = """\
How each round works:
- Reply with exactly one step. Write its "rationale" first: one short sentence on what the \
earlier results establish and what is still missing. Then the "decision".
- To call a tool, the decision is {"done": false, "call": ...} with the call. When the results so \
far answer the request, or nothing is needed, it is {"done": true}.
- Do not repeat a call you have already made: a repeated call ends the run.
- A call marked as proposed did not run; it awaits a human's approval. Do not propose it again.
- Rounds are limited; each prompt says which round this is. On the final round, commit."""

_FINAL_ROUND = (
    "This is the final round: commit now. If the results above answer the request, set done to "
    "true. Otherwise make the one call most likely to complete it; you will not see its results."
)
_CLOSING_ROUND = (
    "The tools are done: no more calls can be made. Reply with done set to true and the answer, "
    "taken from the results above only."
)
_NEXT_ROUND = "Reflect on the results above, then reply with your next step."
_FIRST_ROUND = (
    "Nothing is known yet, so unless the request needs no tool, call one (done: false). Reply with your first step."
)
"""Measured on a 0.5B model under a step schema that ties done to the call (benchmarks/README.md):
told only to reply, it wrote an answer from memory into its rationale and said done at once in 8
of 10 runs; told that nothing is known yet, it did so in 3, and retrieved the answer in 7."""
_NOTHING_YET = "Nothing has been looked up yet."
_EARLIER = "Earlier calls and what came of them:"


def reflective_prompt(
    doctrine: str,
    request: str | Sequence[PromptPart],
    info: ToolRoundInfo[R],
    *,
    render_item: Callable[[R], str] | None = None,
    example: str | None = None,
    tools: Sequence[AnyTool] = (),
    check: str | None = None,
) -> Prompt:
    """The standard reflect-on-results prompt for one tool-loop round.

    Args:
        doctrine: The agent's stable rules: its job, what counts as enough, what to avoid
            (`USE_THE_TOOL` is a ready line for retrieval agents).
        request: What this run is asked to do: text, or text with images and documents (`ImagePart`,
            `DocumentPart`), which the prompt's dynamic part then holds where the request is.
        info: The round, as the loop passes it to `render`.
        render_item: One result item as prompt text; pydantic items default to compact JSON,
            anything else to `str`.
        example: A worked example for the system part (see `worked_example`; give it the same
            `render_item` layout and `check`).
        tools: Tools to list by name and description in the system part.
        check: What to check this round, the last line of every round that has results and is
            not the final one, e.g. "If a passage above states the answer, set done to true;
            otherwise search with new keywords." The default asks to reflect on the results.

    Returns:
        A `Prompt` whose `system` depends only on `doctrine`, `example` and `tools`.
    """
    system = [doctrine.strip(), _HOW_A_ROUND_WORKS]
    if tools:
        system.append("Tools:\n" + "\n".join(f"- {t.name}: {t.description.strip()}" for t in tools))
    if example:
        system.append(example.strip())
    shown: list[ImagePart | DocumentPart] = []
    if not isinstance(request, str):  # the request's images come first in the text, then the results'
        request = "".join(part if isinstance(part, str) else _mark(part, shown) for part in request)
    show = _showing_media(render_item or _default_item, shown)
    earlier = _earlier_calls(info, show)
    waiting = _unlisted_proposals(info)
    closing = _CLOSING_ROUND if info.closing_round else _closing(info.is_final_round, bool(earlier or waiting), check)
    dynamic = _round_text(request, earlier, waiting=waiting, budget=_budget_line(info), closing=closing)
    if shown:
        return Prompt(system="\n\n".join(system), parts=_with_media(dynamic, shown))
    return Prompt(system="\n\n".join(system), dynamic=dynamic)


def worked_example(
    request: str,
    call: BaseModel | Mapping[str, Any],
    results: Sequence[str],
    *,
    tool: str | None = None,
    tool_name: str | None = None,
    then: BaseModel | Mapping[str, Any] | None = None,
    then_tool: str | None = None,
    check: str | None = None,
    search_rationale: str = "I have nothing yet; I look it up.",
    done_rationale: str = "The result answers the request; I am done.",
    answer: BaseModel | Mapping[str, Any] | None = None,
) -> str:
    """A two-round demonstration (a call, then done), each round shown as `reflective_prompt` shows it.

    Round 1 shows the request with nothing looked up and replies with `call`; round 2 shows the
    request with that call and its `results`, ends with `check`, and replies done (or, with
    `then`, makes that call: the action the results called for). The rounds are rendered by the
    code that renders real rounds (only the budget line is left out), so a small model sees the
    example in exactly the layout it must act on.

    Args:
        request: The example request (a different one from the real requests, so the model
            cannot copy the answer).
        call: The example call's arguments.
        results: The example results, rendered as `render_item` renders real ones.
        tool: The tool's name when the loop has a set of tools (the call is then
            `{"tool": name, "args": {...}}`); omit it for a single tool.
        tool_name: The name the earlier call is shown under (default: `tool`, else
            `"search"`); give the single tool's real name.
        then: Round 2's call instead of done, e.g. the irreversible action a search was for.
        then_tool: The tool of `then` when the loop has a set of tools.
        check: The same `check` line as given to `reflective_prompt`.
        search_rationale: The rationale of the first step.
        done_rationale: The rationale of the second step (done, or the `then` call).
        answer: The answer the done step gives, for a loop with `answer=` (its done step carries one).
    """
    if answer is not None and then is not None:
        raise UsageError("worked_example: an answer goes with the done step, and `then` replaces it with a call")
    # The replies in the wire shape a constrained decoder writes (see agentkit._step).
    first = {"rationale": search_rationale, "decision": {"done": False, "call": _wire(call, tool)}}
    finish: dict[str, Any] = {"done": True} if then is None else {"done": False, "call": _wire(then, then_tool)}
    if answer is not None:
        finish["answer"] = _args_of(answer)
    second = {"rationale": done_rationale, "decision": finish}
    shown = f"{tool_name or tool or 'search'} {_compact(_args_of(call))}"
    found = _batch(f"1. Round 1: {shown}", results, str)
    lines = [
        f"Example of a good exchange ({'a call, then another' if then is not None else 'a call, then done'}), "
        "for a different request:",
        "",
        "Round 1 prompt:",
        _round_text(request, "", waiting="", budget="", closing=_FIRST_ROUND),
        f"Round 1 reply: {_json(first)}",
        "",
        "Round 2 prompt:",
        _round_text(request, f"{_EARLIER}\n{found}", waiting="", budget="", closing=check or _NEXT_ROUND),
        f"Round 2 reply: {_json(second)}",
    ]
    return "\n".join(lines)


_MEDIA_MARK = "\x00agentkit-media\x00"
"""Where a tool's image or document item goes in the round's text, until the text is split into parts."""


def _showing_media(show: Callable[[R], str], shown: list[ImagePart | DocumentPart]) -> Callable[[R], str]:
    """`show`, except that an item that is an `ImagePart` or a `DocumentPart` is kept for the prompt's parts
    (the model sees the image itself), with a line that says what it is in the text."""

    def showing(item: R) -> str:
        if isinstance(item, ImagePart | DocumentPart):
            what = f"an image ({item.media_type or 'by URL'})" if isinstance(item, ImagePart) else "a PDF document"
            return f"{what}:\n{_mark(item, shown)}"
        return show(item)

    return showing


def _mark(part: ImagePart | DocumentPart, shown: list[ImagePart | DocumentPart]) -> str:
    shown.append(part)
    return _MEDIA_MARK


def _with_media(text: str, shown: Sequence[ImagePart | DocumentPart]) -> tuple[PromptPart, ...]:
    """The round's text as parts: each media mark replaced by the image or document it stands for."""
    pieces = text.split(_MEDIA_MARK)
    if len(pieces) != len(shown) + 1:  # a mark in the request or in an item's own text: never a prompt of ours
        raise UsageError("reflective_prompt: the request or a result's text holds agentkit's media mark (a NUL byte)")
    parts: list[PromptPart] = [pieces[0]]
    for media, piece in zip(shown, pieces[1:], strict=True):
        parts += [media, piece]
    return tuple(parts)


def _closing(final: bool, has_results: bool, check: str | None) -> str:
    if final:
        return _FINAL_ROUND
    return (check or _NEXT_ROUND) if has_results else _FIRST_ROUND


def _round_text(request: str, earlier: str, *, waiting: str, budget: str, closing: str) -> str:
    parts = [f"Request:\n{request.strip()}"]
    if budget:
        parts.append(budget)
    parts.append(earlier or f"{_EARLIER}\n{_NOTHING_YET}")
    if waiting:
        parts.append(waiting)
    parts.append(closing)
    return "\n\n".join(parts)


def _args_of(call: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    return call.model_dump(mode="json") if isinstance(call, BaseModel) else dict(call)


def _wire(call: BaseModel | Mapping[str, Any], tool: str | None) -> dict[str, Any]:
    args = _args_of(call)
    return args if tool is None else {"tool": tool, "args": args}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _compact(value: object) -> str:
    # The layout model_dump_json gives a real call's arguments.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _default_item(item: object) -> str:
    if isinstance(item, BaseModel):
        return item.model_dump_json()
    return str(item)


def _budget_line(info: ToolRoundInfo[Any]) -> str:
    if info.max_rounds is None:
        return f"Round {info.round} (no fixed limit on rounds)."
    left = info.max_rounds - info.round
    after = "this is the last one" if left <= 0 else f"{left} more after this one"
    return f"Round {info.round} of {info.max_rounds} ({after})."


def _call_text(tool_name: str, args: BaseModel) -> str:
    return f"{tool_name} {args.model_dump_json()}"


def _earlier_calls(info: ToolRoundInfo[R], show: Callable[[R], str]) -> str:
    # Calls left out by LoopConfig.context are said to be left out, and the numbering goes on after them.
    left = _left_out(info)
    first = info.omitted.calls + 1
    if info.prior_calls:
        entries = [_prior_call(n, call, show) for n, call in enumerate(info.prior_calls, first)]
        return f"{_EARLIER}\n" + "\n".join([*left, *entries])
    if info.prior_results:
        # An info built without call records still carries the batches to reflect on.
        entries = [_batch(f"{n}. Results", batch, show) for n, batch in enumerate(info.prior_results, first)]
        return "Earlier results:\n" + "\n".join([*left, *entries])
    return f"{_EARLIER}\n" + "\n".join(left) if left else ""


def _left_out(info: ToolRoundInfo[Any]) -> list[str]:
    omitted = info.omitted
    if not omitted.calls:
        return []
    calls = "call" if omitted.calls == 1 else "calls"
    results = "result" if omitted.items == 1 else "results"
    lines = [
        f"(The {omitted.calls} earliest {calls}, with {omitted.items} {results}, are left out to keep this "
        "prompt short; their results still count as found.)"
    ]
    if omitted.summary:
        lines.append(f"Summary of the left-out calls:\n{omitted.summary.strip()}")
    return lines


def _prior_call(n: int, call: PriorCall[R], show: Callable[[R], str]) -> str:
    head = f"{n}. Round {call.round}: {_call_text(call.tool_name, call.args)}"
    if call.proposed:
        return f"{head}\n   proposed for human approval; it did not run"
    if call.repeats is not None:
        return f"{head}\n   not run: it repeats the call of round {call.repeats}, whose results are above"
    if call.observation is not None:
        return f"{head}\n   the tool did not run it: {call.observation}"
    if call.amended:
        changed = ", ".join(call.amended)
        head += f"\n   a human amended it before approving (changed: {changed}); it ran with the args shown"
    return _batch(head, call.batch, show)


def _batch(head: str, batch: Sequence[R], show: Callable[[R], str]) -> str:
    if not batch:
        return f"{head}\n   returned nothing"
    noun = "result" if len(batch) == 1 else "results"
    return f"{head}\n   returned {len(batch)} {noun}:\n" + "\n".join(f"   - {show(item)}" for item in batch)


def _unlisted_proposals(info: ToolRoundInfo[Any]) -> str:
    listed = {call_digest(c.tool_name, c.args) for c in info.prior_calls if c.proposed}
    waiting: list[ProposedAction[Any]] = [p for p in info.proposals if p.digest not in listed]
    if not waiting:
        return ""
    lines = [f"- Round {p.round}: {_call_text(p.tool_name, p.args)} ({p.tier.name})" for p in waiting]
    return "Awaiting human approval (did not run; do not propose again):\n" + "\n".join(lines)
