"""Behaviour of the reflective prompt helper: stable system part, everything that changes in dynamic."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Outcome,
    PriorCall,
    Prompt,
    ProposedAction,
    RoleSpec,
    Tier,
    ToolRetry,
    ToolRoundInfo,
)
from agentkit import tool as make_tool
from agentkit._loops import run_tool_loop, run_tool_loop_tiered
from agentkit._step import build_step_model
from agentkit.prompting import USE_THE_TOOL, reflective_prompt, worked_example
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Query

DOCTRINE = "You find notes for the request."


class Remove(BaseModel):
    note_id: int


class Note(BaseModel):
    title: str


@make_tool(tier=Tier.READ_ONLY)
def search(args: Query) -> Sequence[Note]:
    """Search the notes by keyword."""
    if not args.query:
        raise ToolRetry("query must not be empty")
    return [Note(title=f"about {args.query}")]


@make_tool(tier=Tier.IRREVERSIBLE)
def remove(args: Remove) -> Sequence[Note]:
    """Delete a note."""
    return []


def info(
    round: int,
    max_rounds: int | None = 3,
    *,
    prior_results: tuple[Sequence[Note], ...] = (),
    prior_calls: tuple[PriorCall[Note], ...] = (),
    proposals: tuple[ProposedAction[Any], ...] = (),
) -> ToolRoundInfo[Note]:
    return ToolRoundInfo(
        round=round,
        max_rounds=max_rounds,
        is_final_round=round == max_rounds,
        prior_results=prior_results,
        prior_calls=prior_calls,
        proposals=proposals,
    )


def test_system_is_byte_stable_across_rounds() -> None:
    """The system part is identical whatever the round, the results and the proposals."""
    example = worked_example("q", Query(query="x"), ["x"])
    first = reflective_prompt(DOCTRINE, "find x", info(1), example=example, tools=[search])
    later = reflective_prompt(
        DOCTRINE,
        "find something else",
        info(
            3,
            prior_results=([Note(title="a")],),
            prior_calls=(PriorCall(round=1, tool_name="search", args=Query(query="x"), batch=[Note(title="a")]),),
        ),
        example=example,
        tools=[search],
    )
    assert first.system == later.system
    assert "find x" not in first.system
    assert first.dynamic != later.dynamic


def test_dynamic_carries_request_and_budget() -> None:
    """The dynamic part states the request and where the round sits in the budget."""
    prompt = reflective_prompt(DOCTRINE, "find the lease", info(2, 4))
    assert "find the lease" in prompt.dynamic
    assert "Round 2 of 4" in prompt.dynamic
    assert "2 more after this one" in prompt.dynamic


def test_unlimited_rounds_say_so() -> None:
    """With no ceiling the budget line says there is no fixed limit."""
    prompt = reflective_prompt(DOCTRINE, "r", info(5, None))
    assert "Round 5 (no fixed limit" in prompt.dynamic
    assert "final round" not in prompt.dynamic


def test_final_round_instructs_to_commit() -> None:
    """Only the final round tells the executor to commit now."""
    assert "final round: commit now" in reflective_prompt(DOCTRINE, "r", info(3)).dynamic
    assert "commit now" not in reflective_prompt(DOCTRINE, "r", info(2)).dynamic


def test_first_round_says_nothing_looked_up() -> None:
    """Round 1 with no prior calls says nothing has been looked up yet."""
    assert "Nothing has been looked up yet" in reflective_prompt(DOCTRINE, "r", info(1)).dynamic


def test_prior_results_rendered_with_the_item_renderer() -> None:
    """Each earlier call shows its args and every item through render_item."""
    calls = (
        PriorCall(round=1, tool_name="search", args=Query(query="lease"), batch=[Note(title="A"), Note(title="B")]),
    )
    prompt = reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls), render_item=lambda note: f"<<{note.title}>>")
    assert 'search {"query":"lease"}' in prompt.dynamic
    assert "returned 2 results" in prompt.dynamic
    assert "- <<A>>" in prompt.dynamic
    assert "- <<B>>" in prompt.dynamic
    assert "Reflect on the results above" in prompt.dynamic


def test_default_renderer_shows_models_as_json() -> None:
    """Without a renderer a pydantic item is shown as compact JSON."""
    calls: tuple[PriorCall[Note], ...] = (
        PriorCall(round=1, tool_name="search", args=Query(query="q"), batch=[Note(title="A")]),
    )
    assert '{"title":"A"}' in reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls)).dynamic


def test_empty_batch_says_nothing_returned() -> None:
    """A call that returned no items is shown as having returned nothing."""
    calls: tuple[PriorCall[Note], ...] = (PriorCall(round=1, tool_name="search", args=Query(query="q"), batch=[]),)
    assert "returned nothing" in reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls)).dynamic


def test_tool_retry_observation_rendered() -> None:
    """A call the tool refused with ToolRetry shows the tool's message, not results."""
    calls: tuple[PriorCall[Note], ...] = (
        PriorCall(round=1, tool_name="search", args=Query(query=""), observation="query must not be empty"),
    )
    prompt = reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls))
    assert "the tool did not run it: query must not be empty" in prompt.dynamic


