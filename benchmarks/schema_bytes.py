"""The step schema's bytes per request against a raw tool-calling loop's tool definitions, for the same tools.

``python -m benchmarks.schema_bytes [--tokens] [--out DIR] [--label NAME]``

For one ``search(query: str)`` tool (bare, as in the issue's figures, and as the benchmark's scenario
describes it) and for a set of three described tools, each structured mode's request is captured as
``OpenAICaller`` sends it (through an in-memory transport, so the body is the real one), and the raw
loop's request for the same tools is built as ``benchmarks.contenders.floor_tools`` builds it
(``tools`` from each args model's ``model_json_schema()``, ``tool_choice="required"``). Reported:

- ``extra``: everything in the request but ``model`` and ``messages``, as compact JSON (the
  JSON-schema and tools modes carry the schema there; the raw loop its ``tools`` and ``tool_choice``);
- ``overhead``: the request's bytes over a bare request with the same model and the same system and
  user text (the JSON and markdown-JSON modes carry the schema in the system message);
- the ratios to the raw loop's ``tools`` array (the issue's denominator) and to its ``extra``;
- with ``--tokens``: the same two in the embedded model's tokens (llama.cpp's ``/tokenize`` of
  ``agentkit.providers.local.LocalModel``, Qwen2.5-Coder's vocabulary; needs the ``local`` extra).

Writes ``schema-bytes-<date>.json`` and ``.md`` to ``--out``, and ``schema-bytes-latest.*`` beside them; with
``--label NAME`` (the before side of a change, say) ``schema-bytes-<date>-NAME.*`` only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx2
import openai
from pydantic import BaseModel, Field

from agentkit import StructuredRequest
from agentkit._step import build_step_model
from agentkit.errors import AgentkitError
from agentkit.providers.openai import OpenAICaller, StructuredMode
from benchmarks import harness, scenario
from benchmarks.contenders.floor_tools import _function

BASE_URL = "http://bench.test/v1"
SYSTEM = scenario.SYSTEM
DYNAMIC = scenario.step_prompt(scenario.question("5eed0f1e5eed0f1e"), [], 1, 6)


class Search(BaseModel):  # the bare search(query: str) of the figures: no docstring, no description
    query: str


class Fetch(BaseModel):
    """Arguments of the fetch tool."""

    id: str = Field(description="The id of the document to fetch.")


class Calc(BaseModel):
    """Arguments of the calculator."""

    expression: str = Field(description="An arithmetic expression, such as 2 * (3 + 4).")


TOOL_SETS: dict[str, tuple[tuple[str, str, type[BaseModel]], ...]] = {
    "search (bare)": (("search", "Search the corpus.", Search),),
    "search (scenario)": (("search", "Search the corpus.", scenario.SearchArgs),),
    "search, fetch, calc": (
        ("search", "Search the corpus.", scenario.SearchArgs),
        ("fetch", "Fetch one document by id.", Fetch),
        ("calc", "Evaluate an arithmetic expression.", Calc),
    ),
}
"""Each set's tools as (name, description, args type). One tool is a step with a bare call; several, a step
whose call names its tool."""

CELLS = (
    ("json_schema", False),
    ("json_schema", True),
    ("tools", False),
    ("tools", True),
    ("json", False),
    ("md_json", False),
)
"""(mode, strict): strict applies to the JSON-schema and tools modes only."""


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def bare_request() -> dict[str, Any]:
    """The request with nothing but the model and the same system and user text."""
    return {
        "model": scenario.MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": DYNAMIC}],
    }


async def agentkit_body(tools: tuple[tuple[str, str, type[BaseModel]], ...], mode: str, strict: bool) -> bytes:
    """The body ``OpenAICaller`` sends for the step over ``tools`` (one request, answered with a 400)."""
    seen: list[bytes] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "recorded"}})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="bench", max_retries=0, http_client=http)
    caller = OpenAICaller(client, mode=StructuredMode(mode), strict=strict)
    spec: Any = tools[0][2] if len(tools) == 1 else tuple((name, args) for name, _, args in tools)
    step = build_step_model(spec)
    try:
        await caller.complete(StructuredRequest(model=scenario.MODEL, system=SYSTEM, dynamic=DYNAMIC), step)
    except AgentkitError:
        pass
    finally:
        await caller.aclose()
        await http.aclose()
    return seen[0]


def raw_request(tools: tuple[tuple[str, str, type[BaseModel]], ...]) -> dict[str, Any]:
    """The raw tool-calling loop's request for ``tools``, as ``floor_tools.RawTools`` builds it."""
    return bare_request() | {
        "tools": [_function(name, description, args.model_json_schema()) for name, description, args in tools],
        "tool_choice": "required",
    }


def extra_of(body: dict[str, Any]) -> str:
    return compact({key: value for key, value in body.items() if key not in ("model", "messages")})


