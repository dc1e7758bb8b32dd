"""``ReplayCaller``: a recorded run played back offline, request by request, its tools played back too; a request
that is not the recorded one raises ``ReplayDiverged`` naming the round and what differs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit import (
    AfterProposal,
    LoopConfig,
    Prompt,
    RoleSpec,
    RunCheckpoint,
    StopReason,
    Tier,
    ToolRetry,
    ToolRoundInfo,
    approve,
    resume_tool_loop,
    run_tool_loop_tiered,
    tool,
    tool_set,
)
from agentkit._state import RoundEntry, RoundOutcome
from agentkit.errors import ReplayDiverged, Throttled, UsageError
from agentkit.journal import JournalObserver, SQLiteJournal
from agentkit.prompting import ImagePart
from agentkit.testing import ReplayCaller, ScriptedCaller, call_step, done_step
from tests.media_support import OTHER_PNG, PNG
from tests.support import Doc, Query, Target

ran: list[str] = []
"""Every real tool call, in order: a replay must add none."""


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Search the corpus."""
    ran.append(f"search {args.query}")
    if args.query == "?":
        raise ToolRetry("ask for something")
    return [Doc(id=f"doc:{args.query}"), Doc(id=f"more:{args.query}")]


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: Target) -> list[Doc]:
    """Delete a path."""
    ran.append(f"delete {args.path}")
    return [Doc(id=f"deleted:{args.path}")]


TOOLS = tool_set(search, delete)


class Planner:
    def __init__(self, system: str = "plan") -> None:
        self.system = system

    def role(self) -> RoleSpec:
        return RoleSpec(model="planner")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        seen = [d.id for batch in info.prior_results for d in batch]
        return Prompt(system=self.system, dynamic=f"{ctx} round {info.round}: {seen}")


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def searches(*texts: str) -> list[dict[str, Any]]:
    return [call_step(Query(query=t), tool=search) for t in texts]


async def recorded(steps: list[Any], config: LoopConfig | None = None) -> Any:
    result = await run_tool_loop_tiered(ScriptedCaller(steps), Planner(), TOOLS, "clean up", config)
    ran.clear()
    return result


STEP = st.one_of(
    st.sampled_from(["a", "b", "c", "?"]).map(lambda t: call_step(Query(query=t), tool=search)),
    st.sampled_from(["/x", "/y"]).map(lambda p: call_step(Target(path=p), tool=delete)),
    st.just(done_step("enough")),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(STEP, min_size=1, max_size=7), after=st.sampled_from(list(AfterProposal)))
async def test_a_replayed_run_reproduces_the_recorded_ending_items_and_proposals(
    script: list[dict[str, Any]], after: AfterProposal
) -> None:
    """For any script: the replay ends as the recording did, with the same items, proposals, rounds and usage,
    and no tool runs again (the stand-ins play the recorded batches back)."""
    config = LoopConfig(max_rounds=8, after_proposal=after)
    first = await recorded([*script, done_step("closing")], config)
    replay = ReplayCaller(first.checkpoint)
    again = await run_tool_loop_tiered(replay, Planner(), replay.tools(TOOLS), "clean up", config)
    assert (again.outcome, again.stop_reason, again.rounds) == (first.outcome, first.stop_reason, first.rounds)
    assert again.items == first.items
    assert [(p.tool_name, p.args, p.digest) for p in again.proposed] == [
        (p.tool_name, p.args, p.digest) for p in first.proposed
    ]
    assert again.usage == first.usage
    assert ran == []
    replay.assert_complete()


async def test_a_changed_prompt_raises_replay_diverged_naming_the_round() -> None:
    """An executor that renders another system text: the first request diverges, naming round 1 and the prompt."""
    first = await recorded([*searches("a"), done_step()])
    replay = ReplayCaller(first.checkpoint)
    with pytest.raises(ReplayDiverged, match="round 1 diverged from the recording: the prompt differs") as diverged:
        await run_tool_loop_tiered(replay, Planner(system="another plan"), replay.tools(TOOLS), "clean up")
    assert (diverged.value.round, ran) == (1, [])


