"""The demo: the scripted run end to end, BM25 ranking, the corpus, the tools, the live display."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import math
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentkit._cli import main
from agentkit._config import LoopConfig, RepeatPolicy
from agentkit._demo import cli as demo_cli
from agentkit._demo.agent import (
    CURATOR_CHECK,
    DEMO_CONFIG,
    QUESTIONS,
    RESEARCH_CHECK,
    Curator,
    Researcher,
    delete_tool,
    plan,
    research,
)
from agentkit._demo.cli import LiveRounds, scripted_caller
from agentkit._demo.search import BM25Index, Hit, Passage, SearchArgs, load_corpus, search_tool, terms
from agentkit._outcome import Outcome, StopReason
from agentkit._proposals import call_digest
from agentkit._tiers import Tier
from agentkit.errors import ToolRetry, UsageError
from agentkit.journal import ProposalRecord, ProposalState, open_journal
from agentkit.journal.cli import DEFAULT_DB
from agentkit.prompting import USE_THE_TOOL
from agentkit.providers.local import MODELS
from agentkit.testing import ScriptedCaller, call_step


def answered(passage_id: str, answer: str = "the answer", rationale: str = "found it") -> dict[str, object]:
    """The researcher's done step with its cited answer."""
    return {"rationale": rationale, "decision": {"done": True, "answer": {"passage_id": passage_id, "answer": answer}}}


def passages(*texts: str) -> list[Passage]:
    return [Passage(id=f"p{i}", title="", text=text) for i, text in enumerate(texts, 1)]


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every demo here records into its own default journal, in a fresh working directory."""
    monkeypatch.delenv("AGENTKIT_JOURNAL", raising=False)
    monkeypatch.chdir(tmp_path)


def _pending(db: str) -> list[ProposalRecord]:
    async def read() -> list[ProposalRecord]:
        async with open_journal(db, create=False) as journal:
            return await journal.proposals()

    return asyncio.run(read())


# --- the whole arc: propose, decide, continue ----------------------------------------------------


def test_demo_records_its_proposal_and_prints_the_commands_to_decide_and_continue(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The planning run's proposal is in the default journal, with the approve/reject and --resume commands."""
    assert main(["demo", "--scripted"]) == 0
    out = capsys.readouterr().out
    [proposal] = _pending(DEFAULT_DB)
    assert proposal.state is ProposalState.PENDING
    assert proposal.tool_name == "delete_passage"
    assert f"agentkit proposals approve {proposal.id} --by NAME\n" in out
    assert f"agentkit proposals reject {proposal.id} --by NAME --reason TEXT\n" in out
    assert "agentkit demo --scripted --resume\n" in out  # continues this run as it was made: on the script


