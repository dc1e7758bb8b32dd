"""Durable agents for the Temporal tests: a read-only search, a reversible note and an irreversible send,
each counting its completed calls in a file (tool-side, across processes), over a model at a given URL;
and the model's steps (the Temporal tests take them through the ``temporal`` fixture of
``tests/temporal/conftest.py``).

Worker processes import ``AGENTS``, built from ``AGENTKIT_TEST_MODEL_URL`` and ``AGENTKIT_TEST_TOOL_LOG``;
a client process may import ``SPECS`` instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentkit import LoopConfig, Prompt, RoleSpec, Tier, ToolRoundInfo, tool
from agentkit.decisions import Equals, Grant, Grants
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import ActivityPolicy, AgentSpec, DurableAgent, RunHandle, RunState, RunStatus

DONE: dict[str, Any] = {"done": True, "call": None, "rationale": "finished"}

MODEL_TIMEOUT = 600.0
"""The agents' model timeout in seconds: long, so that a lost model attempt retried well before it shows that
the loss of its workflow task, not the timeout, ended the attempt."""


def step(tool: str, **args: str) -> dict[str, Any]:
    """The model's step calling ``tool`` (the agents with several tools)."""
    return {"done": False, "call": {"tool": tool, "args": args}, "rationale": f"call {tool}"}


def bare(**args: str) -> dict[str, Any]:
    """The model's step calling the one tool of an agent (the bare-args shape)."""
    return {"done": False, "call": args, "rationale": "look"}


async def until(handle: RunHandle[Any], status: RunStatus, *, seconds: float = 60) -> RunState:
    """The run's state once it reaches ``status``."""
    for _ in range(int(seconds / 0.05)):
        state = await handle.state()
        if state.status is status:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.run_id} never reached {status}; it is {state.status}")


class Search(BaseModel):
    query: str


class Send(BaseModel):
    to: str
    text: str


class Doc(BaseModel):
    id: str


class Brief(BaseModel):
    """The run's ctx."""

    topic: str