async def test_another_tool_set_diverges_on_the_step_schema() -> None:
    """A tool added since the recording: the step schema differs, and the replay says so."""

    @tool(tier=Tier.READ_ONLY)
    def count(args: Query) -> list[Doc]:
        """Count."""
        return []

    first = await recorded([*searches("a"), done_step()])
    replay = ReplayCaller(first.checkpoint)
    with pytest.raises(ReplayDiverged, match=r"the step schema .* differs from the recorded one"):
        await run_tool_loop_tiered(replay, Planner(), tool_set(*replay.tools(TOOLS), count), "clean up")


async def test_without_strict_a_diverged_run_goes_on_with_the_fallback() -> None:
    """``strict=False``: the request that diverged, and every one after it, go to the fallback caller."""
    first = await recorded([*searches("a", "b"), done_step()])
    fallback = ScriptedCaller([*searches("c"), done_step("fallback")])
    replay = ReplayCaller(first.checkpoint, strict=False, fallback=fallback)
    again = await run_tool_loop_tiered(replay, Planner(system="changed"), TOOLS, "clean up")
    assert again.stop_reason is StopReason.EXECUTOR_DONE
    assert replay.diverged is not None
    assert replay.diverged.round == 1
    assert len(fallback.requests) == 2
    assert ran == ["search c"]


async def test_a_cassette_edited_by_hand_or_of_another_version_is_refused_clearly() -> None:
    """An entry changed by hand: the cassette is refused naming the entry; a version 1 checkpoint names its version."""
    first = await recorded([*searches("a"), done_step()])
    data = json.loads(first.checkpoint.model_dump_json())
    data["entries"][0]["rationale"] = "edited"
    with pytest.raises(ReplayDiverged, match="does not match its digests from entry 0 on"):
        ReplayCaller.from_json(json.dumps(data))
    data["version"] = 1
    with pytest.raises(ReplayDiverged, match="schema version 1"):
        ReplayCaller.from_json(json.dumps(data))


async def test_a_recorded_throttle_replays_as_a_throttle() -> None:
    """A model failure in the recording is raised again, so the replayed run ends as the recorded one did."""
    first = await recorded([*searches("a"), Throttled("slow down")])
    assert first.stop_reason is StopReason.THROTTLED
    replay = ReplayCaller(first.checkpoint)
    again = await run_tool_loop_tiered(replay, Planner(), replay.tools(TOOLS), "clean up")
    assert (again.stop_reason, again.items) == (StopReason.THROTTLED, first.items)


async def test_a_run_and_its_resumed_leg_replay_with_the_approved_call_played_back() -> None:
    """Propose, approve, resume: the replay proposes the same call, and on resume the approved call's stand-in plays
    the recorded batch back (the real tool runs once, in the recording only)."""
    caller = ScriptedCaller([*searches("a"), call_step(Target(path="/x"), tool=delete), done_step("done")])
    first = await run_tool_loop_tiered(caller, Planner(), TOOLS, "clean up")
    second = await resume_tool_loop(
        caller, Planner(), TOOLS, "clean up", first.checkpoint, [approve(first.proposed[0], approved_by="ops")]
    )
    assert ran == ["search a", "delete /x"]
    replay = ReplayCaller(second.checkpoint)
    stand_ins = replay.tools(TOOLS)
    leg = await run_tool_loop_tiered(replay, Planner(), stand_ins, "clean up")
    assert [p.digest for p in leg.proposed] == [p.digest for p in first.proposed]
    decision = [approve(leg.proposed[0], approved_by="ops")]
    end = await resume_tool_loop(replay, Planner(), stand_ins, "clean up", leg.checkpoint, decision)
    assert (end.stop_reason, end.items) == (second.stop_reason, second.items)
    assert ran == ["search a", "delete /x"]


async def test_a_stand_in_called_with_other_args_diverges() -> None:
    """A tool call the recording did not make (other args) raises ``ReplayDiverged`` naming the round."""
    first = await recorded([*searches("a"), done_step()])
    replay = ReplayCaller(first.checkpoint, strict=False, fallback=ScriptedCaller([*searches("b"), done_step()]))
    with pytest.raises(ReplayDiverged, match="round 1: tool 'search' was called with other args"):
        await run_tool_loop_tiered(replay, Planner(system="x"), replay.tools(TOOLS), "clean up")