def test_demo_with_db_names_it_in_every_command_it_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--db PATH`` records there, and the printed commands carry ``--db PATH``."""
    db = str(tmp_path / "elsewhere.db")
    assert main(["demo", "--scripted", "--db", db]) == 0
    out = capsys.readouterr().out
    [proposal] = _pending(db)
    assert f"agentkit proposals approve {proposal.id} --by NAME --db {db}\n" in out
    assert f"agentkit demo --scripted --resume --db {db}\n" in out
    assert not (tmp_path / DEFAULT_DB).exists()


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        (
            ["--base-url", "http://127.0.0.1:9/v1", "--model", "qwen 7b"],
            "agentkit demo --base-url http://127.0.0.1:9/v1 --model 'qwen 7b' --resume",
        ),
        (["--model", "1.5b"], "agentkit demo --model 1.5b --resume"),
        (["--model", "0.5b"], "agentkit demo --resume"),
        ([], "agentkit demo --resume"),
    ],
)
def test_the_continue_command_names_the_model_the_run_was_made_on(argv: list[str], printed: str) -> None:
    """The printed ``--resume`` command repeats the flags that chose the model, so it continues this run on it."""
    from agentkit._cli import build_parser
    from agentkit._demo.cli import _mode_flags  # pyright: ignore[reportPrivateUsage]  # the flags, not a run

    args = build_parser().parse_args(["demo", *argv])
    assert f"agentkit demo{_mode_flags(args)} --resume" == printed


def test_approved_delete_runs_once_on_resume_and_the_executor_finishes(capsys: pytest.CaptureFixture[str]) -> None:
    """Approve with the CLI, ``--resume``: the delete runs once, the model is done; a second resume has nothing."""
    assert main(["demo", "--scripted"]) == 0
    [proposal] = _pending(DEFAULT_DB)
    assert main(["proposals", "approve", proposal.id, "--by", "ana"]) == 0
    capsys.readouterr()
    assert main(["demo", "--resume", "--scripted"]) == 0
    out = capsys.readouterr().out
    assert f"its proposal {proposal.id} is approved by ana" in out
    assert "outcome  APPLIED (executor_done) after 3 rounds" in out
    assert "  decided  round 2: approved by ana; the call ran once -> deleted space-04\n" in out
    [executed] = _pending(DEFAULT_DB)
    assert executed.state is ProposalState.EXECUTED
    assert main(["demo", "--resume", "--scripted"]) == 2
    assert "no planning run waits to be continued" in capsys.readouterr().err


def test_rejected_delete_never_runs_and_the_executor_sees_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """Reject with a reason, ``--resume``: nothing is deleted and the run ends done; the proposal stays rejected."""
    assert main(["demo", "--scripted"]) == 0
    [proposal] = _pending(DEFAULT_DB)
    assert main(["proposals", "reject", proposal.id, "--by", "ana", "--reason", "keep the archive"]) == 0
    capsys.readouterr()
    assert main(["demo", "--resume", "--scripted"]) == 0
    out = capsys.readouterr().out
    assert f"its proposal {proposal.id} is rejected by ana" in out
    assert "  decided  round 2: rejected by ana; the model is told: keep the archive\n" in out
    assert "outcome  APPLIED (executor_done)" in out
    assert "deleted" not in out
    [rejected] = _pending(DEFAULT_DB)
    assert rejected.state is ProposalState.REJECTED


def test_resume_before_the_decision_says_the_run_waits_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """``--resume`` with the proposal still pending exits 2, names the run and leaves the proposal pending."""
    assert main(["demo", "--scripted"]) == 0
    capsys.readouterr()
    assert main(["demo", "--resume", "--scripted"]) == 2
    assert "still waits for a decision" in capsys.readouterr().err
    [proposal] = _pending(DEFAULT_DB)
    assert proposal.state is ProposalState.PENDING


def test_resume_with_no_journal_run_says_run_the_demo_first(capsys: pytest.CaptureFixture[str]) -> None:
    """``--resume`` on an empty journal exits 2 and says to run ``agentkit demo`` first."""

    async def create() -> None:
        async with open_journal(DEFAULT_DB):
            pass

    asyncio.run(create())
    assert main(["demo", "--resume", "--scripted"]) == 2
    assert "run `agentkit demo` first" in capsys.readouterr().err


@pytest.mark.parametrize("db", [None, "MISSING"])
def test_resume_refuses_a_journal_that_does_not_exist_and_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str | None
) -> None:
    """``--resume --db MISSING`` (or the default journal, not there yet): exit 2 naming the path and the command to
    run first; no file is created (it used to create an empty journal and find nothing in it)."""
    flag = [] if db is None else ["--db", db]
    assert main(["demo", "--resume", "--scripted", *flag]) == 2
    err = capsys.readouterr().err
    assert f"nothing to resume: no journal at {db or DEFAULT_DB}" in err
    assert f"run `agentkit demo --scripted{'' if db is None else ' --db MISSING'}` first" in err
    assert "from code" not in err
    assert len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_resume_refuses_questions(capsys: pytest.CaptureFixture[str]) -> None:
    """``--resume --question`` is refused by the argument parser: a resumed planning run asks none."""
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--resume", "--question", "Why?"])
    assert exit_.value.code == 2
    assert "--resume continues the planning run" in capsys.readouterr().err


# --- the scripted demo, end to end ---------------------------------------------------------------


def test_scripted_demo_answers_each_question_from_a_retrieved_passage(capsys: pytest.CaptureFixture[str]) -> None:
    """``agentkit demo --scripted`` runs every question to APPLIED and answers from the cited passage."""
    assert main(["demo", "--scripted"]) == 0
    out = capsys.readouterr().out
    for question in QUESTIONS:
        assert question in out
    assert out.count("outcome  APPLIED (executor_done) after 2 rounds") == len(QUESTIONS)
    corpus = {p.id: p for p in load_corpus()}
    cited = re.findall(r"  answer   (.+)\n  cites    \[([a-z]+-\d+)\] [^:]+: (.+)\n", out)
    assert [passage_id for _, passage_id, _ in cited] == ["space-01", "chem-01", "comp-01"]
    for text, passage_id, shown in cited:
        assert text.rstrip(".") in corpus[passage_id].text
        assert shown == corpus[passage_id].text  # the cited passage, in full


def test_scripted_demo_shows_each_round_with_query_hits_and_latency(capsys: pytest.CaptureFixture[str]) -> None:
    """Each round line names the round, the call, the model latency and the hits with scores."""
    main(["demo", "--scripted"])
    out = capsys.readouterr().out
    call = r'round 1/4  search_corpus \{"query": "voyager 1 space probe launched"\}'
    assert re.search(call + r"  \[\d+\.\d\d s\]  -> space-01 \(\d+\.\d\d\), space-02", out)
    assert re.search(r"round 2/4  done  \[\d+\.\d\d s\]", out)
    assert "Passage space-01 states the answer" not in out  # rationales only with --verbose


def test_verbose_demo_shows_each_rationale(capsys: pytest.CaptureFixture[str]) -> None:
    """With ``--verbose`` the done line carries the executor's rationale, and the summary lists every round's."""
    main(["demo", "--scripted", "--verbose"])
    out = capsys.readouterr().out
    assert re.search(r'round 2/4  done: "Passage space-01 states the answer\."  \[\d+\.\d\d s\]', out)
    assert "  why      round 1: No results yet, so I must search." in out


def test_scripted_demo_shows_the_proposed_delete_with_tier_args_and_digest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The planning example runs the search live and shows the delete as a proposal with its digest."""
    main(["demo", "--scripted"])
    out = capsys.readouterr().out
    planning = out[out.index("Planning with tiers") :]
    assert "round 1/4  search_corpus" in planning
    assert "-> space-04" in planning
    assert "-> proposed (Tier.IRREVERSIBLE), not run" in planning
    assert "outcome  APPLIED (proposed)" in planning
    args = {"passage_id": "space-04", "reason": "calls Pluto a planet; wrong since 2006"}
    tool = delete_tool(BM25Index(load_corpus()))
    digest = call_digest("delete_passage", tool.args_type.model_validate(args))
    assert "proposal tool=delete_passage tier=IRREVERSIBLE" in planning
    assert f"digest={digest}" in planning