class Researcher:
    """Renders the topic and what each prior call returned, so each round's prompt differs."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: Brief, info: ToolRoundInfo[Doc]) -> Prompt:
        seen = "; ".join(
            f"{c.tool_name}({c.args.model_dump_json()}) -> {[d.id for d in c.batch]} {c.observation or ''}"
            for c in info.prior_calls
        )
        return Prompt(system="research, then send", dynamic=f"{ctx.topic} round {info.round}: {seen}")


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _log(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line + "\n")


def make_agents(
    model_url: str, log: Path, *, heartbeat: float = 1.0, redeploy: str | None = None
) -> list[DurableAgent[Any, Any]]:
    """The agents: ``research`` (search, send), ``lookup`` (search only), ``editor`` (search, note, send) and
    ``gather`` (the editor's tools, up to three calls a step) and ``granted`` (research's tools, a standing grant
    for a send to bob).

    ``redeploy`` builds ``research`` as a later deploy might: ``"retiered"`` declares ``send``
    READ_ONLY, ``"added"`` adds a tool, ``"removed"`` drops ``send``, ``"egress"`` declares ``send`` egress.
    """

    @tool(tier=Tier.READ_ONLY)
    async def search(args: Search) -> list[Doc]:
        """Search the corpus."""
        await _held(log, f"search {args.query}")
        _log(log, f"search {args.query}")
        return [Doc(id=f"doc:{args.query}")]

    @tool(tier=Tier.IRREVERSIBLE)
    async def send(args: Send) -> list[Doc]:
        """Send a message."""
        if args.text == "hang":
            _log(log, f"started send {args.to}")
            await asyncio.sleep(3600)
        _log(log, f"send {args.to} {args.text}")
        return [Doc(id=f"sent:{args.to}")]

    @tool(tier=Tier.REVERSIBLE)
    async def note(args: Send) -> list[Doc]:
        """Keep a note (deleting it undoes it)."""
        await _held(log, f"note {args.to}")
        _log(log, f"note {args.to} {args.text}")
        return [Doc(id=f"note:{args.to}")]

    @tool(tier=Tier.READ_ONLY)
    async def count(args: Search) -> list[Doc]:
        """Count the corpus."""
        _log(log, f"count {args.query}")
        return [Doc(id="count")]

    caller = OpenAICaller(base_url=model_url, api_key="k")
    policy = ActivityPolicy(
        heartbeat=_seconds(heartbeat), retry_initial=_seconds(0.1), model_timeout=_seconds(MODEL_TIMEOUT)
    )
    tools: Sequence[Any] = [search, send]
    if redeploy == "retiered":
        tools = [search, dataclasses.replace(send, tier=Tier.READ_ONLY)]
    elif redeploy == "added":
        tools = [search, send, count]
    elif redeploy == "removed":
        tools = [search]
    elif redeploy == "egress":
        tools = [search, dataclasses.replace(send, egress=True)]
    return [
        DurableAgent(
            name="research",
            agent=Researcher(),
            tools=tools,
            caller=caller,
            ctx_type=Brief,
            config=LoopConfig(max_rounds=6),
            policy=policy,
        ),
        DurableAgent(name="lookup", agent=Researcher(), tools=search, caller=caller, ctx_type=Brief, policy=policy),
        DurableAgent(
            name="editor",
            agent=Researcher(),
            tools=[search, note, send],
            caller=caller,
            ctx_type=Brief,
            config=LoopConfig(max_rounds=6),
            policy=policy,
        ),
        DurableAgent(
            name="gather",
            agent=Researcher(),
            tools=[search, note, send],
            caller=caller,
            ctx_type=Brief,
            config=LoopConfig(max_rounds=6, max_calls_per_step=3),
            policy=policy,
        ),
        DurableAgent(
            name="granted",
            agent=Researcher(),
            tools=[search, send],
            caller=caller,
            ctx_type=Brief,
            config=LoopConfig(max_rounds=6),
            policy=policy,
            grants=Grants([Grant.of(send, where={"to": Equals(value="bob")}, **_TO_BOB)]),
        ),
    ]


_TO_BOB: dict[str, Any] = {
    "max_uses": None,
    "allow_irreversible": True,
    "granted_by": "ops",
    "reason": "bob may be written to",
}


async def _held(log: Path, call: str) -> None:
    """Hold a call (``search QUERY``, ``note TO``) as its argument says: one naming a file waits for it to
    exist (a test kills the worker at that point); ``barrier:...`` waits until two calls are held at once
    (with one activity per worker, two workers hold them)."""
    key = call.split(" ", 1)[1]
    if key.startswith("/") and not _exists(key):
        _log(log, f"blocked {call}")
        while not _exists(key):  # noqa: ASYNC110  # another process creates the file
            await asyncio.sleep(0.05)
    if key.startswith("barrier:"):
        _log(log, f"held {call} {os.getpid()}")
        while sum(line.startswith("held") for line in _lines(log)) < 2:  # noqa: ASYNC110  # other processes write it
            await asyncio.sleep(0.05)


def _seconds(value: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)


SPECS = [
    AgentSpec(name="research", ctx_type=Brief, item_type=Doc),
    AgentSpec(name="lookup", ctx_type=Brief, item_type=Doc),
    AgentSpec(name="editor", ctx_type=Brief, item_type=Doc),
    AgentSpec(name="gather", ctx_type=Brief, item_type=Doc),
    AgentSpec(name="granted", ctx_type=Brief, item_type=Doc),
]
"""What a client knows of ``AGENTS``: names, ctx type, item type (no caller, no tools)."""

AGENTS = make_agents(
    os.environ.get("AGENTKIT_TEST_MODEL_URL", "http://127.0.0.1:9/v1"),
    Path(os.environ.get("AGENTKIT_TEST_TOOL_LOG", os.devnull)),
)