async def test_replay_from_a_journal_and_from_the_file_it_exports(tmp_path: Path) -> None:
    """A journaled run replays from the journal (``ReplayCaller.from_journal``) and from ``agentkit journal
    export``'s file, with the same ending."""
    from agentkit._cli import main

    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        with JournalObserver(journal) as observer:
            first = await run_tool_loop_tiered(
                ScriptedCaller([*searches("a", "b"), done_step()]), Planner(), TOOLS, "clean up", observer=observer
            )
        replay = await ReplayCaller.from_journal(journal, first.run_id)
        again = await run_tool_loop_tiered(replay, Planner(), replay.tools(TOOLS), "clean up")
        assert (again.stop_reason, again.items) == (first.stop_reason, first.items)
    finally:
        await journal.close()
    cassette = tmp_path / "run.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exported = await asyncio.to_thread(
            main, ["journal", "export", first.run_id, "--db", str(tmp_path / "journal.db")]
        )
    assert exported == 0
    cassette.write_text(out.getvalue())
    assert RunCheckpoint.model_validate_json(cassette.read_text()) == first.checkpoint
    from_file = ReplayCaller.from_file(cassette)
    again = await run_tool_loop_tiered(from_file, Planner(), from_file.tools(TOOLS), "clean up")
    assert again.items == first.items


@tool(tier=Tier.IRREVERSIBLE, name="search")
def search_now_irreversible(args: Query) -> list[Doc]:
    """Search the corpus (re-tiered since the recording)."""
    ran.append(f"search {args.query}")
    return []


@tool(tier=Tier.READ_ONLY, name="delete")
def delete_now_read_only(args: Target) -> list[Doc]:
    """Delete a path (re-tiered since the recording)."""
    ran.append(f"delete {args.path}")
    return []


@tool(tier=Tier.REVERSIBLE)
def archive(args: Target) -> list[Doc]:
    """Archive a path (runs live only under autonomy REVERSIBLE or above)."""
    ran.append(f"archive {args.path}")
    return [Doc(id=f"archived:{args.path}")]


ARCHIVING = tool_set(search, archive)


async def test_a_call_whose_tool_was_re_tiered_diverges_at_its_round_naming_both_tiers() -> None:
    """A search that ran live, replayed after search became IRREVERSIBLE: the replay diverges at round 1 naming
    the tool, its recorded and its new tier (it no longer ends PROPOSED without a word); and the reverse, a delete
    that was proposed, replayed at READ_ONLY, diverges the same way."""
    first = await recorded([*searches("a"), done_step()])
    replay = ReplayCaller(first.checkpoint)
    tools = replay.tools(tool_set(search_now_irreversible, delete))
    with pytest.raises(
        ReplayDiverged,
        match=r"round 1 diverged from the recording: tool 'search' is Tier.IRREVERSIBLE now, Tier.READ_ONLY when "
        r"recorded\. The recording ran the call; under its autonomy \(Tier.REVERSIBLE\) the run now does not run it",
    ) as diverged:
        await run_tool_loop_tiered(replay, Planner(), tools, "clean up")
    assert (diverged.value.round, ran) == (1, [])

    proposed = await recorded([*searches("a"), call_step(Target(path="/x"), tool=delete)])
    assert proposed.stop_reason is StopReason.PROPOSED
    replay = ReplayCaller(proposed.checkpoint)
    tools = replay.tools(tool_set(search, delete_now_read_only))
    with pytest.raises(ReplayDiverged, match=r"round 2 .*'delete' is Tier.READ_ONLY now, Tier.IRREVERSIBLE when"):
        await run_tool_loop_tiered(replay, Planner(), tools, "clean up")
    assert ran == []