def test_scripted_demo_searches_your_own_question_but_does_not_pretend_to_answer_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--question`` replaces the built-in questions; scripted, it is really searched, but no hit is
    presented as the answer: the script says it answers only the built-in questions."""
    assert main(["demo", "--scripted", "--question", "How deep is Lake Baikal?"]) == 0
    out = capsys.readouterr().out
    assert "[1/1] How deep is Lake Baikal?" in out
    assert "outcome  APPLIED (executor_done) after 2 rounds" in out
    assert "items    geo-03 Lake Baikal" in out
    assert "answer   (none: the scripted model answers only the built-in questions)" in out
    assert "  cites " not in out
    assert QUESTIONS[0] not in out


@pytest.mark.parametrize("question", ["", "   "])
def test_blank_question_is_refused_by_the_argument_parser(question: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty or blank ``--question`` is a usage error with a clear message, not a traceback."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--scripted", "--question", question])
    assert exited.value.code == 2
    assert "argument --question: a question must not be empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scripted", "--model", "m"], "--scripted uses no model"),
        (["--scripted", "--api-key", "k"], "--scripted uses no model"),
        (["--model", "m"], "without --base-url, --model picks the embedded model: 0.5b or 1.5b; got 'm'"),
        (["--api-key", "k"], "--api-key is for a server on --base-url"),
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
    ],
)
def test_model_flags_that_would_be_ignored_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server flag that the chosen mode would ignore (or one missing its partner) is refused."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("size", "extra"), [("0.5b", "local"), ("1.5b", "local-1.5b")])
def test_embedded_demo_without_its_extra_says_so_in_one_line_and_writes_nothing(
    size: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentkit demo --model 1.5b`` without its extra: exit 2 with one short line naming the extra and its
    install command, before saying it starts the model and before creating the journal (it used to print
    "Starting it", fail on a 1,900-character line and leave an empty journal file)."""
    # Chunk packages installed nowhere, so the check fails the same whether or not this machine has the extra.
    missing = {
        name: dataclasses.replace(
            model, chunks=tuple(dataclasses.replace(c, distribution=f"absent-{c.distribution}") for c in model.chunks)
        )
        for name, model in MODELS.items()
    }
    monkeypatch.setattr(demo_cli, "MODELS", missing)
    monkeypatch.setenv("AGENTKIT_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["demo", "--model", size]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("agentkit demo: ")
    assert len(line) < 250, line
    assert f"install the '{extra}' extra: pip install 'agentkit[{extra}]'" in line
    assert f"(from a checkout: pip install -e '.[{extra}]')" in line
    assert list(tmp_path.iterdir()) == []


def test_unreachable_server_stops_the_demo_after_the_first_run(capsys: pytest.CaptureFixture[str]) -> None:
    """A ``--base-url`` nobody listens on ends the demo after the first question, with the error once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["demo", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m"]) == 1
    out = capsys.readouterr().out
    assert "[1/3]" in out
    assert "[2/3]" not in out
    assert "Planning with tiers" not in out
    assert out.count("could not reach the model server") == 1
    assert "stopped  the model server did not answer" in out


def test_scripted_demo_with_nothing_found_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A question no passage matches ends SILENT and the demo says there is no answer."""
    assert main(["demo", "--scripted", "--question", "zzyzx qwertyuiop?"]) == 0
    out = capsys.readouterr().out
    assert "outcome  SILENT (round_ceiling) after 4 rounds" in out  # nothing to cite: no answer could be given
    assert "answer   (none: nothing was retrieved)" in out


def test_python_dash_m_runs_the_demo() -> None:
    """``python -m agentkit demo --scripted`` works as the console script does."""
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "demo", "--scripted"], capture_output=True, text=True, check=True
    )
    assert "proposal tool=delete_passage" in done.stdout


