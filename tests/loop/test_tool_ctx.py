"""Tools that take the run's ctx: ``@tool`` detects the parameter, and every path that runs a tool passes the ctx."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentkit import (
    FunctionTool,
    LoopConfig,
    Outcome,
    ProposedAction,
    StopReason,
    Tier,
    UsageError,
    approve,
    execute_approved,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._tools import ContextFunctionTool, takes_ctx, wants_ctx
from agentkit.events import iter_tool_loop
from agentkit.journal import Journal, ProposalState
from agentkit.program import CapabilitySet, apply_plan, capability, gate_program
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, PathArgs, Query


@dataclass
class Clients:
    """What one run carries: a client (here, a name) and a cache its tools share."""

    source: str = "wiki"
    cache: dict[str, list[Doc]] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)


@tool(tier=Tier.READ_ONLY)
def lookup(args: Query, ctx: Clients) -> list[Doc]:
    """Search this run's source, through its cache."""
    ctx.seen.append(args.query)
    if args.query not in ctx.cache:
        ctx.cache[args.query] = [Doc(id=f"{ctx.source}:{args.query}")]
    return ctx.cache[args.query]


@tool(tier=Tier.READ_ONLY)
def plain(args: Query) -> list[Doc]:
    """A tool that takes no ctx."""
    return [Doc(id=f"plain:{args.query}")]


@tool(tier=Tier.IRREVERSIBLE)
async def remove(args: PathArgs, ctx: Clients) -> list[Doc]:
    """Delete a path in this run's source."""
    ctx.seen.append(f"removed {args.path}")
    return [Doc(id=f"{ctx.source}:removed:{args.path}")]


def test_tool_detects_a_ctx_parameter_on_sync_and_async_functions() -> None:
    """A function with a second parameter without a default becomes a ContextFunctionTool; sync or async."""
    assert isinstance(lookup, ContextFunctionTool)
    assert isinstance(remove, ContextFunctionTool)
    assert isinstance(plain, FunctionTool)
    assert takes_ctx(lookup)
    assert takes_ctx(remove)
    assert not takes_ctx(plain)
    assert (lookup.name, lookup.args_type, lookup.tier) == ("lookup", Query, Tier.READ_ONLY)
    assert lookup.description == "Search this run's source, through its cache."


def test_a_second_parameter_with_a_default_or_keyword_only_is_no_ctx() -> None:
    """Only a positional second parameter without a default is the ctx; a ctx-free tool keeps its own options."""

    @tool(tier=Tier.READ_ONLY)
    def limited(args: Query, limit: int = 3) -> list[Doc]:
        return [Doc(id=str(limit))]

    @tool(tier=Tier.READ_ONLY)
    def keyword(args: Query, *, limit: int = 3) -> list[Doc]:
        return [Doc(id=str(limit))]

    assert isinstance(limited, FunctionTool)
    assert isinstance(keyword, FunctionTool)
    assert asyncio.run(limited.call(Query(query="q"))) == [Doc(id="3")]


def test_ctx_is_read_alike_from_functions_methods_and_callable_objects() -> None:
    """A bound method's self and a callable object's self do not count; a default or a keyword-only ctx is no ctx."""

    class Handlers:
        def with_ctx(self, args: Query, ctx: Clients) -> list[Doc]:
            return []

        def without(self, args: Query) -> list[Doc]:
            return []

        def __call__(self, args: Query, ctx: Clients) -> list[Doc]:
            return []

    def optional(args: Query, ctx: Clients | None = None) -> list[Doc]:
        return []

    def keyword(args: Query, *, ctx: Clients) -> list[Doc]:
        return []

    handlers = Handlers()
    assert [wants_ctx(f) for f in (handlers.with_ctx, handlers, lookup.fn)] == [True, True, True]
    assert [wants_ctx(f) for f in (handlers.without, optional, keyword, plain.fn, len)] == [False] * 5


def test_constructors_that_never_pass_a_ctx_refuse_a_ctx_function() -> None:
    """FunctionTool and Capability refuse, when made, a function that needs a ctx they would never pass."""

    def needs_ctx(args: Query, ctx: Clients) -> list[Doc]:
        return []

    with pytest.raises(UsageError, match="tool 'x': its function takes a second parameter"):
        FunctionTool(name="x", description="d", args_type=Query, tier=Tier.READ_ONLY, fn=needs_ctx)  # type: ignore[arg-type]  # refused statically too
    with pytest.raises(UsageError, match="capability 'needs_ctx': its handler takes a second parameter"):
        capability(tier=Tier.READ_ONLY)(needs_ctx)  # type: ignore[arg-type]  # refused statically too
    made = ContextFunctionTool(name="x", description="d", args_type=Query, tier=Tier.READ_ONLY, fn=needs_ctx)
    assert takes_ctx(made)