def test_batches_without_call_records_still_rendered() -> None:
    """An info carrying only prior_results still shows the batches to reflect on."""
    prompt = reflective_prompt(DOCTRINE, "r", info(2, prior_results=([Note(title="A")],)))
    assert '{"title":"A"}' in prompt.dynamic


def test_proposal_rendered_once() -> None:
    """A proposed call appears once, as awaiting approval, not again in a separate list."""
    args = Remove(note_id=3)
    proposal = ProposedAction.create(tool_name="remove", tier=Tier.IRREVERSIBLE, args=args, round=1)
    calls: tuple[PriorCall[Note], ...] = (
        PriorCall(round=1, tool_name="remove", args=args, observation="proposed", proposed=True),
    )
    prompt = reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls, proposals=(proposal,)))
    assert prompt.dynamic.count('remove {"note_id":3}') == 1
    assert "proposed for human approval" in prompt.dynamic


def test_proposal_without_call_record_is_listed() -> None:
    """A proposal not among the call records is listed as awaiting approval."""
    proposal = ProposedAction.create(tool_name="remove", tier=Tier.IRREVERSIBLE, args=Remove(note_id=4), round=1)
    prompt = reflective_prompt(DOCTRINE, "r", info(2, proposals=(proposal,)))
    assert "Awaiting human approval" in prompt.dynamic
    assert 'remove {"note_id":4} (IRREVERSIBLE)' in prompt.dynamic


def test_tools_and_doctrine_in_system() -> None:
    """The doctrine and each tool's name and description are in the system part."""
    prompt = reflective_prompt(DOCTRINE + " " + USE_THE_TOOL, "r", info(1), tools=[search, remove])
    assert prompt.system.startswith(DOCTRINE)
    assert "- search: Search the notes by keyword." in prompt.system
    assert "- remove: Delete a note." in prompt.system


def test_use_the_tool_line_forbids_answering_from_memory() -> None:
    """The ready doctrine line tells the model to use the tool and not answer from memory."""
    assert "do not answer from memory" in USE_THE_TOOL
    assert "look it up first" in USE_THE_TOOL
    assert "Use the tool" in USE_THE_TOOL


def _replies(example: str) -> list[str]:
    return [line.split("reply: ", 1)[1] for line in example.splitlines() if " reply: " in line]


def test_worked_example_is_valid_single_tool_steps() -> None:
    """The example's two replies validate as steps of a single-tool loop: a call, then done."""
    example = worked_example("Which note covers the lease?", Query(query="lease"), ["Lease renewal 2024"])
    replies = [build_step_model(Query).model_validate_json(r) for r in _replies(example)]
    assert [r.done for r in replies] == [False, True]
    assert replies[0].call == Query(query="lease")
    assert "Lease renewal 2024" in example
    assert example.index("Round 1 reply") < example.index("Lease renewal 2024") < example.index("Round 2 reply")


def test_worked_example_replies_are_instances_of_the_step_schema() -> None:
    """The example's replies are laid out as the schema a constrained decoder follows: a decision."""
    example = worked_example("Which note covers the lease?", Query(query="lease"), ["Lease renewal 2024"])
    validator = jsonschema.Draft202012Validator(build_step_model(Query).model_json_schema())
    for reply in _replies(example):
        validator.validate(json.loads(reply))


def test_worked_example_names_the_tool_for_a_tool_set() -> None:
    """With tool= the call uses the multi-tool wire shape and validates as such."""
    example = worked_example("q", {"query": "lease"}, ["r"], tool="search")
    model = build_step_model((("search", Query), ("remove", Remove)))
    first = model.model_validate_json(_replies(example)[0])
    assert json.loads(_replies(example)[0])["decision"]["call"] == {"tool": "search", "args": {"query": "lease"}}
    assert first.call is not None


CHECK = "If a note above is the one asked for, set done to true; otherwise search again."


