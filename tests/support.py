"""What many test modules share: small args and item models, tools, executors and agents, an observer.

A test module imports what it shares from here (or from a ``*_support`` module), never from another test
module: ``tests/package/test_test_scaffolding.py`` holds the suite to that.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from agentkit import (
    Observer,
    Prompt,
    ProposedAction,
    RetryPolicy,
    RoleSpec,
    RunCheckpoint,
    Tier,
    ToolRetry,
    ToolRoundInfo,
    tool,
)
from agentkit._once import RoundInfo
from agentkit._tools import FunctionTool
from agentkit.decisions import Equals, Grant, Range
from agentkit.events import (
    DegenerationDetected,
    Event,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunAborted,
    RunFinished,
    RunStarted,
    ToolCallStarted,
    ToolResultReturned,
)
from agentkit.journal import Journal

R = TypeVar("R")

NO_WAIT = RetryPolicy(wait_initial=0, wait_max=0)
"""Retries that do not wait between attempts."""


class Query(BaseModel):
    query: str


class PathArgs(BaseModel):
    path: str


class Target(BaseModel):
    path: str


class Wipe(BaseModel):
    target: str


class Mail(BaseModel):
    to: str


class Doc(BaseModel):
    id: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Look up documents."""
    if args.query == "boom":
        raise RuntimeError("index offline")
    if args.query == "retry":
        raise ToolRetry("no such index; try another query")
    return [Doc(id=f"{args.query}1"), Doc(id=f"{args.query}2")]


@tool(tier=Tier.READ_ONLY, name="search")
def corpus_search(args: Query) -> list[str]:
    """Search the corpus."""
    return [f"doc:{args.query}"]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Query) -> list[Doc]:
    """Delete documents (never runs live)."""
    raise AssertionError("an irreversible tool must not run")


def wipe_tool(
    ran: list[str], *, gate: asyncio.Event | None = None, started: asyncio.Event | None = None
) -> FunctionTool[Wipe, str]:
    """An irreversible ``wipe`` that appends each target to ``ran`` (after setting ``started``, and then
    waiting for ``gate``, when given)."""

    @tool(tier=Tier.IRREVERSIBLE, name="wipe")
    async def wipe(args: Wipe) -> list[str]:
        ran.append(args.target)
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        return [f"wiped {args.target}"]

    return wipe


@tool(tier=Tier.EXTERNAL_REVERSIBLE, name="mail")
def mail(args: Mail) -> list[str]:
    """Send a mail."""
    return [args.to]


