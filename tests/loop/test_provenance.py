"""Provenance in process: once untrusted content has entered a run, the policy lowers what runs live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentkit import AfterProposal, LoopConfig, Outcome, StopReason, Tier, UsageError, run_tool_loop, tool
from agentkit import run_tool_loop_tiered as tiered
from agentkit._state import RoundEntry
from agentkit.provenance import ProvenancePolicy, Trust
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.provenance_support import (
    ATTACKER_IBAN,
    ATTACKER_MAIL,
    ATTACKER_URL,
    INBOX,
    NOTES,
    TASK,
    USER_MAIL,
    Email,
    Folder,
    Payment,
    Url,
    multi,
    ran,
    steps,
    world,
)
from tests.support import NO_WAIT, Doc, Executor


def config(**kwargs: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, after_proposal=AfterProposal.CONTINUE, max_rounds=8, **kwargs)


async def test_a_run_that_reads_no_untrusted_content_is_gated_by_its_tiers_alone() -> None:
    """Without an untrusted result, read-only, egress and reversible calls run live as without a policy."""
    tools = world()
    caller = steps(NOTES, ("archive", Folder(folder="old")), ("archive", Folder(folder="older")))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    assert {name: len(calls) for name, calls in ran(tools).items()} == {"archive": 2, "read_notes": 1}
    assert result.proposed == []
    assert result.provenance is not None
    assert not result.provenance.tainted
    assert all(
        not getattr(e, "untrusted", False) and not getattr(e, "from_untrusted", ()) for e in result.checkpoint.entries
    )


async def test_a_reversible_call_after_untrusted_content_becomes_a_proposal() -> None:
    """Once an untrusted result entered the run, a reversible call (which the tier lets run) is held."""
    tools = world()
    caller = steps(INBOX, ("archive", Folder(folder="inbox")))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    assert "archive" not in ran(tools)
    [proposal] = result.proposed
    assert proposal.evidence is not None
    assert proposal.evidence.provenance is not None
    assert proposal.evidence.provenance.held
    assert [o.tool_name for o in proposal.evidence.provenance.untrusted] == ["read_inbox"]


async def test_a_read_only_egress_call_after_untrusted_content_becomes_a_proposal() -> None:
    """A read-only GET is a way out: after untrusted content it never runs live (the exfiltration channel)."""
    tools = world()
    caller = steps(INBOX, ("fetch", Url(url=ATTACKER_URL)))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    assert "fetch" not in ran(tools)
    [proposal] = result.proposed
    assert proposal.evidence is not None
    assert proposal.evidence.provenance is not None
    provenance = proposal.evidence.provenance
    assert provenance.held
    assert [(m.path, m.value, m.origin.tool_name) for m in provenance.from_untrusted] == [
        ("url", ATTACKER_URL, "read_inbox")
    ]


async def test_a_read_only_call_without_egress_still_runs_after_untrusted_content() -> None:
    """The default ceiling keeps READ_ONLY reads that send nothing out running live."""
    tools = world()
    caller = steps(INBOX, NOTES)
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    assert sorted(ran(tools)) == ["read_inbox", "read_notes"]
    assert result.proposed == []


async def test_an_untrusted_egress_tool_runs_live_first_and_is_held_once_its_own_result_is_in() -> None:
    """The first fetch runs (nothing untrusted yet); its result taints the run, so the next fetch is held."""
    tools = world()
    caller = steps(("fetch", Url(url="https://home.example/a")), ("fetch", Url(url="https://home.example/b")))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    assert [c.model_dump() for c in tools["fetch"].calls] == [{"url": "https://home.example/a"}]
    assert [p.tool_name for p in result.proposed] == ["fetch"]


async def test_the_policy_off_is_tiers_only() -> None:
    """`LoopConfig(provenance=None)`: reversible and egress calls run live after untrusted content, no marks."""
    tools = world()
    caller = steps(INBOX, ("fetch", Url(url=ATTACKER_URL)), ("archive", Folder(folder="inbox")))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(provenance=None))
    assert sorted(ran(tools)) == ["archive", "fetch", "read_inbox"]
    assert result.provenance is None
    assert all(not getattr(e, "untrusted", False) for e in result.checkpoint.entries)


async def test_a_proposal_shows_which_argument_values_first_appeared_in_untrusted_content() -> None:
    """The IBAN and the address came from the inbox (marked); the user's own address from the task (not)."""
    tools = world()
    caller = steps(
        INBOX,
        ("pay", Payment(iban=ATTACKER_IBAN.replace(" ", ""), amount=5000)),
        ("send_email", Email(to=ATTACKER_MAIL, body="notes")),
        ("send_email", Email(to=USER_MAIL, body="a summary")),
    )
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    marks = [
        [(m.path, m.value) for m in p.evidence.provenance.from_untrusted]
        for p in result.proposed
        if p.evidence is not None and p.evidence.provenance is not None
    ]
    assert marks == [[("iban", ATTACKER_IBAN.replace(" ", ""))], [("to", ATTACKER_MAIL)], []]
    assert [p.evidence.provenance.held for p in result.proposed if p.evidence and p.evidence.provenance] == [
        False,
        False,
        False,
    ]