async def test_a_call_the_run_gates_under_another_autonomy_diverges_naming_its_round() -> None:
    """A call that ran under the recorded autonomy and is proposed under the replay's: the next request diverges
    naming that round, the tool and its tier (not the prompt of the round after); a call the recording proposed
    that the run now runs diverges when it runs, naming its round."""
    after = AfterProposal.CONTINUE
    ran_live = await run_tool_loop_tiered(
        ScriptedCaller([call_step(Target(path="/x"), tool=archive), done_step()]),
        Planner(),
        ARCHIVING,
        "clean up",
        LoopConfig(after_proposal=after),
    )
    ran.clear()
    replay = ReplayCaller(ran_live.checkpoint)
    gated = LoopConfig(autonomy=Tier.READ_ONLY, after_proposal=after)
    with pytest.raises(
        ReplayDiverged,
        match=r"round 1 diverged from the recording: the recording ran the call of 'archive' \(Tier.REVERSIBLE\); "
        r"the run did not: its tier is the recorded one \(Tier.REVERSIBLE\): another LoopConfig \(autonomy "
        r"Tier.REVERSIBLE when recorded",
    ) as diverged:
        await run_tool_loop_tiered(replay, Planner(), replay.tools(ARCHIVING), "clean up", gated)
    assert diverged.value.round == 1

    live = LoopConfig(autonomy=Tier.READ_ONLY, after_proposal=after)
    proposed = await run_tool_loop_tiered(
        ScriptedCaller([*searches("a"), call_step(Target(path="/x"), tool=archive), done_step()]),
        Planner(),
        ARCHIVING,
        "clean up",
        live,
    )
    assert [p.tool_name for p in proposed.proposed] == ["archive"]
    ran.clear()
    replay = ReplayCaller(proposed.checkpoint)
    with pytest.raises(
        ReplayDiverged,
        match=r"round 2 diverged from the recording: the run runs the call of 'archive' \(Tier.REVERSIBLE now\); the "
        r"recording proposed it \(Tier.REVERSIBLE, under autonomy Tier.READ_ONLY\)",
    ) as diverged:
        await run_tool_loop_tiered(
            replay, Planner(), replay.tools(ARCHIVING), "clean up", LoopConfig(after_proposal=after)
        )
    assert (diverged.value.round, ran) == (2, [])


async def test_assert_complete_says_where_and_why_the_replay_stopped_short() -> None:
    """A run that stopped at a proposal where the recording's call ran: assert_complete names the round, the tool and
    why; a replay of a resumed run's first leg only says to resume it."""
    first = await run_tool_loop_tiered(
        ScriptedCaller([call_step(Target(path="/x"), tool=archive), done_step()]), Planner(), ARCHIVING, "clean up"
    )
    replay = ReplayCaller(first.checkpoint)
    stopped = await run_tool_loop_tiered(
        replay, Planner(), replay.tools(ARCHIVING), "clean up", LoopConfig(autonomy=Tier.READ_ONLY)
    )
    assert stopped.stop_reason is StopReason.PROPOSED
    with pytest.raises(
        AssertionError,
        match=r"1 recorded model call\(s\) never replayed: round 1 diverged from the recording: the recording ran the "
        r"call of 'archive' \(Tier.REVERSIBLE\); the run did not",
    ):
        replay.assert_complete()

    caller = ScriptedCaller([*searches("a"), call_step(Target(path="/x"), tool=delete), done_step("done")])
    leg = await run_tool_loop_tiered(caller, Planner(), TOOLS, "clean up")
    second = await resume_tool_loop(
        caller, Planner(), TOOLS, "clean up", leg.checkpoint, [approve(leg.proposed[0], approved_by="ops")]
    )
    replay = ReplayCaller(second.checkpoint)
    await run_tool_loop_tiered(replay, Planner(), replay.tools(TOOLS), "clean up")
    with pytest.raises(
        AssertionError,
        match=r"the run ended after round 2, where the recording's leg ended too \(proposed\) and went on with round "
        r"3: resume the replayed run",
    ):
        replay.assert_complete()