class Finder:
    """A minimal executor."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="exec-model", prompt_type="retrieval")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="find documents", dynamic=f"{ctx} round {info.round}")


class Recorder(Observer):
    """Records what each named hook received, and what ``on_event`` received."""

    def __init__(self) -> None:
        self.hooks: list[tuple[str, Event]] = []
        self.events: list[Event] = []

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.hooks]

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def on_run_start(self, event: RunStarted) -> None:
        self.hooks.append(("run_start", event))

    def on_round_start(self, event: RoundStarted) -> None:
        self.hooks.append(("round_start", event))

    def on_llm_call(self, event: LLMCallFinished) -> None:
        self.hooks.append(("llm_call", event))

    def on_tool_call(self, event: ToolCallStarted) -> None:
        self.hooks.append(("tool_call", event))

    def on_tool_result(self, event: ToolResultReturned) -> None:
        self.hooks.append(("tool_result", event))

    def on_proposal(self, event: ProposalCaptured) -> None:
        self.hooks.append(("proposal", event))

    def on_degeneration(self, event: DegenerationDetected) -> None:
        self.hooks.append(("degeneration", event))

    def on_run_end(self, event: RunFinished) -> None:
        self.hooks.append(("run_end", event))

    def on_run_abort(self, event: RunAborted) -> None:
        self.hooks.append(("run_abort", event))


class Executor(Generic[R]):
    """A minimal tool-loop executor: names its model, renders ``"{ctx} round {n}"``, records each round."""

    def __init__(
        self, model: str = "m", *, fallback_model: str | None = None, prompt_type: str = "", system: str = "s"
    ) -> None:
        self.spec = RoleSpec(model=model, fallback_model=fallback_model, prompt_type=prompt_type)
        self.system = system
        self.infos: list[ToolRoundInfo[R]] = []
        """What the executor was shown, one entry per round."""

    def role(self) -> RoleSpec:
        return self.spec

    def render(self, ctx: object, info: ToolRoundInfo[R]) -> Prompt:
        self.infos.append(info)
        return Prompt(system=self.system, dynamic=f"{ctx} round {info.round}")


class Recording:
    """A tool with a settable tier that records every call it receives."""

    def __init__(self, name: str, tier: Any, args_type: type[BaseModel] = Query) -> None:
        self.name = name
        self.description = f"the {name} tool"
        self.args_type = args_type
        self.tier = tier
        self.calls: list[BaseModel] = []

    async def call(self, args: BaseModel) -> Sequence[Doc]:
        self.calls.append(args)
        return [Doc(id=f"{self.name}:{len(self.calls)}")]


def rechained(
    checkpoint: RunCheckpoint, *, entry: int | None = None, version: int | None = None, **changes: object
) -> RunCheckpoint:
    """``checkpoint`` with one entry's fields changed (or its ``version``), its digests chained afresh: a
    state a hand edit made to look intact (only a check other than the digests can refuse it)."""
    state = RunCheckpoint.start(
        checkpoint.run_id, checkpoint.config, checkpoint.tools, parent=checkpoint.parent, forked_at=checkpoint.forked_at
    )
    if version is not None:
        state = state._with(version=version)
        state = state._with(digest=state.head_digest())
    for index, kept in enumerate(checkpoint.entries):
        state = state.appended(kept.model_copy(update=changes) if index == entry else kept)
    return state


class Transfer(BaseModel):
    """Args with several fields of several kinds, for amending a call."""

    account: str
    amount: int = Field(ge=0)
    memo: str = ""


class Payments:
    """An irreversible transfer tool that counts its calls (tool-side)."""

    name = "transfer"
    description = "move money"
    tier = Tier.IRREVERSIBLE
    args_type = Transfer

    def __init__(self) -> None:
        self.calls: list[Transfer] = []

    async def call(self, args: Transfer) -> Sequence[Doc]:
        self.calls.append(args)
        return [Doc(id=f"paid {args.amount} to {args.account}")]


def small_payments(**changes: Any) -> Grant:
    """A grant of ``Payments`` calls to acme of at most 50 (two uses unless ``changes`` say otherwise)."""
    fields: dict[str, Any] = {
        "tool_name": "transfer",
        "where": {"account": Equals(value="acme"), "amount": Range(max=50)},
        "max_uses": 2,
        "granted_by": "ops",
        "reason": "small payments to acme",
        "allow_irreversible": True,
    }
    return Grant(**(fields | changes))


class Deleter:
    """An irreversible tool that records what it deleted; it yields once so runs can interleave."""

    def __init__(self, name: str = "delete", tier: Any = Tier.IRREVERSIBLE, args_type: type[BaseModel] = PathArgs):
        self.name = name
        self.description = "delete a path"
        self.tier = tier
        self.args_type = args_type
        self.calls: list[BaseModel] = []
        self.fail = False

    async def call(self, args: BaseModel) -> Sequence[str]:
        self.calls.append(args)
        await asyncio.sleep(0)
        if self.fail:
            raise OSError("disk gone")
        return [f"deleted {getattr(args, 'path', '?')}"]


def proposed(path: str = "/tmp/old", tool_name: str = "delete") -> ProposedAction[PathArgs]:
    """A proposal to delete ``path``, captured in round 1 of run ``r1``."""
    return ProposedAction[PathArgs].create(
        tool_name=tool_name, tier=Tier.IRREVERSIBLE, args=PathArgs(path=path), round=1, run_id="r1"
    )


class Label(BaseModel):
    label: str


@dataclass
class Classifier:
    """A once-agent that records what it was asked to render."""

    role_spec: RoleSpec = field(default_factory=lambda: RoleSpec(model="primary", fallback_model="backup"))
    seen: list[tuple[str, RoundInfo]] = field(default_factory=list)

    def role(self) -> RoleSpec:
        return self.role_spec

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        self.seen.append((ctx, info))
        return Prompt(system="Label the text.", dynamic=f"Text: {ctx}")


class Answer(BaseModel):
    """A pair's draft: a total and the parts it should be the sum of."""

    total: int
    parts: list[int]

    def is_material(self) -> bool:
        return bool(self.parts)


def good(total: int = 3) -> dict[str, object]:
    """A draft whose parts add up to ``total``."""
    return {"total": total, "parts": [1, total - 1]}


@dataclass
class Drafter:
    """A pair's executor that records every round it renders."""

    seen: list[RoundInfo] = field(default_factory=list)

    def role(self) -> RoleSpec:
        return RoleSpec(model="exec", prompt_type="drafter")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        self.seen.append(info)
        fix = f"\nFix this: {info.feedback}" if info.feedback else ""
        return Prompt(system="Add the parts.", dynamic=f"{ctx}{fix}")


@dataclass
class Critic:
    """The LLM verifier's agent: renders the draft it is asked about."""

    task: str

    def role(self) -> RoleSpec:
        return RoleSpec(model="critic")

    def render(self, ctx: Answer, info: RoundInfo) -> Prompt:
        return Prompt(system="Check the sum.", dynamic=f"{self.task}\nDraft: {ctx.model_dump_json()}")


@contextlib.contextmanager
def http_server(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on a free loopback port, answering with `handler` in threads: its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def raw_sql(journal: Journal, sql: str) -> None:
    """Change the database behind the journal's back (as a tamperer or a newer agentkit would)."""
    with journal._tx(write=True) as db:
        db.execute(sql)


def expire_lease(journal: Journal, id: str) -> None:
    """End the lease of proposal `id`'s claim now, as when its worker died and the lease ran out."""
    with journal._tx(write=True) as db:
        db.execute("UPDATE agentkit_proposals SET lease_until = claimed_at WHERE id = ?", (id,))


class Searcher:
    """An executor with every role field set (a fallback model unless told otherwise), for the provider tests."""

    def __init__(self, fallback: str | None = "fallback-model") -> None:
        self.fallback = fallback

    def role(self) -> RoleSpec:
        return RoleSpec(model="primary-model", fallback_model=self.fallback, temperature=0.2, max_tokens=300, seed=7)

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", dynamic=f"round {info.round}: {ctx}; seen {info.prior_results}")