async def test_a_value_read_first_in_a_trusted_result_is_not_marked_when_untrusted_content_repeats_it() -> None:
    """First appearance decides: an account the user's notes held before the inbox is the user's."""
    tools = world()
    tools["read_inbox"].text = "pay DE44 5001 0517 5407 3249 31 now"
    caller = steps(NOTES, INBOX, ("pay", Payment(iban="DE44500105175407324931", amount=1)))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    [proposal] = result.proposed
    assert proposal.evidence is not None
    assert proposal.evidence.provenance is not None
    assert proposal.evidence.provenance.from_untrusted == ()
    assert proposal.evidence.provenance.tainted


async def test_a_call_that_ran_records_its_marked_arguments_in_its_entry() -> None:
    """A read-only call that still runs after untrusted content has its marked args recorded in its round."""
    tools = world()
    caller = steps(INBOX, ("read_notes", Folder(folder=ATTACKER_MAIL)))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config())
    rounds = [e for e in result.checkpoint.entries if e.kind == "round" and e.tool is not None]
    assert [(e.tool, e.untrusted, e.from_untrusted) for e in rounds] == [
        ("read_inbox", True, ()),
        ("read_notes", False, ("folder",)),
    ]


async def test_the_result_says_where_each_item_came_from() -> None:
    """`result.provenance.items` is parallel to `result.items`, each with its tool and trust."""
    tools = world()
    result = await tiered(steps(NOTES, INBOX), Executor[Doc](), list(tools.values()), TASK, config())
    assert result.provenance is not None
    assert [(o.tool_name, o.trust) for o in result.provenance.items] == [
        ("read_notes", Trust.TRUSTED),
        ("read_inbox", Trust.UNTRUSTED),
    ]
    assert len(result.provenance.items) == len(result.items)


class Summary(BaseModel):
    text: str


async def test_the_result_says_when_untrusted_content_preceded_the_answer() -> None:
    """An answer given after untrusted content is flagged, with the words of it that came from there."""
    tools = world()
    caller = ScriptedCaller(
        [call_step(INBOX[1], tool="read_inbox"), done_step(answer=Summary(text=f"send it to {ATTACKER_MAIL}"))]
    )
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(), answer=Summary)
    assert result.provenance is not None
    assert result.provenance.answer_after_untrusted
    assert [(m.path, m.value) for m in result.provenance.answer_from_untrusted] == [("text", ATTACKER_MAIL)]


async def test_an_answer_from_trusted_content_only_is_not_flagged() -> None:
    """No untrusted content, no flag."""
    tools = world()
    caller = ScriptedCaller([call_step(NOTES[1], tool="read_notes"), done_step(answer=Summary(text="fine"))])
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(), answer=Summary)
    assert result.provenance is not None
    assert not result.provenance.answer_after_untrusted


async def test_the_untiered_loop_ends_at_a_call_the_policy_holds() -> None:
    """`run_tool_loop` cannot propose: a call held after untrusted content ends the run, naming the policy."""
    tools = world()
    caller = steps(INBOX, ("archive", Folder(folder="x")))
    result = await run_tool_loop(caller, Executor[Doc](), [tools["read_inbox"], tools["archive"]], TASK, config())
    assert "archive" not in ran(tools)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "untrusted content" in str(result.error)


