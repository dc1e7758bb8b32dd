"""RepeatPolicy: a repeated call ends the run (STOP, the default) or is refused and the run goes on (REFUSE)."""

from __future__ import annotations

import pytest

from agentkit import (
    LoopConfig,
    Observer,
    Outcome,
    PriorCall,
    RepeatPolicy,
    StopReason,
    Tier,
    ToolRoundInfo,
    UsageError,
    run_tool_loop,
    tool,
)
from agentkit.events import DegenerationDetected, Event
from agentkit.prompting import reflective_prompt
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Executor, Query

RAN: list[str] = []


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Look a query up."""
    RAN.append(args.query)
    return [args.query.upper()]


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def refusing(repeat_refusals: int = 2) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, on_repeat=RepeatPolicy.REFUSE, max_rounds=8, repeat_refusals=repeat_refusals)


async def test_stop_is_the_default_and_ends_stalemate() -> None:
    """Without a policy a repeated call ends STALEMATE at once and does not run."""
    assert LoopConfig().on_repeat is RepeatPolicy.STOP
    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="a"))])
    result = await run_tool_loop(caller, Executor[str](), search, "q", LoopConfig(retry=NO_WAIT))
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert RAN == ["a"]


async def test_refuse_does_not_run_the_repeat_and_tells_the_executor_the_round() -> None:
    """Under REFUSE the repeat is not run; the executor sees it repeats round 1's call and goes on to done."""
    agent = Executor[str]()
    caller = ScriptedCaller(
        [call_step(Query(query="a")), call_step(Query(query="b")), call_step(Query(query="a")), done_step()]
    )
    result = await run_tool_loop(caller, agent, search, "q", refusing())
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert RAN == ["a", "b"]
    assert result.items == ["A", "B"]
    told = agent.infos[3].prior_calls[-1]
    assert (told.round, told.repeats, told.batch) == (3, 1, ())
    assert told.observation is not None
    assert "round 1" in told.observation
    assert len(agent.infos[3].prior_results) == 2  # a refused call adds no batch
    record = result.trace[2]
    assert (record.tool_name, record.executed, record.observation) == ("search", False, told.observation)


async def test_refusals_are_bounded_then_the_run_ends_stalemate() -> None:
    """After repeat_refusals refusals, the next repeat ends STALEMATE."""
    steps = [call_step(Query(query="a"))] * 4
    result = await run_tool_loop(ScriptedCaller(steps), Executor[str](), search, "q", refusing(repeat_refusals=2))
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert (RAN, result.rounds) == (["a"], 4)
    assert [r.observation is not None for r in result.trace] == [False, True, True, False]


async def test_a_refused_round_counts_toward_the_ceiling() -> None:
    """A refused repeat uses its round: the ceiling still ends the run."""
    steps = [call_step(Query(query="a")), call_step(Query(query="a"))]
    config = LoopConfig(retry=NO_WAIT, on_repeat=RepeatPolicy.REFUSE, max_rounds=2)
    result = await run_tool_loop(ScriptedCaller(steps), Executor[str](), search, "q", config)
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.APPLIED, StopReason.ROUND_CEILING, 2)


class Seen(Observer):
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


async def test_observers_see_refused_and_final_repeats() -> None:
    """DegenerationDetected is emitted for each repeat, marked refused when the run goes on."""
    seen = Seen()
    steps = [call_step(Query(query="a"))] * 3
    await run_tool_loop(ScriptedCaller(steps), Executor[str](), search, "q", refusing(repeat_refusals=1), observer=seen)
    marks = [(e.round, e.refused) for e in seen.events if isinstance(e, DegenerationDetected)]
    assert marks == [(2, True), (3, False)]


@pytest.mark.parametrize(
    ("field", "value"), [("on_repeat", "refuse"), ("repeat_refusals", 0), ("repeat_refusals", True)], ids=repr
)
def test_policy_fields_are_validated(field: str, value: object) -> None:
    """A wrong on_repeat or repeat_refusals is a UsageError naming the field."""
    with pytest.raises(UsageError, match=field):
        LoopConfig(**{field: value})  # type: ignore[arg-type]  # the wrong value under test


def test_reflective_prompt_shows_a_refused_repeat_and_its_round() -> None:
    """The reflective prompt renders a refused repeat as not run, naming the round that answers it."""
    first = PriorCall(round=1, tool_name="search", args=Query(query="a"), batch=("A",))
    again: PriorCall[str] = PriorCall(
        round=2, tool_name="search", args=Query(query="a"), observation="not run: repeats", repeats=1
    )
    info = ToolRoundInfo(
        round=3, max_rounds=4, is_final_round=False, prior_results=(("A",),), prior_calls=(first, again)
    )
    text = reflective_prompt("Find things.", "q", info).dynamic
    assert '2. Round 2: search {"query":"a"}\n   not run: it repeats the call of round 1' in text
