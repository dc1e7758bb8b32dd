"""assert_type checks for single shots, the pair and the reflective prompt (mypy only).

A ``# type: ignore[code]`` here is a negative check: ``warn_unused_ignores`` fails the run if
mypy stops reporting that error.
"""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel

from agentkit import Outcome, Prompt, RoleSpec, StopReason, ToolRoundInfo, Usage
from agentkit._once import OnceAgent, OnceResult, RoundInfo, TextResult, is_material, run_once, run_once_text
from agentkit._pair import Critique, LLMVerifier, PairConfig, PairResult, Review, RulesVerifier, Verifier, pair
from agentkit.errors import AgentkitError
from agentkit.prompting import USE_THE_TOOL, reflective_prompt, worked_example
from agentkit.testing import ScriptedCaller
from tests.typing.models import Doc, Triage, Triager


class Invoice(BaseModel):
    total: int


class InvoiceCritic:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: Invoice, info: RoundInfo) -> Prompt:
        return Prompt(system="s", dynamic=ctx.model_dump_json())


def positive(total: Invoice) -> tuple[bool, str]:
    return total.total > 0, "total must be positive"


async def single_shots(caller: ScriptedCaller) -> None:
    agent: OnceAgent[str] = Triager()
    result = await run_once(caller, agent, "ticket", schema=Triage)
    assert_type(result, OnceResult[Triage])
    assert_type(result.value, Triage | None)
    assert_type(result.outcome, Outcome)
    assert_type(result.stop_reason, StopReason)
    assert_type(result.error, AgentkitError | None)
    assert_type(result.usage, Usage)
    assert_type(result.raise_for_error(), OnceResult[Triage])
    assert_type(is_material(result.value), bool)

    text = await run_once_text(caller, Triager(), "thread")
    assert_type(text, TextResult)
    assert_type(text.text, str | None)
    assert_type(text.raise_for_error(), TextResult)

    await run_once(caller, Triager(), 42, schema=Triage)  # type: ignore[misc]  # ctx must match the agent


async def pairs(caller: ScriptedCaller) -> None:
    rules = RulesVerifier(positive)
    assert_type(rules, RulesVerifier[Invoice])
    assert_type(await rules.review(Invoice(total=1)), Review)
    result = await pair(caller, Triager(), rules, "order", schema=Invoice)
    assert_type(result, PairResult[Invoice])
    assert_type(result.value, Invoice | None)
    assert_type(result.rounds, int)
    assert_type(result.approved, bool)
    assert_type(result.raise_for_error(), PairResult[Invoice])

    llm: LLMVerifier[Invoice] = LLMVerifier(caller, InvoiceCritic())
    verifier: Verifier[Invoice] = llm
    configured = await pair(caller, Triager(), verifier, "order", PairConfig(max_rounds=3), schema=Invoice)
    assert_type(configured, PairResult[Invoice])

    def same_total(a: Invoice, b: Invoice) -> bool:
        return a.total == b.total

    compared = await pair(caller, Triager(), rules, "order", schema=Invoice, same=same_total)
    assert_type(compared.value, Invoice | None)
    assert_type(Critique(approve=True).feedback, str)

    await pair(caller, Triager(), rules, "order", schema=Triage)  # type: ignore[misc]  # verifier judges Invoice


def prompts(info: ToolRoundInfo[Doc]) -> None:
    prompt = reflective_prompt(USE_THE_TOOL, "find it", info, render_item=lambda d: d.id)
    assert_type(prompt, Prompt)
    assert_type(worked_example("q", Doc(id="x"), ["r"]), str)
    example = worked_example("q", {"id": "x"}, ["r"], tool="find", then=Doc(id="x"), then_tool="drop", check="c")
    assert_type(reflective_prompt("d", "r", info, example=example, check="c"), Prompt)
    worked_example("q", Doc(id="x"), ["r"], then=3)  # type: ignore[arg-type]  # then is a call's arguments
    reflective_prompt("d", "r", info, render_item=lambda d: d.title)  # type: ignore[attr-defined]  # items are Doc