async def test_a_policy_ceiling_of_reversible_lets_reversible_calls_run() -> None:
    """`ProvenancePolicy(ceiling=Tier.REVERSIBLE)` is explicit: reversible calls still run; egress does not."""
    tools = world()
    policy = ProvenancePolicy(ceiling=Tier.REVERSIBLE)
    caller = steps(INBOX, ("archive", Folder(folder="x")), ("fetch", Url(url="https://home.example")))
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(provenance=policy))
    assert sorted(ran(tools)) == ["archive", "read_inbox"]
    assert [p.tool_name for p in result.proposed] == ["fetch"]


def test_the_policy_refuses_values_of_the_wrong_type() -> None:
    """A ceiling that is not a Tier, an egress rung that is not one, or a tiny min_match is a UsageError."""
    with pytest.raises(UsageError, match="ceiling must be a Tier"):
        ProvenancePolicy(ceiling=1)  # type: ignore[arg-type]  # the wrong type, on purpose
    with pytest.raises(UsageError, match="egress must be"):
        ProvenancePolicy(egress=False)  # type: ignore[arg-type]  # the wrong type, on purpose
    with pytest.raises(UsageError, match="min_match"):
        ProvenancePolicy(min_match=2)
    with pytest.raises(UsageError, match=r"LoopConfig\.provenance"):
        LoopConfig(provenance="off")  # type: ignore[arg-type]  # the wrong type, on purpose


def test_tool_declares_trust_and_egress_next_to_its_tier() -> None:
    """`@tool(trust=..., egress=...)` sets them on the tool; a wrong value is refused."""

    @tool(tier=Tier.READ_ONLY, trust=Trust.UNTRUSTED, egress=True)
    def get_page(args: Url) -> list[Doc]:
        """Fetch a page."""
        return []

    assert (get_page.trust, get_page.egress) == (Trust.UNTRUSTED, True)
    with pytest.raises(UsageError, match="needs a Trust"):
        tool(tier=Tier.READ_ONLY, trust="untrusted")  # type: ignore[arg-type]  # the wrong type, on purpose
    with pytest.raises(UsageError, match="True or False"):
        tool(tier=Tier.READ_ONLY, egress="yes")  # type: ignore[arg-type]  # the wrong type, on purpose


# --- the invariant, whatever the order ---------------------------------------------------------------

NAMES = ["read_inbox", "read_notes", "fetch", "archive", "send_email", "pay"]
ARGS: dict[str, BaseModel] = {
    "read_inbox": Folder(folder="inbox"),
    "read_notes": Folder(folder="notes"),
    "fetch": Url(url=ATTACKER_URL),
    "archive": Folder(folder="inbox"),
    "send_email": Email(to=ATTACKER_MAIL, body="x"),
    "pay": Payment(iban=ATTACKER_IBAN, amount=1),
}


@settings(max_examples=60, deadline=None)
@given(
    order=st.lists(st.sampled_from(NAMES), min_size=1, max_size=7),
    ceiling=st.sampled_from(list(Tier)),
    autonomy=st.sampled_from(list(Tier)),
)
async def test_no_call_above_the_ceiling_and_no_egress_call_runs_live_after_untrusted_content(
    order: list[str], ceiling: Tier, autonomy: Tier
) -> None:
    """Whatever the calls' order, ceilings and autonomy: after the first untrusted result, every call that ran
    is at or under the policy's ceiling and sends nothing out, and before it the tiers alone decided."""
    tools = world()
    log: list[tuple[str, bool]] = []
    """Each call that ran, and whether an untrusted tool's call had run before it."""
    seen: list[str] = []

    def tainted_now() -> bool:
        return any(tools[name].trust is Trust.UNTRUSTED for name in seen)

    for t in tools.values():
        t.calls = _Log(log, t.name, tainted_now, seen)
    caller = ScriptedCaller([*(call_step(ARGS[n], tool=n) for n in order), done_step()])
    run_config = LoopConfig(
        retry=NO_WAIT,
        after_proposal=AfterProposal.CONTINUE,
        max_rounds=len(order) + 1,
        autonomy=autonomy,
        provenance=ProvenancePolicy(ceiling=ceiling),
        repeat_exempt=frozenset(NAMES),
    )
    await tiered(caller, Executor[Doc](), list(tools.values()), TASK, run_config)
    for name, was_tainted in log:
        t = tools[name]
        assert t.tier <= autonomy
        assert t.tier <= Tier.REVERSIBLE
        if was_tainted:
            assert t.tier <= ceiling, (name, order)
            assert not t.egress, (name, order)


