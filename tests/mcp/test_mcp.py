"""agentkit.mcp against real MCP servers (tests/mcp/servers.py, MCPServer) over stdio and loopback HTTP.

The ``mcp`` extra is part of the ``test`` extra, and this module imports it unconditionally: a
missing SDK fails the suite, it never skips it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import mcp  # the extra must be installed: a missing SDK fails here, never skips
import pytest
from pydantic import ValidationError

from agentkit import (
    LoopConfig,
    Outcome,
    StopReason,
    Tier,
    UsageError,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit._tools import declared_tier
from agentkit.errors import MissingTierError, ToolError
from agentkit.mcp import McpArgs, McpConnection, McpItem, McpServerError, McpTool, connect_http, connect_stdio
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Executor

SERVERS = Path(__file__).with_name("servers.py")
FAST = LoopConfig(retry=NO_WAIT, provenance=None)
"""These tests are about the protocol (results, errors, schemas); the provenance policy, which holds a second
call of an MCP tool after the first one's untrusted result, is tested in test_provenance.py."""
TIERS = {
    "search": Tier.READ_ONLY,
    "echo": Tier.READ_ONLY,
    "read_file": Tier.READ_ONLY,
    "delete_file": Tier.IRREVERSIBLE,
    "fail": Tier.READ_ONLY,
    "crash": Tier.READ_ONLY,
    "hang": Tier.READ_ONLY,
    "big": Tier.READ_ONLY,
    "bounded": Tier.REVERSIBLE,
    "evolve": Tier.REVERSIBLE,
}


class Agent(Executor[McpItem]):
    """An executor that records what it is shown each round."""

    def __init__(self) -> None:
        super().__init__("executor", system="use the file tools")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class HttpServers:
    """Starts scenario servers as subprocesses serving streamable HTTP on loopback; kills them after."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, scenario: str) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-P", str(SERVERS), scenario, str(port)],
            env={"MCP_TEST_LOG": str(self.log), "PATH": "/usr/bin:/bin"},
            stderr=subprocess.DEVNULL,
        )
        self.processes.append(process)
        for _ in range(300):
            if process.poll() is not None:
                raise AssertionError(f"the {scenario} server exited with {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return f"http://127.0.0.1:{port}/mcp"
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the {scenario} server never listened on port {port}")

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """The file the servers append one line to per mutating call."""
    return tmp_path / "calls.log"


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.fixture
def http_servers(log: Path) -> Iterator[HttpServers]:
    servers = HttpServers(log)
    yield servers
    servers.stop()


Connect = Callable[..., McpConnection]


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, log: Path, http_servers: HttpServers) -> Connect:
    """Makes a connection to a scenario server, over stdio or over loopback HTTP."""

    def make(scenario: str = "files", **options: Any) -> McpConnection:
        if request.param == "stdio":
            env = {"MCP_TEST_LOG": str(log)}
            return connect_stdio(sys.executable, ["-P", str(SERVERS), scenario], name=scenario, env=env, **options)
        return connect_http(http_servers.start(scenario), name=scenario, **options)

    return make


def stdio(log: Path, scenario: str = "files", **options: Any) -> McpConnection:
    env = {"MCP_TEST_LOG": str(log)}
    return connect_stdio(sys.executable, ["-P", str(SERVERS), scenario], name=scenario, env=env, **options)


@pytest.fixture
async def files(log: Path) -> AsyncIterator[McpConnection]:
    """An open stdio connection to the files server."""
    async with stdio(log) as server:
        yield server


def by_name(tools: list[McpTool]) -> dict[str, McpTool]:
    return {tool.name: tool for tool in tools}


# --- connecting and wiring -------------------------------------------------------------------------


async def test_tools_are_wired_with_the_callers_tiers(connect: Connect) -> None:
    """Every listed tool becomes a Tool with the server's name and description and the caller's tier."""
    async with connect() as server:
        tools = by_name(await server.tools(tiers=TIERS))
    assert {"search", "echo", "read_file", "delete_file", "hint_none"} <= tools.keys()
    search = tools["search"]
    assert (search.name, search.description, search.tier, search.server) == (
        "search",
        "Search the files for a query.",
        Tier.READ_ONLY,
        "files",
    )
    assert issubclass(search.args_type, McpArgs)
    assert tools["delete_file"].tier is Tier.IRREVERSIBLE
    assert declared_tier(tools["hint_none"]) is None


async def test_a_tool_without_a_tier_raises_on_tier_and_names_the_fix(files: McpConnection) -> None:
    """Reading the tier of a tool wired without one is an AttributeError naming the tool and the tiers."""
    (tool,) = await files.tools(include=["delete_file"])
    with pytest.raises(AttributeError, match=r"'delete_file' of server 'files' has no tier.*Tier.READ_ONLY"):
        _ = tool.tier


async def test_a_read_only_call_runs_in_the_plain_loop_and_its_structured_content_is_the_batch(
    connect: Connect,
) -> None:
    """A read-only MCP tool runs live; its structured content is the batch's one item."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["search", "read_file"])
        caller = ScriptedCaller([call_step({"query": "otters"}, tool="search"), done_step("enough")])
        result = await run_tool_loop(caller, Agent(), tools, "find otters", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert result.items == [{"result": ["otters-1", "otters-2"]}]
    caller.assert_complete()


async def test_without_structured_content_each_content_item_is_an_item(files: McpConnection) -> None:
    """A tool that returns no structured content gives one JSON item per content item."""
    (echo,) = await files.tools(tiers=TIERS, include=["echo"])
    batch = await echo.call(echo.args_type.model_validate({"text": "hello"}))
    assert list(batch) == [{"type": "text", "text": "hello"}]


async def test_a_five_megabyte_result_comes_back_whole(connect: Connect) -> None:
    """A 5 MB result crosses the transport intact and is the call's batch."""
    size = 5 * 1024 * 1024
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["big"])
        caller = ScriptedCaller([call_step({"size": size}, tool="big"), done_step()])
        result = await run_tool_loop(caller, Agent(), tools, "big", FAST)
    assert result.outcome is Outcome.APPLIED
    (item,) = result.items
    assert item["type"] == "text"
    assert len(item["text"]) == size