async def test_strict_false_without_a_fallback_is_refused_when_the_replay_is_made() -> None:
    """``strict=False`` sends diverged requests to the fallback: without one, the replay is refused at once, with
    the fix, from every constructor."""
    first = await recorded([*searches("a"), done_step()])
    with pytest.raises(UsageError, match=r"strict=False\) needs a fallback.*Pass fallback=caller"):
        ReplayCaller(first.checkpoint, strict=False)
    with pytest.raises(UsageError, match="needs a fallback"):
        ReplayCaller.from_json(first.checkpoint.model_dump_json(), strict=False)
    ReplayCaller(first.checkpoint, strict=False, fallback=ScriptedCaller([]))  # with one, it is made


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=st.lists(STEP, min_size=1, max_size=6),
    after=st.sampled_from(list(AfterProposal)),
    tier=st.sampled_from([Tier.REVERSIBLE, Tier.EXTERNAL_REVERSIBLE, Tier.IRREVERSIBLE]),
)
async def test_a_replay_with_search_re_tiered_diverges_at_the_first_round_that_calls_it(
    script: list[dict[str, Any]], after: AfterProposal, tier: Tier
) -> None:
    """For any script and any new tier of search: the replay diverges at the first recorded round whose call of
    search the gate decided, naming both tiers, and runs nothing; a recording with no such round replays as is."""
    config = LoopConfig(max_rounds=8, after_proposal=after)
    first = await recorded([*script, done_step("closing")], config)
    called = [
        e.round
        for e in first.checkpoint.entries
        if isinstance(e, RoundEntry) and e.tool == "search" and e.outcome in (RoundOutcome.RAN, RoundOutcome.RETRIED)
    ]
    retiered = tool(tier=tier, name="search")(search.fn)
    replay = ReplayCaller(first.checkpoint)
    tools = replay.tools(tool_set(retiered, delete))
    if not called:
        again = await run_tool_loop_tiered(replay, Planner(), tools, "clean up", config)
        assert (again.stop_reason, again.items) == (first.stop_reason, first.items)
        return
    with pytest.raises(ReplayDiverged, match=f"tool 'search' is Tier.{tier.name} now, Tier.READ_ONLY when") as diverged:
        await run_tool_loop_tiered(replay, Planner(), tools, "clean up", config)
    assert (diverged.value.round, ran) == (called[0], [])


class Viewer(Planner):
    """`Planner` with an image next to its text: the image the run is asked about."""

    def __init__(self, image: bytes) -> None:
        super().__init__()
        self.image = ImagePart(data=image, media_type="image/png")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system=self.system, parts=(super().render(ctx, info).dynamic, self.image))


async def test_a_run_with_the_same_image_replays_and_a_changed_image_diverges_naming_it() -> None:
    """The journal keeps the prompt's image by digest: the same image replays; another one diverges at round 1,
    the replay naming the part that changed and both digests' starts."""
    first = await run_tool_loop_tiered(ScriptedCaller([*searches("a"), done_step()]), Viewer(PNG), TOOLS, "clean up")
    ran.clear()
    [entry, *_] = [e for e in first.checkpoint.entries if isinstance(e, RoundEntry)]
    assert entry.media == (f"image:image/png:{hashlib.sha256(PNG).hexdigest()}",)
    assert base64.b64encode(PNG).decode() not in first.checkpoint.model_dump_json()
    replay = ReplayCaller(first.checkpoint)
    again = await run_tool_loop_tiered(replay, Viewer(PNG), replay.tools(TOOLS), "clean up")
    assert (again.stop_reason, again.items) == (first.stop_reason, first.items)
    replay = ReplayCaller(first.checkpoint)
    changed = hashlib.sha256(OTHER_PNG).hexdigest()[:12]
    with pytest.raises(
        ReplayDiverged, match=f"images or documents differ .*part 1 is image image/png sha256:{changed}"
    ):
        await run_tool_loop_tiered(replay, Viewer(OTHER_PNG), replay.tools(TOOLS), "clean up")
    assert ran == []


async def test_a_replayed_run_is_tainted_and_gated_as_the_recording_was() -> None:
    """The stand-ins carry the real tools' trust and egress: after the recorded untrusted read, the replay holds
    the reversible call the recording held, with the same provenance, and runs nothing."""
    from agentkit.provenance import Trust
    from tests.provenance_support import Folder, world

    tools = world()
    inbox, archive_tool = tools["read_inbox"], tools["archive"]
    script = [
        call_step(Folder(folder="inbox"), tool="read_inbox"),
        call_step(Folder(folder="inbox"), tool="archive"),
        done_step(),
    ]
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    first = await run_tool_loop_tiered(ScriptedCaller(script), Planner(), [inbox, archive_tool], "tidy", config)
    replay = ReplayCaller(first.checkpoint)
    stand_ins = replay.tools([inbox, archive_tool])
    assert [getattr(t, "trust", None) for t in stand_ins] == [Trust.UNTRUSTED, Trust.TRUSTED]
    inbox.calls.clear()
    again = await run_tool_loop_tiered(replay, Planner(), stand_ins, "tidy", config)
    assert [p.evidence.provenance for p in again.proposed if p.evidence] == [
        p.evidence.provenance for p in first.proposed if p.evidence
    ]
    assert [p.tool_name for p in again.proposed] == ["archive"]
    assert (inbox.calls, archive_tool.calls) == ([], [])
    replay.assert_complete()