async def test_loop_calls_a_ctx_tool_with_the_run_ctx_itself() -> None:
    """The tool gets the very ctx object render gets (not a copy), so per-run caches persist across rounds."""
    ctx = Clients(source="intranet")
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b")), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), lookup, ctx)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert [d.id for d in result.items] == ["intranet:a", "intranet:b"]
    assert ctx.seen == ["a", "b"]
    assert set(ctx.cache) == {"a", "b"}


async def test_ctx_and_ctx_free_tools_run_side_by_side() -> None:
    """In one tool set, the ctx tool gets the ctx and the ctx-free tool is called with its args alone."""
    ctx = Clients()
    caller = ScriptedCaller(
        [call_step(Query(query="x"), tool=lookup), call_step(Query(query="y"), tool=plain), done_step()]
    )
    result = await run_tool_loop(caller, Executor[Doc](), [lookup, plain], ctx)
    assert [d.id for d in result.items] == ["wiki:x", "plain:y"]
    assert ctx.seen == ["x"]


async def test_none_is_a_valid_ctx() -> None:
    """A run whose ctx is None calls its ctx tool with None: None is not 'no ctx'."""
    got: list[object] = []

    @tool(tier=Tier.READ_ONLY)
    def record(args: Query, ctx: None) -> list[Doc]:
        got.append(ctx)
        return [Doc(id="r")]

    caller = ScriptedCaller([call_step(Query(query="q")), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), record, None)
    assert result.outcome is Outcome.APPLIED
    assert got == [None]


async def test_a_blocking_ctx_tool_runs_in_a_tool_thread_with_the_ctx() -> None:
    """``in_thread=True`` runs a ctx tool's function off the event loop, still with the run's ctx."""
    threads: list[str] = []

    @tool(tier=Tier.READ_ONLY, in_thread=True)
    def blocking(args: Query, ctx: Clients) -> list[Doc]:
        threads.append(threading.current_thread().name)
        return [Doc(id=f"{ctx.source}:{args.query}")]

    caller = ScriptedCaller([call_step(Query(query="q")), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), blocking, Clients(source="db"))
    assert [d.id for d in result.items] == ["db:q"]
    assert threads
    assert threads[0].startswith("agentkit-tool-blocking")


async def test_stream_passes_the_ctx() -> None:
    """``iter_tool_loop`` is the same run: its ctx tool gets the ctx too."""
    ctx = Clients()
    caller = ScriptedCaller([call_step(Query(query="s")), done_step()])
    async with iter_tool_loop(caller, Executor[Doc](), lookup, ctx) as run:
        async for _ in run:
            pass
    assert [d.id for d in run.result.items] == ["wiki:s"]
    assert ctx.seen == ["s"]


async def test_approved_call_of_a_resumed_run_gets_the_resumed_ctx() -> None:
    """resume_tool_loop runs the approved ctx-tool call with the ctx it is given (the first run may be gone)."""
    first = ScriptedCaller([call_step(PathArgs(path="/old"), tool=remove)])
    stopped = await run_tool_loop_tiered(first, Executor[Doc](), [lookup, remove], Clients(source="run1"))
    assert stopped.stop_reason is StopReason.PROPOSED
    later = Clients(source="run2")
    decisions = [approve(stopped.proposed[0], approved_by="ana")]
    resumed = await resume_tool_loop(
        ScriptedCaller([done_step()]), Executor[Doc](), [lookup, remove], later, stopped.checkpoint, decisions
    )
    assert [d.id for d in resumed.items] == ["run2:removed:/old"]
    assert later.seen == ["removed /old"]


def proposal(path: str = "/tmp/x") -> ProposedAction[PathArgs]:
    return ProposedAction[PathArgs].create(
        tool_name="remove", tier=Tier.IRREVERSIBLE, args=PathArgs(path=path), round=1, run_id="r"
    )


async def test_execute_approved_passes_the_given_ctx() -> None:
    """execute_approved(approval, tool, ctx=...) calls a ctx tool with that ctx."""
    ctx = Clients(source="ops")
    batch = await execute_approved(approve(proposal(), approved_by="ana"), remove, ctx=ctx)
    assert [d.id for d in batch] == ["ops:removed:/tmp/x"]


async def test_execute_approved_without_ctx_refuses_before_running_and_keeps_the_approval() -> None:
    """Without ctx a ctx tool is refused with a UsageError naming it; nothing ran and the approval still runs once."""
    ctx = Clients()
    approval = approve(proposal(), approved_by="ana")
    with pytest.raises(UsageError, match="tool 'remove' takes the run's ctx and none was given; nothing ran"):
        await execute_approved(approval, remove)  # type: ignore[call-overload]  # the checker refuses it too
    assert ctx.seen == []
    assert not approval.executed
    await execute_approved(approval, remove, ctx=ctx)
    assert ctx.seen == ["removed /tmp/x"]