# --- tiers -----------------------------------------------------------------------------------------


async def test_a_lying_read_only_annotation_is_still_gated_by_the_callers_tier(connect: Connect, log: Path) -> None:
    """A delete the server annotates read-only, given IRREVERSIBLE by the caller, is proposed, never run."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["search", "delete_file"], trust_annotations=True)
        caller = ScriptedCaller([call_step({"path": "/etc/passwd"}, tool="delete_file", rationale="clean up")])
        result = await run_tool_loop_tiered(caller, Agent(), tools, "tidy", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.PROPOSED)
    (proposal,) = result.proposed
    assert (proposal.tool_name, proposal.tier) == ("delete_file", Tier.IRREVERSIBLE)
    assert proposal.args.model_dump() == {"path": "/etc/passwd"}
    assert calls(log) == []


@pytest.mark.slow
async def test_without_tiers_or_the_opt_in_every_tool_is_refused_and_nothing_runs(connect: Connect, log: Path) -> None:
    """Annotations alone give no tier: the loop ends TOOL_DECLARES_NO_TIER before any model call."""
    async with connect() as server:
        tools = await server.tools(include=["search", "delete_file"])
        caller = ScriptedCaller([call_step({"path": "/x"}, tool="delete_file")])
        result = await run_tool_loop_tiered(caller, Agent(), tools, "tidy", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER)
    assert isinstance(result.error, MissingTierError)
    assert caller.requests == []
    assert calls(log) == []


@pytest.mark.parametrize(
    ("tool", "tier"),
    [
        ("hint_none", Tier.IRREVERSIBLE),
        ("hint_read_only", Tier.READ_ONLY),
        ("hint_reversible", Tier.REVERSIBLE),
        ("hint_not_destructive", Tier.IRREVERSIBLE),
        ("hint_open_world", Tier.EXTERNAL_REVERSIBLE),
        ("hint_closed_destructive", Tier.IRREVERSIBLE),
    ],
)
async def test_with_the_opt_in_annotations_map_to_tiers_and_a_missing_hint_counts_against(
    files: McpConnection, tool: str, tier: Tier
) -> None:
    """readOnly -> READ_ONLY; not destructive and closed-world -> REVERSIBLE; open-world -> EXTERNAL_REVERSIBLE;
    anything else, an absent hint included, -> IRREVERSIBLE."""
    (wired,) = await files.tools(include=[tool], trust_annotations=True)
    assert wired.tier is tier


async def test_the_callers_tier_wins_over_the_annotations(files: McpConnection) -> None:
    """With the opt-in, a tier the caller gives still decides; annotations only fill the gaps."""
    tools = by_name(
        await files.tools(tiers={"hint_read_only": Tier.IRREVERSIBLE}, trust_annotations=True, include=None)
    )
    assert tools["hint_read_only"].tier is Tier.IRREVERSIBLE
    assert tools["hint_reversible"].tier is Tier.REVERSIBLE


async def test_tiers_can_be_a_function_of_the_tool_definition(files: McpConnection) -> None:
    """A function sees each definition (name, annotations, schema) and returns a tier or None."""

    def tier_for(definition: mcp.types.Tool) -> Tier | None:
        if definition.name.startswith("hint_"):
            return None
        return Tier.READ_ONLY if "path" not in definition.input_schema.get("properties", {}) else Tier.IRREVERSIBLE

    tools = by_name(await files.tools(tiers=tier_for))
    assert tools["search"].tier is Tier.READ_ONLY
    assert tools["delete_file"].tier is Tier.IRREVERSIBLE
    assert declared_tier(tools["hint_reversible"]) is None


async def test_a_tier_is_fixed_at_wiring(files: McpConnection) -> None:
    """Changing the caller's mapping after wiring does not change a wired tool's tier."""
    tiers = dict(TIERS)
    (delete,) = await files.tools(tiers=tiers, include=["delete_file"])
    tiers["delete_file"] = Tier.READ_ONLY
    assert delete.tier is Tier.IRREVERSIBLE


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tiers": {"search": "read_only"}}, r"'read_only', not a Tier; choose one of Tier.READ_ONLY"),
        ({"tiers": lambda definition: 0}, r"is 0, not a Tier"),
        (
            {"tiers": {"serach": Tier.READ_ONLY}},
            r"tiers names tools that MCP server 'files' does not list: \['serach'\]",
        ),
        ({"include": ["nope"]}, r"include names tools .* \['nope'\]"),
        ({"include": "search"}, r"include=\['search'\]"),
        ({"names": {"nope": "x"}}, r"names names tools .* \['nope'\]"),
    ],
)
async def test_wiring_mistakes_are_usage_errors_naming_the_fix(
    files: McpConnection, options: dict[str, Any], message: str
) -> None:
    """A non-Tier tier, or an option naming a tool the server does not list, is refused at wiring."""
    with pytest.raises(UsageError, match=message):
        await files.tools(**options)


# --- tool names from the server --------------------------------------------------------------------


async def test_a_server_listing_two_tools_under_one_name_is_refused(connect: Connect) -> None:
    """Duplicate names from a server wire nothing: a call could reach either definition."""
    async with connect("duplicate") as server:
        with pytest.raises(McpServerError, match=r"MCP server 'duplicate' lists two tools named 'search'"):
            await server.tools(tiers={"search": Tier.READ_ONLY})


async def test_names_the_model_cannot_call_are_refused_with_the_fix(connect: Connect) -> None:
    """A dotted name, or one that collides with a step field, is a UsageError naming names= and include=."""
    async with connect("bad-names") as server:
        with pytest.raises(UsageError, match=r"'files\.read' of MCP server 'bad-names' cannot be wired.*names=\{"):
            await server.tools(tiers={"search": Tier.READ_ONLY})
        with pytest.raises(UsageError, match=r"'done' of MCP server 'bad-names' cannot be wired.*collides"):
            await server.tools(include=["done"])
        (search,) = await server.tools(tiers={"search": Tier.READ_ONLY}, include=["search"])
        assert search.name == "search"


async def test_a_renamed_tool_is_called_by_its_server_name(connect: Connect, log: Path) -> None:
    """names= gives a tool a usable name; the call still reaches the server's tool."""
    async with connect("bad-names") as server:
        tools = await server.tools(
            tiers={"files.read": Tier.READ_ONLY, "done": Tier.READ_ONLY, "search": Tier.READ_ONLY},
            names={"files.read": "files_read", "done": "finish"},
        )
        assert sorted(tool.name for tool in tools) == ["files_read", "finish", "search"]
        caller = ScriptedCaller([call_step({"path": "a.txt"}, tool="files_read"), done_step()])
        result = await run_tool_loop(caller, Agent(), tools, "read", FAST)
    assert result.items == [{"result": "a.txt"}]
    assert calls(log) == ["files.read a.txt"]


