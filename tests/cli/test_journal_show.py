"""``agentkit journal show`` with text written by a model, a tool or an agent's author: each further line of it is
indented under its first, so it cannot forge a line of the command's own."""

from __future__ import annotations

import asyncio

import pytest

from agentkit import Tier, run_tool_loop_tiered, tool
from agentkit.journal import JournalObserver, open_journal
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.cli.support import Planner, cli, search
from tests.support import Executor, Query


@tool(tier=Tier.READ_ONLY)
def explode(args: Query) -> list[str]:
    """Fail with a message of several lines."""
    raise RuntimeError(f"{args.query}\nROUND  STEP  CALL\n1      done")


def test_journal_show_indents_every_further_line_of_a_run_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A run's error with line breaks (a tool's exception) cannot forge `show`'s own lines: each further line is
    indented under the first, so the rounds' table starts a line only where `show` wrote it."""

    async def run() -> str:
        journal = open_journal(db)
        try:
            with JournalObserver(journal) as observer:
                result = await run_tool_loop_tiered(
                    ScriptedCaller([call_step(Query(query="boom"), tool="explode")]),
                    Planner(),
                    [explode],
                    None,
                    observer=observer,
                )
            return result.run_id
        finally:
            await journal.close()

    run_id = asyncio.run(run())
    code, out, _ = cli(capsys, "journal", "show", run_id, "--db", db)
    assert code == 0
    lines = out.splitlines()
    [error] = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert lines[error + 1 : error + 3] == [" " * 11 + "ROUND  STEP  CALL", " " * 11 + "1      done"]
    assert [line for line in lines if line.startswith("ROUND")] == [lines[lines.index("") + 1]]


def test_journal_show_indents_a_model_name_of_several_lines(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A model name with a line break (a role's setting, written by whoever wrote the agent) cannot forge a line of
    `show`'s own: its further line is indented under the first."""

    class Forger(Executor[str]):
        def __init__(self) -> None:
            super().__init__("m\nROUND  STEP", system="plan")

    async def run() -> str:
        journal = open_journal(db)
        try:
            with JournalObserver(journal) as observer:
                caller = ScriptedCaller([done_step("done")])
                return (await run_tool_loop_tiered(caller, Forger(), [search], None, observer=observer)).run_id
        finally:
            await journal.close()

    code, out, _ = cli(capsys, "journal", "show", asyncio.run(run()), "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("ROUND")] == [lines[lines.index("") + 1]]
    assert " " * 11 + "ROUND  STEP, tools search" in lines
