"""What a model reads each round, in bytes and in the embedded model's tokens: agentkit against the raw loop.

``python -m benchmarks.prompt_tokens [--out DIR]``

One run of the benchmark's scenario (3 searches, then done: 4 requests) per contender, with the
same run id for each, answered by ``benchmarks.server``'s reply logic through an in-memory
transport, records every request body the contender sends. Each body, the JSON text as it goes on
the wire, is then counted in tokens by the embedded model's own tokenizer (llama.cpp's
``/tokenize`` of ``agentkit.providers.local.LocalModel``, Qwen2.5-Coder's vocabulary), since a
model is billed for the schema and the prompt it reads every round. Needs the ``local`` extra.
Writes ``prompt-tokens-<date>.json`` and ``.md`` (with the date, the machine and its load) to
``--out``, and ``prompt-tokens-latest.*`` beside them.
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

from agentkit.providers.openai import OpenAICaller
from benchmarks import harness, server
from benchmarks.contenders import agentkit_loop, floor

CONTENDERS = ("raw-openai", "agentkit-json_schema", "agentkit-tools")
"""The raw openai loop (the reference) and agentkit's default and tools modes."""
BASE_URL = "http://bench.test/v1"
RUN_ID = "5eed0f1e5eed0f1e"
"""The run id every contender's run carries (it shows in the question and the items' ids), so all of them
send the same text to be counted."""


def _client(seen: list[bytes]) -> openai.AsyncOpenAI:
    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(200, content=json.dumps(server.reply(request.content)).encode())

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key="bench", max_retries=0, http_client=http)


async def request_bodies(name: str, run_id: str = RUN_ID) -> list[bytes]:
    """The request bodies ``name`` (one of ``CONTENDERS``) sends over one run of the scenario."""
    seen: list[bytes] = []
    contender: agentkit_loop.AgentkitLoop | floor.RawFloor
    if name == "raw-openai":
        contender = floor.RawFloor(BASE_URL)
        contender.client = _client(seen)
    elif name.startswith("agentkit-"):
        contender = agentkit_loop.AgentkitLoop(BASE_URL, name.removeprefix("agentkit-"))
        stock, contender.caller = contender.caller, OpenAICaller(_client(seen), mode=contender.caller.mode)
        await stock.aclose()
    else:
        raise ValueError(f"unknown contender {name!r}; one of {CONTENDERS}")
    try:
        await contender.run(run_id)
    finally:
        await contender.aclose()
    return seen


def count_tokens(base_url: str, text: str) -> int:
    """Tokens of ``text`` by the llama.cpp server at ``base_url`` (its OpenAI base URL)."""
    reply = httpx2.post(base_url.removesuffix("/v1") + "/tokenize", json={"content": text}, timeout=60)
    reply.raise_for_status()
    return len(reply.json()["tokens"])


def measure(base_url: str) -> dict[str, Any]:
    """Bytes and tokens per request and per round for each contender, and the ratios to the raw loop."""
    rows: dict[str, Any] = {}
    for name in CONTENDERS:
        bodies = asyncio.run(request_bodies(name))
        tokens = [count_tokens(base_url, body.decode()) for body in bodies]
        rows[name] = {
            "requests": len(bodies),
            "bytes_per_request": [len(body) for body in bodies],
            "tokens_per_request": tokens,
            "bytes_per_round": sum(len(body) for body in bodies) / len(bodies),
            "tokens_per_round": sum(tokens) / len(tokens),
        }
    raw = rows["raw-openai"]
    for row in rows.values():
        row["bytes_x"] = round(row["bytes_per_round"] / raw["bytes_per_round"], 3)
        row["tokens_x"] = round(row["tokens_per_round"] / raw["tokens_per_round"], 3)
    return {"contenders": rows}


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# Request bytes and tokens per round, {env['date']}",
        "",
        f"Machine: {env['machine']}; Python {env['python']}; commit {env['commit']}; tokenizer: {report['tokenizer']}.",
        "",
        "| contender | bytes/round | x raw openai | tokens/round | x raw openai |",
        "|---|---|---|---|---|",
    ]
    for name, row in report["contenders"].items():
        lines.append(
            f"| {name} | {row['bytes_per_round']:.0f} | {row['bytes_x']:.2f} | {row['tokens_per_round']:.0f} "
            f"| {row['tokens_x']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    from agentkit.providers.local import DEFAULT_MODEL, LocalModel

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args()
    env = harness.environment()
    with LocalModel(ready_timeout=300) as model:
        report = measure(model.base_url)
    env["load_after"] = os.getloadavg()
    report = {
        "environment": env,
        "command": "python -m benchmarks.prompt_tokens",
        "tokenizer": DEFAULT_MODEL.name,
        **report,
    }
    print(markdown(report))
    args.out.mkdir(parents=True, exist_ok=True)
    for stem in (f"prompt-tokens-{env['date'][:10]}", "prompt-tokens-latest"):
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