async def test_a_rename_with_a_trailing_newline_is_refused(files: McpConnection) -> None:
    """names= giving a tool a name the model cannot call ('echo\\n') is a UsageError naming the fix."""
    with pytest.raises(UsageError, match=r"'echo' of MCP server 'files' cannot be wired.*'echo\\n' is not valid"):
        await files.tools(tiers=TIERS, names={"echo": "echo\n"})


async def test_two_tools_renamed_to_one_name_are_refused(files: McpConnection) -> None:
    """A rename that makes two tools share a name is a UsageError."""
    with pytest.raises(UsageError, match=r"would both be named 'search'"):
        await files.tools(names={"echo": "search"})


# --- arguments -------------------------------------------------------------------------------------


async def test_schema_invalid_args_are_reasked_and_never_sent(connect: Connect, log: Path) -> None:
    """Args that break the input schema go back to the model as a validation error; only valid ones reach the server."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["bounded"])
        caller = ScriptedCaller(
            [
                call_step({"name": "NOT lower", "count": 0}, tool="bounded"),
                call_step({"name": "ok", "count": 2}, tool="bounded"),
                done_step(),
            ]
        )
        result = await run_tool_loop(caller, Agent(), tools, "repeat", FAST)
    assert result.outcome is Outcome.APPLIED
    assert result.items == [{"result": ["ok", "ok"]}]
    assert calls(log) == ["bounded ok 2"]
    reasked = caller.requests[1].reask
    assert reasked is not None
    assert "input schema of tool 'bounded'" in reasked
    assert "count: 0 is less than the minimum of 1" in reasked


async def test_the_args_type_validates_against_the_input_schema(files: McpConnection) -> None:
    """args_type refuses a missing field, a wrong type and a broken constraint, naming each field."""
    (bounded,) = await files.tools(tiers=TIERS, include=["bounded"])
    with pytest.raises(ValidationError, match=r"'name' is a required property"):
        bounded.args_type.model_validate({"count": 1})
    with pytest.raises(ValidationError, match=r"count: 'many' is not of type 'integer'"):
        bounded.args_type.model_validate({"name": "a", "count": "many"})
    assert bounded.args_type.model_validate({"name": "a", "count": None}).root == {"name": "a"}


async def test_args_that_bypassed_validation_are_refused_before_sending(files: McpConnection, log: Path) -> None:
    """Args built without validation (or of another tool) are checked again by call and never sent."""
    (bounded,) = await files.tools(tiers=TIERS, include=["bounded"])
    forged = bounded.args_type.model_construct({"name": "x", "count": 99})
    with pytest.raises(UsageError, match=r"do not match its input schema; nothing was sent"):
        await bounded.call(forged)
    assert calls(log) == []


async def test_the_step_schema_keeps_the_servers_schema_with_optional_fields_nullable(files: McpConnection) -> None:
    """The model sees the input schema with refs inlined and optional properties accepting null."""
    (bounded,) = await files.tools(tiers=TIERS, include=["bounded"])
    schema = bounded.args_type.model_json_schema()
    assert schema["required"] == ["name"]
    assert schema["properties"]["name"]["pattern"] == "^[a-z]+$"
    assert schema["properties"]["count"]["anyOf"][1] == {"type": "null"}
    assert "$defs" not in json.dumps(schema)


# --- error results and failing servers -------------------------------------------------------------


async def test_an_error_result_is_the_calls_observation_and_the_loop_goes_on(connect: Connect) -> None:
    """isError: the server's message is shown to the model for that call; the run continues."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["fail", "search"])
        agent = Agent()
        caller = ScriptedCaller(
            [call_step({"message": "disk on fire"}, tool="fail"), call_step({"query": "q"}, tool="search"), done_step()]
        )
        result = await run_tool_loop(caller, agent, tools, "try", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    observation = agent.infos[1].prior_calls[0].observation
    assert observation is not None
    assert "tool 'fail' reported an error" in observation
    assert "disk on fire" in observation
    assert result.items == [{"result": ["q-1", "q-2"]}]


async def test_a_server_that_dies_mid_run_ends_tool_error_naming_it_and_keeps_the_items(
    connect: Connect, log: Path
) -> None:
    """The server exits during a call: TOOL_ERROR, the error names the server, earlier items are kept."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["search", "crash"])
        caller = ScriptedCaller([call_step({"query": "a"}, tool="search"), call_step({}, tool="crash")])
        result = await run_tool_loop(caller, Agent(), tools, "go", FAST)
        assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
        assert result.items == [{"result": ["a-1", "a-2"]}]
        assert isinstance(result.error, ToolError)
        assert result.error.tool_name == "crash"
        assert isinstance(result.error.__cause__, McpServerError)
        assert result.error.__cause__.server == "files"
        assert "MCP server 'files'" in str(result.error)
        assert calls(log) == ["crash"]
        with pytest.raises(McpServerError, match=r"MCP server 'files'"):
            await tools[0].call(tools[0].args_type.model_validate({"query": "b"}))


async def test_a_hanging_server_ends_tool_error_naming_it(connect: Connect) -> None:
    """A call the server never answers fails when the connection's timeout runs out, naming the server."""
    async with connect(timeout=1.0) as server:
        tools = await server.tools(tiers=TIERS, include=["search", "hang"])
        caller = ScriptedCaller([call_step({"query": "a"}, tool="search"), call_step({}, tool="hang")])
        result = await run_tool_loop(caller, Agent(), tools, "go", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert result.items == [{"result": ["a-1", "a-2"]}]
    assert "MCP server 'files' did not answer the call to tool 'hang' within 1.0s" in str(result.error)


async def test_the_loops_tool_timeout_also_bounds_an_mcp_call(files: McpConnection) -> None:
    """LoopConfig.tool_timeout cuts a hanging MCP call short like any tool's."""
    tools = await files.tools(tiers=TIERS, include=["hang"])
    caller = ScriptedCaller([call_step({}, tool="hang")])
    result = await run_tool_loop(caller, Agent(), tools, "go", LoopConfig(retry=NO_WAIT, tool_timeout=0.5))
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "timed out" in str(result.error)


async def test_a_changed_input_schema_is_refused_at_call_time(connect: Connect) -> None:
    """After the server changes a wired tool's schema, a call to it is refused and not sent; the run ends TOOL_ERROR."""
    async with connect() as server:
        tools = await server.tools(tiers=TIERS, include=["read_file", "evolve"])
        caller = ScriptedCaller(
            [
                call_step({"path": "a"}, tool="read_file"),
                call_step({}, tool="evolve"),
                call_step({"path": "b"}, tool="read_file"),
            ]
        )
        result = await run_tool_loop(caller, Agent(), tools, "read", FAST)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "changed the input schema of tool 'read_file' after it was wired; the call was refused" in str(result.error)
    assert result.items == [{"result": "contents of a"}, {"result": "read_file changed"}]


async def test_new_annotations_or_description_change_neither_the_tier_nor_the_call(files: McpConnection) -> None:
    """A server that relabels a tool after wiring leaves its tier and description as wired; its calls still run."""
    tools = by_name(
        await files.tools(
            tiers={"relabel": Tier.REVERSIBLE}, trust_annotations=True, include=["hint_read_only", "relabel"]
        )
    )
    hinted = tools["hint_read_only"]
    assert hinted.tier is Tier.READ_ONLY
    await tools["relabel"].call(tools["relabel"].args_type.model_validate({}))
    assert hinted.tier is Tier.READ_ONLY
    assert hinted.description == "annotated hint_read_only"
    assert list(await hinted.call(hinted.args_type.model_validate({}))) == [{"result": "hint_read_only"}]
    (rewired,) = await files.tools(trust_annotations=True, include=["hint_read_only"])
    assert rewired.tier is Tier.EXTERNAL_REVERSIBLE


async def test_a_tool_used_after_its_connection_closed_fails_naming_the_server(log: Path) -> None:
    """A call outside the ``async with`` raises McpServerError saying the connection is closed."""
    async with stdio(log) as server:
        (search,) = await server.tools(tiers=TIERS, include=["search"])
    with pytest.raises(McpServerError, match=r"connection to MCP server 'files' is closed"):
        await search.call(search.args_type.model_validate({"query": "a"}))


async def test_a_server_that_cannot_start_fails_the_connection_naming_it() -> None:
    """A server process that exits at once is an McpServerError from ``async with``, naming the server."""
    with pytest.raises(McpServerError, match=r"could not connect to MCP server 'broken'"):
        async with connect_stdio(sys.executable, ["-c", "raise SystemExit(2)"], name="broken", timeout=30):
            pass


async def test_an_unreachable_http_server_fails_the_connection_naming_it() -> None:
    """Nothing listening on the port: McpServerError naming the server."""
    with pytest.raises(McpServerError, match=r"MCP server 'nowhere'"):
        async with connect_http(f"http://127.0.0.1:{free_port()}/mcp", name="nowhere", timeout=30):
            pass


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: connect_http("ftp://x/mcp"), r"http:// or https://"),
        (lambda: connect_stdio("python", name=" "), r"non-empty name"),
        (lambda: connect_stdio("python", timeout=0), r"timeout must be positive"),
    ],
)
def test_connection_mistakes_are_usage_errors(call: Callable[[], object], message: str) -> None:
    """A bad URL, an empty name or a non-positive timeout is refused when the connection is made."""
    with pytest.raises(UsageError, match=message):
        call()


def test_import_agentkit_does_not_import_the_mcp_sdk() -> None:
    """The core stays light: only ``import agentkit.mcp`` loads the SDK."""
    code = (
        "import sys, agentkit, agentkit.journal, agentkit.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
