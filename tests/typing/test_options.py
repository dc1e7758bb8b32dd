"""assert_type checks for the keyword options every loop entry point takes from one place (``agentkit._options``).

Checked by mypy and basedpyright. A ``# type: ignore[code]`` here is a negative check: ``warn_unused_ignores``
fails the run if mypy stops reporting that error.
"""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel

import agentkit as ak
from agentkit.decisions import Grants
from agentkit.events import LoggingObserver, iter_tool_loop, iter_tool_loop_tiered
from agentkit.testing import ScriptedCaller
from tests.typing.models import DeleteArgs, Doc, Finder, Planner, SearchArgs, delete, search


class Verdict(BaseModel):
    text: str


def same_search(a: SearchArgs, b: SearchArgs) -> bool:
    return a.query == b.query


def same_delete(a: DeleteArgs, b: DeleteArgs) -> bool:
    return a.path == b.path


async def every_entry_point_takes_the_shared_options(checkpoint: ak.RunCheckpoint) -> None:
    caller, log, grants = ScriptedCaller(), LoggingObserver(), Grants()
    plain = await ak.run_tool_loop(caller, Finder(), search, "q", ak.LoopConfig(), same=same_search, observer=log)
    assert_type(plain, ak.ToolLoopResult[Doc])
    assert_type(ak.run_tool_loop_sync(caller, Finder(), search, "q", answer=Verdict), ak.ToolLoopResult[Doc, Verdict])
    async with iter_tool_loop(caller, Finder(), search, "q", observer=[log], answer=Verdict) as stream:
        assert_type(stream.result, ak.ToolLoopResult[Doc, Verdict])
    tiered = await ak.run_tool_loop_tiered(caller, Planner(), delete, "q", same=same_delete, grants=grants)
    assert_type(tiered, ak.TieredLoopResult[DeleteArgs, Doc])
    # grants= reaches the stream and the resumed run too: each takes the one set of options.
    async with iter_tool_loop_tiered(caller, Planner(), delete, "q", grants=grants, answer=Verdict) as run:
        assert_type(run.result, ak.TieredLoopResult[DeleteArgs, Doc, Verdict])
    resumed = await ak.resume_tool_loop(caller, Planner(), delete, "q", checkpoint, [], grants=grants, answer=Verdict)
    assert_type(resumed, ak.TieredLoopResult[DeleteArgs, Doc, Verdict])
    loop = ak.ToolLoop(caller, Planner(), delete, same=same_delete, observer=log, answer=Verdict, grants=grants)
    assert_type(await loop.run("q"), ak.TieredLoopResult[DeleteArgs, Doc, Verdict])


async def a_keyword_outside_the_options_is_refused() -> None:
    caller = ScriptedCaller()
    await ak.run_tool_loop(caller, Finder(), search, "q", grants=Grants())  # type: ignore[call-arg]  # a plain run proposes nothing
    await ak.run_tool_loop(caller, Finder(), search, "q", same=same_delete)  # type: ignore[arg-type]  # compares other args
    await ak.run_tool_loop_tiered(caller, Planner(), delete, "q", summarize=None)  # type: ignore[call-overload]  # resume only