def test_check_line_ends_every_round_with_results_but_the_final_one() -> None:
    """``check`` is the last line of a round that has results; round 1 and the final round keep their own."""
    calls = (PriorCall(round=1, tool_name="search", args=Query(query="q"), batch=[Note(title="A")]),)
    assert reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls), check=CHECK).dynamic.endswith(CHECK)
    assert reflective_prompt(DOCTRINE, "r", info(1), check=CHECK).dynamic.endswith("Reply with your first step.")
    final = reflective_prompt(DOCTRINE, "r", info(3, prior_calls=calls), check=CHECK).dynamic
    assert CHECK not in final
    assert final.endswith("you will not see its results.")


def test_first_round_says_nothing_is_known_yet_and_asks_for_a_call() -> None:
    """Round 1 tells the executor nothing is known yet and to call a tool unless none is needed: told
    only to reply, a 0.5B model answered from memory and said done without looking anything up."""
    first = reflective_prompt(DOCTRINE, "r", info(1)).dynamic
    assert "Nothing is known yet" in first
    assert "call one (done: false)" in first
    calls = (PriorCall(round=1, tool_name="search", args=Query(query="q"), batch=[Note(title="A")]),)
    assert "Nothing is known yet" not in reflective_prompt(DOCTRINE, "r", info(2, prior_calls=calls)).dynamic


def _without_budget(dynamic: str) -> str:
    return "\n\n".join(part for part in dynamic.split("\n\n") if not part.startswith("Round "))


def test_worked_example_rounds_are_laid_out_as_the_real_rounds() -> None:
    """Each example round is the real round's prompt (less its budget line), then the reply: the
    layout a small model must act on, shown before it has to."""
    example = worked_example("find the lease", Query(query="lease"), ["Lease renewal"], tool_name="search", check=CHECK)
    show = lambda note: note.title  # noqa: E731  # the renderer the example's results were written with
    first = reflective_prompt(DOCTRINE, "find the lease", info(1), render_item=show, check=CHECK)
    calls = (PriorCall(round=1, tool_name="search", args=Query(query="lease"), batch=[Note(title="Lease renewal")]),)
    second = reflective_prompt(DOCTRINE, "find the lease", info(2, prior_calls=calls), render_item=show, check=CHECK)
    round_1 = example.index(_without_budget(first.dynamic))
    round_2 = example.index(_without_budget(second.dynamic))
    assert round_1 < example.index("Round 1 reply") < round_2 < example.index("Round 2 reply")


def test_worked_example_can_end_with_the_action_the_results_called_for() -> None:
    """With ``then``, round 2 makes that call (e.g. a delete found by the search) instead of done."""
    example = worked_example(
        "remove the stale note",
        Query(query="stale"),
        ["7: stale"],
        tool="search",
        then=Remove(note_id=7),
        then_tool="remove",
    )
    model = build_step_model((("search", Query), ("remove", Remove)))
    first, second = (model.model_validate_json(r) for r in _replies(example))
    assert (first.done, second.done) == (False, False)
    assert json.loads(_replies(example)[1])["decision"]["call"] == {"tool": "remove", "args": {"note_id": 7}}
    assert '1. Round 1: search {"query":"stale"}' in example


def test_worked_example_lands_in_system_only() -> None:
    """A worked example is part of the stable system text, never of the dynamic part."""
    example = worked_example("q", Query(query="x"), ["r"])
    prompt = reflective_prompt(DOCTRINE, "r", info(1), example=example)
    assert example in prompt.system
    assert "Example" not in prompt.dynamic


class Finder:
    """A typical executor: render() is one call to the helper."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Note]) -> Prompt:
        return reflective_prompt(DOCTRINE, ctx, info, render_item=lambda n: n.title)


async def test_loop_prompts_keep_system_and_show_results() -> None:
    """In a real loop, round 2's request repeats round 1's system and shows round 1's results."""
    caller = ScriptedCaller([call_step(Query(query="")), call_step(Query(query="lease")), done_step()])
    result = await run_tool_loop(caller, Finder(), search, "find the lease", LoopConfig(max_rounds=3))
    assert result.outcome is Outcome.APPLIED
    first, second, third = caller.requests
    assert first.system == second.system == third.system
    assert "query must not be empty" in second.dynamic
    assert "about lease" in third.dynamic
    assert "final round" in third.dynamic


class Cleaner:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Note]) -> Prompt:
        return reflective_prompt(DOCTRINE, ctx, info, tools=[search, remove])


async def test_tiered_loop_prompt_shows_the_proposal() -> None:
    """After a proposal in a continuing tiered loop, the next prompt says the call awaits approval."""
    caller = ScriptedCaller([call_step(Remove(note_id=3), tool="remove"), done_step()])
    config = LoopConfig(max_rounds=3, after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Cleaner(), [search, remove], "clean up", config)
    assert len(result.proposed) == 1
    assert "proposed for human approval" in caller.requests[1].dynamic
    assert caller.requests[0].system == caller.requests[1].system