def measure(count: Any) -> dict[str, Any]:
    """Bytes (and tokens, when ``count`` counts them) of every cell for every tool set."""
    bare = compact(bare_request())
    sets: dict[str, Any] = {}
    for label, tools in TOOL_SETS.items():
        raw = raw_request(tools)
        raw_tools = compact(raw["tools"])
        raw_extra = extra_of(raw)
        row: dict[str, Any] = {
            "raw": {
                "tools_bytes": len(raw_tools.encode()),
                "extra_bytes": len(raw_extra.encode()),
                "overhead_bytes": len(compact(raw).encode()) - len(bare.encode()),
            }
        }
        if count is not None:
            row["raw"] |= {"tools_tokens": count(raw_tools), "extra_tokens": count(raw_extra)}
            row["raw"]["overhead_tokens"] = count(compact(raw)) - count(bare)
        for mode, strict in CELLS:
            body = asyncio.run(agentkit_body(tools, mode, strict))
            sent = json.loads(body)
            extra = extra_of(sent)
            cell: dict[str, Any] = {
                "extra_bytes": len(extra.encode()),
                "overhead_bytes": len(compact(sent).encode()) - len(bare.encode()),
            }
            cell["extra_x_raw_tools"] = round(cell["extra_bytes"] / row["raw"]["tools_bytes"], 2)
            cell["extra_x_raw_extra"] = round(cell["extra_bytes"] / row["raw"]["extra_bytes"], 2)
            cell["overhead_x_raw"] = round(cell["overhead_bytes"] / row["raw"]["overhead_bytes"], 2)
            if count is not None:
                cell["extra_tokens"] = count(extra)
                cell["overhead_tokens"] = count(compact(sent)) - count(bare)
                cell["extra_tokens_x_raw_tools"] = round(cell["extra_tokens"] / row["raw"]["tools_tokens"], 2)
                cell["overhead_tokens_x_raw"] = round(cell["overhead_tokens"] / row["raw"]["overhead_tokens"], 2)
            row[f"{mode}{' strict' if strict else ''}"] = cell
        sets[label] = row
    return sets


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    tokens = report["tokenizer"] is not None
    lines = [
        f"# Step schema bytes against a raw tool-calling loop, {report['label']}",
        "",
        f"Machine: {env['machine']}; commit {env['commit']}; tokenizer: {report['tokenizer'] or 'not run'}.",
        "`extra`: the request but `model` and `messages`, compact JSON. `overhead`: the request over a bare one "
        "with the same model and text. Ratios: to the raw loop's `tools` array, to its `extra`, to its overhead.",
        "",
    ]
    for label, row in report["tool_sets"].items():
        raw = row["raw"]
        counted = f"; {raw['tools_tokens']} / {raw['extra_tokens']} / {raw['overhead_tokens']} tokens" if tokens else ""
        lines += [
            f"## {label}",
            "",
            f"Raw loop: `tools` {raw['tools_bytes']} B, extra {raw['extra_bytes']} B, overhead "
            f"{raw['overhead_bytes']} B{counted}.",
            "",
            "| mode | extra B | x raw tools | x raw extra | overhead B | x raw overhead |"
            + (" extra tokens | x raw tools | overhead tokens | x raw overhead |" if tokens else ""),
            "|---|---|---|---|---|---|" + ("---|---|---|---|" if tokens else ""),
        ]
        for mode, cell in row.items():
            if mode == "raw":
                continue
            line = (
                f"| {mode} | {cell['extra_bytes']} | {cell['extra_x_raw_tools']:.2f} | {cell['extra_x_raw_extra']:.2f} "
                f"| {cell['overhead_bytes']} | {cell['overhead_x_raw']:.2f} |"
            )
            if tokens:
                line += (
                    f" {cell['extra_tokens']} | {cell['extra_tokens_x_raw_tools']:.2f} | {cell['overhead_tokens']} "
                    f"| {cell['overhead_tokens_x_raw']:.2f} |"
                )
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", action="store_true", help="count tokens too (needs the local extra)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    parser.add_argument("--label", help="write schema-bytes-<date>-LABEL.* only (the before side of a change)")
    args = parser.parse_args()
    env = harness.environment()
    tokenizer: str | None = None
    if args.tokens:
        from agentkit.providers.local import DEFAULT_MODEL, LocalModel
        from benchmarks.prompt_tokens import count_tokens

        with LocalModel(ready_timeout=300) as model:
            sets = measure(lambda text: count_tokens(model.base_url, text))
        tokenizer = DEFAULT_MODEL.name
    else:
        sets = measure(None)
    env["load_after"] = os.getloadavg()
    label = env["date"][:10] + (f"-{args.label}" if args.label else "")
    report = {
        "environment": env,
        "command": "python -m benchmarks.schema_bytes" + (" --tokens" if args.tokens else ""),
        "label": label,
        "tokenizer": tokenizer,
        "tool_sets": sets,
    }
    print(markdown(report))
    args.out.mkdir(parents=True, exist_ok=True)
    for stem in (f"schema-bytes-{label}", *([] if args.label else ["schema-bytes-latest"])):
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (args.out / f"{stem}.md").write_text(markdown(report))


if __name__ == "__main__":
    main()