def test_scripted_and_base_url_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    """The model comes from one place: ``--scripted`` and ``--base-url`` cannot be combined."""
    with pytest.raises(SystemExit):
        main(["demo", "--scripted", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    assert "not allowed with argument" in capsys.readouterr().err


# --- BM25 -----------------------------------------------------------------------------------------


def test_rare_query_term_outweighs_a_common_one() -> None:
    """A passage matching a rare query term ranks above one matching only a common term."""
    index = BM25Index(passages("the river delta", "the river bank", "the river mouth", "volcano island"))
    assert [h.id for h in index.search("river volcano")][:1] == ["p4"]


def test_shorter_passage_ranks_first_at_equal_term_frequency() -> None:
    """Length normalisation: the same single match scores higher in a shorter passage."""
    index = BM25Index(passages("comet tail", "comet seen over the long cold northern winter sky at dawn", "lake"))
    hits = index.search("comet")
    assert [h.id for h in hits] == ["p1", "p2"]
    assert hits[0].score > hits[1].score


def test_repeated_term_raises_score_with_saturation() -> None:
    """More occurrences score higher, but each extra occurrence adds less (k1 saturation)."""
    index = BM25Index(passages("moon", "moon moon", "moon moon moon", "sun", "star"), b=0.0)
    one, two, three = (index.score("moon", i) for i in range(3))
    assert one < two < three
    assert three - two < two - one


def test_score_matches_the_bm25_formula() -> None:
    """The score is idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)), summed over terms."""
    index = BM25Index(passages("red apple", "green apple pie", "blue sky"), k1=1.2, b=0.75)
    n, df, tf, length, average = 3, 2, 1, 3, (2 + 3 + 2) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = idf * tf * (1.2 + 1) / (tf + 1.2 * (1 - 0.75 + 0.75 * length / average))
    assert index.score("apple", 1) == pytest.approx(expected)


def test_search_returns_at_most_k_positive_hits_best_first() -> None:
    """Only passages sharing a term are returned, best first, at most ``k``."""
    index = BM25Index(passages("cat", "cat dog", "cat dog bird", "fish"))
    hits = index.search("cat dog bird", k=2)
    assert [h.id for h in hits] == ["p3", "p2"]
    assert index.search("elephant") == []


def test_inflected_forms_and_stop_words() -> None:
    """Light stemming meets "launched" with "launch"; stop words never match."""
    assert terms("When was it launched") == ["launch"]
    index = BM25Index(passages("the launch of the probe", "the the the"))
    assert [h.id for h in index.search("launched")] == ["p1"]
    assert index.search("the") == []


def test_duplicate_passage_ids_are_refused() -> None:
    """Two passages with one id is a wiring mistake."""
    with pytest.raises(UsageError, match="repeated: \\['x'\\]"):
        BM25Index([Passage(id="x", title="", text="a"), Passage(id="x", title="", text="b")])


def test_removed_passage_is_no_longer_found() -> None:
    """Removing a passage re-indexes the rest."""
    index = BM25Index(passages("alpha beta", "beta gamma"))
    index.remove("p1")
    assert [h.id for h in index.search("alpha beta")] == ["p2"]
    with pytest.raises(KeyError):
        index.remove("p1")


# --- the bundled corpus and the tools ---------------------------------------------------------------


def test_corpus_ids_are_unique_and_passages_are_short() -> None:
    """The bundled corpus has a few dozen passages with unique ids and short texts."""
    corpus = load_corpus()
    ids = [p.id for p in corpus]
    assert len(ids) == len(set(ids))
    assert 24 <= len(corpus) <= 60
    assert all(p.title and 40 <= len(p.text) <= 300 for p in corpus)


@pytest.mark.parametrize(
    ("question", "passage_id"),
    [(QUESTIONS[0], "space-01"), (QUESTIONS[1], "chem-01"), (QUESTIONS[2], "comp-01")],
)
def test_each_demo_question_finds_its_passage_first(question: str, passage_id: str) -> None:
    """The built-in questions, asked as they are, rank the passage holding the answer first."""
    assert BM25Index(load_corpus()).search(question)[0].id == passage_id


async def test_search_tool_is_read_only_and_returns_hits() -> None:
    """``search_corpus`` is a read-only tool returning scored hits."""
    tool = search_tool(BM25Index(load_corpus()), k=2)
    assert tool.name == "search_corpus"
    assert tool.tier is Tier.READ_ONLY
    hits = await tool.call(SearchArgs(query="deepest lake"))
    assert [h.id for h in hits][:1] == ["geo-03"]
    assert len(hits) == 2
    assert all(isinstance(h, Hit) for h in hits)


async def test_query_without_content_words_goes_back_to_the_model() -> None:
    """A query of stop words only is a ``ToolRetry``: the model is told to use keywords."""
    tool = search_tool(BM25Index(load_corpus()))
    with pytest.raises(ToolRetry, match="no searchable words"):
        await tool.call(SearchArgs(query="what is the"))


async def test_delete_tool_is_irreversible_and_names_only_known_passages() -> None:
    """``delete_passage`` is irreversible, its id is an enum of the corpus, and run by its owner it deletes."""
    index = BM25Index(load_corpus())
    tool = delete_tool(index)
    assert tool.tier is Tier.IRREVERSIBLE
    with pytest.raises(ValidationError):
        tool.args_type.model_validate({"passage_id": "ex-3", "reason": "made up"})
    args = tool.args_type.model_validate({"passage_id": "space-04", "reason": "outdated"})
    assert await tool.call(args) == ["deleted space-04"]
    assert index.get("space-04") is None


async def test_the_researcher_cites_only_a_passage_it_retrieved_and_searches_before_it_answers() -> None:
    """The demo's recipe: a done step before any search is refused, and so is an answer citing a passage the
    run never retrieved; each is asked again, and the answer that comes back cites a retrieved passage."""
    index = BM25Index(load_corpus())
    caller = ScriptedCaller(
        [
            answered("geo-03", "from memory"),  # refused: no search ran yet
            call_step(SearchArgs(query="deepest lake")),
            answered("space-01", "made up"),  # refused: space-01 was not retrieved
            answered("geo-03", "Lake Baikal is the deepest lake."),
        ]
    )
    result = await research(caller, "m", index, "Which lake is deepest?")
    assert result.answer is not None
    assert (result.answer.passage_id, result.stop_reason) == ("geo-03", StopReason.EXECUTOR_DONE)
    assert [hit.id for hit in result.cited()] == ["geo-03"]
    assert caller.remaining == 0


def test_the_demo_config_is_the_retrieval_recipe() -> None:
    assert (DEMO_CONFIG.min_calls, DEMO_CONFIG.on_repeat) == (1, RepeatPolicy.REFUSE)


# --- prompts and the live display -------------------------------------------------------------------


async def test_researcher_prompt_is_written_for_small_models() -> None:
    """The rules forbid answering from memory, a worked example shows the step, and the system part
    stays byte-identical across rounds while the results go in the dynamic part."""
    caller = ScriptedCaller([call_step(SearchArgs(query="deepest lake")), answered("geo-03")])
    result = await research(caller, "m", BM25Index(load_corpus()), "Which lake is deepest?")
    first, second = caller.requests
    assert "do not answer from memory" in first.system
    assert '"call": {"query": "Golden Gate Bridge length"}' in first.system
    assert first.system == second.system
    assert "[geo-03] Lake Baikal" in second.dynamic
    assert "[geo-03]" not in first.dynamic
    assert (first.temperature, first.seed) == (0.0, 7)
    assert result.outcome is Outcome.APPLIED
    assert DEMO_CONFIG.rationale_max_length is not None


async def test_researcher_renders_the_library_reflective_prompt() -> None:
    """The researcher's prompt is ``reflective_prompt``: ``USE_THE_TOOL``, the tool and a worked
    example laid out as the real rounds in the system part; a round with results ends with what to check."""
    caller = ScriptedCaller([call_step(SearchArgs(query="deepest lake")), answered("geo-03")])
    await research(caller, "m", BM25Index(load_corpus()), "Which lake is deepest?")
    first, second = caller.requests
    assert USE_THE_TOOL in first.system
    assert "- search_corpus: Search the passages by keywords" in first.system
    assert '1. Round 1: search_corpus {"query":"Golden Gate Bridge length"}' in first.system
    assert "   - [ex-7] Golden Gate Bridge: " in first.system
    assert '1. Round 1: search_corpus {"query":"deepest lake"}' in second.dynamic
    assert "   - [geo-03] Lake Baikal: " in second.dynamic
    assert second.dynamic.endswith(RESEARCH_CHECK)
    assert first.dynamic.endswith("Reply with your first step.")


async def test_curator_renders_the_library_reflective_prompt_with_a_search_then_delete_example() -> None:
    """The curator's prompt is ``reflective_prompt`` with both tools and an example whose second
    round proposes the delete the search found; its rounds with results end with what to check."""
    caller = scripted_caller(BM25Index(load_corpus()), [])
    result = await plan(caller, "m", BM25Index(load_corpus()))
    first, second = caller.requests
    assert first.system == second.system
    assert USE_THE_TOOL in first.system
    assert "- delete_passage: Permanently delete one passage" in first.system
    assert '"call": {"tool": "delete_passage", "args": {"passage_id": "k-42"' in first.system
    assert second.dynamic.endswith(CURATOR_CHECK)
    assert result.stop_reason is StopReason.PROPOSED


def test_final_round_prompt_tells_the_model_to_stop() -> None:
    """On the last round the prompt says to stop now."""
    from agentkit._agent import ToolRoundInfo

    info: ToolRoundInfo[Hit] = ToolRoundInfo(round=4, max_rounds=4, is_final_round=True)
    assert "final round: commit now" in Researcher(model="m").render("q", info).dynamic
    assert "final round: commit now" in Curator(model="m").render("q", info).dynamic


async def test_live_display_prints_a_status_line_then_replaces_it_on_a_terminal() -> None:
    """On a terminal a round first shows as a status line, then the finished line replaces it."""
    out = io.StringIO()
    caller = ScriptedCaller([call_step(SearchArgs(query="deepest lake")), answered("geo-03")])
    result = await research(caller, "m", BM25Index(load_corpus()), "q", observer=LiveRounds(out, live=True))
    text = out.getvalue()
    assert "\r  round 1/4  asking the model ..." in text
    assert "\r\x1b[2K  round 1/4  search_corpus" in text
    assert text.count("\n") == 2
    assert result.stop_reason is StopReason.EXECUTOR_DONE


async def test_live_display_reports_a_repeat_and_a_tool_retry() -> None:
    """A repeated call and a ``ToolRetry`` show as such on their round's line."""
    out = io.StringIO()
    index = BM25Index(load_corpus())
    caller = ScriptedCaller(
        [
            call_step(SearchArgs(query="what is the")),
            call_step(SearchArgs(query="deepest lake")),
            call_step(SearchArgs(query="deepest lake")),
        ]
    )
    stop = LoopConfig(max_rounds=4, on_repeat=RepeatPolicy.STOP, closing_round=False)
    result = await research(caller, "m", index, "q", observer=LiveRounds(out, live=False), config=stop)
    lines = out.getvalue().splitlines()
    assert "-> told: the query 'what is the' has no searchable words" in lines[0]
    assert "-> geo-03" in lines[1]
    assert "-> a repeat of a recent call: stalemate" in lines[2]
    assert result.outcome is Outcome.STALEMATE


async def test_live_display_reports_a_refused_repeat_under_the_recipe() -> None:
    """Under the demo's recipe a repeated search is refused and the model told; the line says so."""
    out = io.StringIO()
    caller = ScriptedCaller(
        [call_step(SearchArgs(query="deepest lake")), call_step(SearchArgs(query="deepest lake")), answered("geo-03")]
    )
    result = await research(caller, "m", BM25Index(load_corpus()), "q", observer=LiveRounds(out, live=False))
    assert "-> a repeat of a recent call: refused, not run (the model is told)" in out.getvalue().splitlines()[1]
    assert result.stop_reason is StopReason.EXECUTOR_DONE


def test_scripted_caller_answers_only_the_built_in_questions() -> None:
    """The script searches any question's keywords, but writes an answer (and its judgement) only for a built-in one."""
    index = BM25Index(load_corpus())
    # search, done with the answer, the judge's verdict; search, delete
    assert scripted_caller(index, [QUESTIONS[0]]).remaining == 3 + 2
    assert scripted_caller(index, ["How deep is Lake Baikal?"]).remaining == 2 + 2  # search, done


def test_step_schema_the_model_sees_requires_the_rationale_first() -> None:
    """The step's JSON schema requires every field, rationale first: constrained decoding would
    otherwise let a small model skip its reasoning (measured: it then stops without searching)."""
    from agentkit._step import build_step_model

    schema = build_step_model(SearchArgs, rationale_max_length=DEMO_CONFIG.rationale_max_length).model_json_schema()
    assert schema["required"] == ["rationale", "decision"]
    assert list(schema["properties"]) == ["rationale", "decision"]
    assert schema["properties"]["rationale"]["maxLength"] == DEMO_CONFIG.rationale_max_length


class _GoneReader(io.StringIO):
    """A stdout whose reader has left: every write raises, as a closed pipe's does."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


async def test_live_display_stops_writing_once_the_reader_has_gone() -> None:
    """``agentkit demo | head -3``: the first write to the closed pipe makes the display stop writing (no observer
    failure and traceback per round); the demo's own next line then ends the command quietly."""
    out = _GoneReader()
    display = LiveRounds(out, live=False)
    caller = ScriptedCaller([call_step(SearchArgs(query="deepest lake")), answered("geo-03")])
    result = await research(caller, "m", BM25Index(load_corpus()), "q", observer=display)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert (display.closed, out.writes) == (True, 1)


def test_demo_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """The reader is gone before the first line: exit 141, and no traceback on stderr."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "demo", "--scripted", "--db", str(tmp_path / "j.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert demo.stdout is not None
    demo.stdout.close()
    _, err = demo.communicate(timeout=60)
    assert b"Traceback" not in err
    assert demo.returncode == 141