class _Log(list[BaseModel]):
    """A tool's list of calls that also logs, at each call, whether untrusted content had run before it."""

    def __init__(self, log: list[tuple[str, bool]], name: str, tainted: Callable[[], bool], seen: list[str]) -> None:
        super().__init__()
        self.log, self.name, self.tainted, self.seen = log, name, tainted, seen

    def append(self, call: BaseModel) -> None:
        self.log.append((self.name, self.tainted()))
        self.seen.append(self.name)
        super().append(call)


# --- wrapping a third party's functions (issue 50, goal 5) ---------------------------------------------


def test_tool_takes_the_args_and_item_types_as_arguments() -> None:
    """A function made at run time, without annotations, becomes a tool with `args_type=` and `result_type=`."""

    def third_party(args):  # type: ignore[no-untyped-def]  # a run-time function has no annotations
        return [Doc(id=args.url)]

    made = tool(tier=Tier.READ_ONLY, name="get_page", args_type=Url, result_type=Doc)(third_party)
    assert (made.name, made.args_type, made.result_type) == ("get_page", Url, Doc)
    from agentkit._codec import item_type_of

    assert item_type_of(made) is Doc


def test_tool_refuses_an_args_type_that_disagrees_with_the_annotation() -> None:
    """`args_type=` and the annotation must agree; a non-model args_type is refused."""

    def annotated(args: Folder) -> list[Doc]:
        return []

    with pytest.raises(UsageError, match="annotated"):
        tool(tier=Tier.READ_ONLY, args_type=Url)(annotated)
    with pytest.raises(UsageError, match="pydantic model class"):
        tool(tier=Tier.READ_ONLY, args_type=dict)  # type: ignore[arg-type]  # the wrong type, on purpose


async def test_a_repeat_exempt_tool_may_repeat_a_call() -> None:
    """`LoopConfig(repeat_exempt=...)`: a tool whose legitimate use repeats a read is not stopped as degenerate."""
    tools = world()
    again = ("read_notes", Folder(folder="notes"))
    caller = steps(again, again, again)
    result = await tiered(
        caller, Executor[Doc](), list(tools.values()), TASK, config(repeat_exempt=frozenset({"read_notes"}))
    )
    assert (len(tools["read_notes"].calls), result.stop_reason) == (3, StopReason.EXECUTOR_DONE)
    stopped = await tiered(steps(again, again), Executor[Doc](), list(world().values()), TASK, config())
    assert stopped.stop_reason is StopReason.DEGENERATION


@settings(max_examples=40, deadline=None)
@given(order=st.lists(st.sampled_from(NAMES), min_size=1, max_size=7), ceiling=st.sampled_from(list(Tier)))
async def test_no_call_above_the_ceiling_runs_unapproved_after_untrusted_content_across_resumes(
    order: list[str], ceiling: Tier
) -> None:
    """The same invariant over legs: the run stops at each proposal, a person approves it, and the run resumes
    from its checkpoint. A call that ran after untrusted content above the ceiling, or egress, is one a person
    approved; the taint crosses every resume (it comes back from the state, not from the process)."""
    from collections import Counter

    from agentkit import approve, resume_tool_loop

    tools = world()
    log: list[tuple[str, bool]] = []
    seen: list[str] = []

    def tainted_now() -> bool:
        return any(tools[name].trust is Trust.UNTRUSTED for name in seen)

    for t in tools.values():
        t.calls = _Log(log, t.name, tainted_now, seen)
    steps_left = [call_step(ARGS[n], tool=n) for n in order]
    run_config = LoopConfig(
        retry=NO_WAIT,
        max_rounds=len(order) + 1,
        provenance=ProvenancePolicy(ceiling=ceiling),
        repeat_exempt=frozenset(NAMES),
    )
    caller = ScriptedCaller([*steps_left, done_step()])
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, run_config)
    approved: Counter[str] = Counter()
    while result.stop_reason is StopReason.PROPOSED:
        approvals = [approve(p, approved_by="alice") for p in result.proposed]
        approved.update(p.tool_name for p in result.proposed)
        result = await resume_tool_loop(
            caller, Executor[Doc](), list(tools.values()), TASK, result.checkpoint, approvals
        )
    unapproved = Counter(
        name
        for name, was_tainted in log
        if was_tainted and (tools[name].tier > ceiling or tools[name].egress or tools[name].tier > Tier.REVERSIBLE)
    )
    assert unapproved - approved == Counter(), (order, ceiling)