async def test_execute_approved_ignores_ctx_for_a_ctx_free_tool() -> None:
    """A ctx given for a tool that takes none is not passed to it."""

    @tool(tier=Tier.IRREVERSIBLE, name="remove")
    def remove_plain(args: PathArgs) -> list[Doc]:
        return [Doc(id=args.path)]

    assert await execute_approved(approve(proposal(), approved_by="ana"), remove_plain, ctx=Clients()) == [
        Doc(id="/tmp/x")
    ]


def capabilities(log: list[str]) -> CapabilitySet[Doc]:
    @capability(tier=Tier.READ_ONLY)
    def note(args: Query) -> list[Doc]:
        log.append(f"note {args.query}")
        return [Doc(id=args.query)]

    return CapabilitySet(note, lookup)


async def test_apply_plan_passes_the_ctx_to_capabilities_that_take_it() -> None:
    """A @tool capability with a ctx parameter gets apply_plan's ctx; the others run as before."""
    log: list[str] = []
    program = [{"tool": "note", "args": {"query": "n"}}, {"tool": "lookup", "args": {"query": "l"}}]
    plan = gate_program(program, Tier.READ_ONLY, capabilities=capabilities(log))
    ctx = Clients(source="plan")
    report = await apply_plan(plan, ctx=ctx)
    assert report.ok
    assert [d.id for d in report.items] == ["n", "plan:l"]
    assert ctx.seen == ["l"]


async def test_apply_plan_without_ctx_refuses_before_any_call_runs() -> None:
    """A plan that calls a ctx capability without ctx raises UsageError naming it; not even earlier calls ran."""
    log: list[str] = []
    program = [{"tool": "note", "args": {"query": "n"}}, {"tool": "lookup", "args": {"query": "l"}}]
    plan = gate_program(program, Tier.READ_ONLY, capabilities=capabilities(log))
    with pytest.raises(UsageError, match="tool 'lookup' takes the run's ctx"):
        await apply_plan(plan)
    assert log == []


async def proposed_in(journal: Journal, path: str = "/tmp/x") -> str:
    record = await journal.propose(proposal(path))
    await journal.approve(record.id, "alice")
    return record.id


async def test_journal_execute_passes_the_ctx(journal: Journal) -> None:
    """journal.execute(id, tool, ctx=...) runs a ctx tool with that ctx, once."""
    id = await proposed_in(journal)
    ctx = Clients(source="worker")
    execution = await journal.execute(id, remove, ctx=ctx)
    assert [d.id for d in execution.batch] == ["worker:removed:/tmp/x"]
    assert (await journal.get(id)).state is ProposalState.EXECUTED


async def test_journal_execute_without_ctx_claims_nothing(journal: Journal) -> None:
    """Without ctx a ctx tool is refused before the claim: the proposal stays approved and nothing ran."""
    id = await proposed_in(journal)
    with pytest.raises(UsageError, match="tool 'remove' takes the run's ctx"):
        await journal.execute(id, remove)  # type: ignore[call-overload]  # the checker refuses it too
    assert (await journal.get(id)).state is ProposalState.APPROVED


async def test_journal_work_passes_one_ctx_to_every_call(journal: Journal) -> None:
    """work(tools, ctx=...) calls each ctx tool with that ctx."""
    ids = [await proposed_in(journal, path) for path in ("/a", "/b")]
    ctx = Clients(source="w")
    report = await journal.work([remove, plain], ctx=ctx, until_empty=True)
    assert report.executed == 2
    assert sorted(ctx.seen) == ["removed /a", "removed /b"]
    assert {(await journal.get(id)).state for id in ids} == {ProposalState.EXECUTED}


async def test_journal_work_without_ctx_refuses_before_claiming(journal: Journal) -> None:
    """work with a ctx tool and no ctx raises UsageError naming the tool; nothing is claimed."""
    id = await proposed_in(journal)
    with pytest.raises(UsageError, match="tool 'remove' takes the run's ctx"):
        await journal.work([remove], until_empty=True)
    assert (await journal.get(id)).state is ProposalState.APPROVED


async def test_ctx_free_loop_is_unchanged() -> None:
    """A loop of ctx-free tools works as before, whatever its ctx."""
    caller = ScriptedCaller([call_step(Query(query="q")), done_step()])
    result: Any = await run_tool_loop(caller, Executor[Doc](), plain, 42, LoopConfig())
    assert [d.id for d in result.items] == ["plain:q"]
