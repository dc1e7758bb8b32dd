"""What a run shows its executor: the evidence of its proposals and each round's earlier results, at a cost
that does not grow with the calls before it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from agentkit import AfterProposal, LoopConfig, RetryPolicy, StopReason, Tier, run_tool_loop_tiered
from agentkit import _views as views
from agentkit._proposals import call_digest, text_digest
from agentkit._state import json_text
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Doc, Executor, PathArgs, Query, Recording

CONTINUE = LoopConfig(
    max_rounds=None, after_proposal=AfterProposal.CONTINUE, retry=RetryPolicy(wait_initial=0, wait_max=0)
)


class Mixed(BaseModel):
    text: str
    score: float
    tags: list[str]


any_text = st.text(alphabet=st.characters(exclude_categories=()))
"""Every code point, lone surrogates, control characters and DEL included."""


@given(
    tool=any_text,
    args=st.builds(Mixed, text=any_text, score=st.floats(allow_nan=True, allow_infinity=True), tags=st.lists(any_text)),
)
def test_a_digest_taken_from_the_states_text_is_the_calls_digest(tool: str, args: Mixed) -> None:
    """The digest a call joins the view with, from the state's text of its args, is `call_digest` for any args."""
    assert views._digest(tool, args, None, json_text(args.model_dump(mode="json"))) == call_digest(tool, args)


async def test_a_run_without_proposals_takes_no_calls_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a proposal's evidence reads the digests of earlier calls: rounds that propose nothing take none."""
    taken: list[str] = []

    def counting(tool: str, args: BaseModel) -> str:
        taken.append(tool)
        return call_digest(tool, args)

    def from_text(tool: str, text: str) -> str:
        taken.append(tool)
        return text_digest(tool, text)

    monkeypatch.setattr(views, "call_digest", counting)
    monkeypatch.setattr(views, "text_digest", from_text)
    script = [call_step(Query(query=q), tool="search") for q in ("café", "plain", "thé")]
    result = await run_tool_loop_tiered(
        ScriptedCaller([*script, done_step()]), Executor[Doc](), [Recording("search", Tier.READ_ONLY)], "ctx"
    )
    assert (result.stop_reason, result.rounds, taken) == (StopReason.EXECUTOR_DONE, 4, [])


async def test_each_calls_digest_is_taken_once_however_many_proposals_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evidence of later proposals reads the digests of earlier calls; it does not take them again."""
    taken: list[str] = []

    def counting(tool: str, args: BaseModel) -> str:
        taken.append(tool)
        return call_digest(tool, args)

    monkeypatch.setattr(views, "call_digest", counting)
    # Args that are not ASCII are digested from the args, not the state's text: each such digest is counted.
    script: list[dict[str, Any]] = []
    for n in range(6):
        script.append(call_step(Query(query=f"café {n}"), tool="search"))
        script.append(call_step(PathArgs(path=f"/tmp/é{n}"), tool="delete"))
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    result = await run_tool_loop_tiered(
        ScriptedCaller([*script, done_step()]), Executor[Doc](), [search, delete], "ctx", CONTINUE
    )
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert len(result.proposed) == 6
    assert len(taken) == 6  # the searches' digests, once each (a proposal brings its own)
    last = result.proposed[-1].evidence
    assert last is not None
    assert [seen.digest for seen in last.calls] == [
        call_digest("search", Query(query="café 0")),
        call_digest("delete", PathArgs(path="/tmp/é0")),
        *(d for n in range(1, 5) for d in (
            call_digest("search", Query(query=f"café {n}")), call_digest("delete", PathArgs(path=f"/tmp/é{n}"))
        )),
        call_digest("search", Query(query="café 5")),
    ]  # fmt: skip
    assert [seen.ran for seen in last.calls] == [n % 2 == 0 for n in range(11)]


async def test_each_round_shows_the_batches_of_the_calls_that_ran_in_order() -> None:
    """`prior_results` holds one batch per call that ran, in order, with proposed calls left out."""
    script = [
        call_step(Query(query="a"), tool="search"),
        call_step(PathArgs(path="/x"), tool="delete"),
        call_step(Query(query="b"), tool="search"),
        done_step(),
    ]
    search, delete = Recording("search", Tier.READ_ONLY), Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    executor = Executor[Doc]()
    result = await run_tool_loop_tiered(ScriptedCaller(script), executor, [search, delete], "ctx", CONTINUE)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    shown = [[[doc.id for doc in batch] for batch in info.prior_results] for info in executor.infos]
    assert shown == [[], [["search:1"]], [["search:1"]], [["search:1"], ["search:2"]]]
    assert [len(info.prior_calls) for info in executor.infos] == [0, 1, 2, 3]