def test_a_declaration_of_the_wrong_type_fails_closed() -> None:
    """A hand-made tool's `trust` that is not a `Trust` counts as untrusted, an `egress` that is not `False`
    as egress; a tool that declares neither is trusted and sends nothing out (tools written before provenance)."""
    from types import SimpleNamespace

    from agentkit.provenance import declared_egress, declared_trust

    assert declared_trust(SimpleNamespace(trust="trusted")) is Trust.UNTRUSTED
    assert declared_egress(SimpleNamespace(egress=0)) is True
    assert (declared_trust(SimpleNamespace()), declared_egress(SimpleNamespace())) == (Trust.TRUSTED, False)


async def test_a_step_of_several_calls_after_untrusted_content_runs_its_reads_and_holds_the_rest() -> None:
    """Several calls per step: once an earlier step read untrusted content, each call of a later step is
    gated on its own with the run's taint: the plain read runs live, the reversible call is held by the policy
    and the mail (above the ceiling) is proposed, marked as made after untrusted content."""
    tools = world()
    caller = multi(
        (INBOX,),
        (NOTES, ("send_email", Email(to=ATTACKER_MAIL, body="notes")), ("archive", Folder(folder="inbox"))),
    )
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(max_calls_per_step=3))
    assert sorted(ran(tools)) == ["read_inbox", "read_notes"]
    assert sorted(p.tool_name for p in result.proposed) == ["archive", "send_email"]
    held = {p.tool_name: p.evidence.provenance.held for p in result.proposed if p.evidence and p.evidence.provenance}
    assert held == {"archive": True, "send_email": False}  # the mail is above the tiers' ceiling anyway
    [mail] = [p for p in result.proposed if p.tool_name == "send_email"]
    assert mail.evidence is not None
    assert mail.evidence.provenance is not None
    assert mail.evidence.provenance.tainted


async def test_calls_of_the_step_that_first_reads_untrusted_content_are_gated_before_it_is_read() -> None:
    """The calls of one step are made before any of their results is read: the step that first reads untrusted
    content runs its reversible call live (nothing untrusted could have shaped it); the next step's is held."""
    tools = world()
    caller = multi(
        (INBOX, ("archive", Folder(folder="old"))),
        (("archive", Folder(folder="older")),),
    )
    result = await tiered(caller, Executor[Doc](), list(tools.values()), TASK, config(max_calls_per_step=2))
    assert [call.folder for call in ran(tools)["archive"]] == ["old"]
    [proposal] = result.proposed
    assert proposal.tool_name == "archive"
    assert proposal.evidence is not None
    assert proposal.evidence.provenance is not None
    assert proposal.evidence.provenance.held


async def test_a_call_is_not_marked_with_what_a_call_of_its_own_step_read() -> None:
    """A step's calls are chosen before any of their results is read: a live call recorded after its sibling read
    untrusted content is not marked as taking a value from that content, which it could not have seen."""
    tools = world()
    caller = multi(
        (("read_inbox", Folder(folder=ATTACKER_MAIL)), ("read_notes", Folder(folder=ATTACKER_MAIL))),
    )
    result = await tiered(
        caller, Executor[Doc](), list(tools.values()), TASK, config(max_calls_per_step=2, max_parallel_calls=1)
    )
    assert sorted(ran(tools)) == ["read_inbox", "read_notes"]
    marks = {e.tool: e.from_untrusted for e in result.checkpoint.entries if isinstance(e, RoundEntry) and e.tool}
    assert marks == {"read_inbox": (), "read_notes": ()}
