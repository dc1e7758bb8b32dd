"""`agentkit demo`: a retrieval agent on a real model, then a tiered planning example.

By default the model is the embedded one (`agentkit.providers.local.LocalModel`, the `local` extra);
`--base-url`/`--model`/`--api-key` point the same demo at any OpenAI-compatible server, and
`--scripted` replays a script instantly, with no model at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlsplit

from agentkit._agent import ToolRoundInfo
from agentkit._cli import positive_int
from agentkit._demo.agent import (
    PLANNING_TASK,
    QUESTIONS,
    Curator,
    DeleteArgs,
    GroundedAnswer,
    delete_tool,
    plan,
    research,
)
from agentkit._demo.check import AnswerVerifier
from agentkit._demo.search import BM25Index, Hit, Passage, SearchArgs, keywords, load_corpus, search_tool
from agentkit._events import (
    DegenerationDetected,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunFinished,
    ToolCallStarted,
    ToolResultReturned,
)
from agentkit._observe import Observer, ObserverArg
from agentkit._outcome import Outcome
from agentkit._pair import Review
from agentkit._results import ToolLoopResult
from agentkit._state import DecisionEntry
from agentkit._structured import StructuredCaller
from agentkit._tools import FunctionTool
from agentkit.errors import AgentkitError, JournalUnavailable, ProviderError, UsageError
from agentkit.journal import Journal, JournalObserver, ProposalState, RunRecord, RunStatus, open_journal
from agentkit.journal.cli import DEFAULT_DB, db_flag
from agentkit.providers.local import MODELS, ChunkedModel, check_installed
from agentkit.testing import ScriptedCaller, call_step, done_step

__all__ = ["LiveRounds", "register", "resume_demo", "run_demo", "scripted_caller", "scripted_resumer"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `demo` command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run a retrieval agent on a real model, then a tiered planning example",
        description=__doc__,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--scripted", action="store_true", help="replay a script instantly, with no model")
    where.add_argument(
        "--base-url",
        type=_base_url,
        metavar="URL",
        help="an OpenAI-compatible server, http:// or https:// (default: the embedded local model)",
    )
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="the model name on --base-url; without it, the embedded model's size: 0.5b (the default, the "
        "'local' extra) or 1.5b (the 'local-1.5b' extra: more often right, about twice as slow)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the model's rationale for each step, not only its answers"
    )
    parser.add_argument(
        "--api-key", metavar="KEY", help="the API key for --base-url (default: $OPENAI_API_KEY, else 'none')"
    )
    parser.add_argument(
        "--question",
        action="append",
        type=_question,
        metavar="TEXT",
        help="ask this instead of the built-in questions (repeatable)",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, metavar="N", help="CPU threads for the embedded model (default 1)"
    )
    parser.add_argument(
        "--db",
        default=os.environ.get("AGENTKIT_JOURNAL", DEFAULT_DB),
        metavar="PATH",
        help="the journal the demo records its runs and its proposal in: a SQLite path or a postgresql:// URL "
        f"(default: $AGENTKIT_JOURNAL, else {DEFAULT_DB}, the journal `agentkit proposals` opens too)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the planning run once its proposal is decided: an approved delete runs once, and the "
        "model goes on",
    )
    parser.set_defaults(handler=_handle)


def _question(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("a question must not be empty")
    return text.strip()


def _base_url(text: str) -> str:
    """An `argparse` type: checked here, so a typo fails at once rather than as a failed first request."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL with a host, such as http://127.0.0.1:8080/v1; got {text!r}"
        )
    try:
        _ = parts.port  # a port that is not a number in range raises here
    except ValueError:
        raise argparse.ArgumentTypeError(f"the port in {text!r} is not a number from 0 to 65535") from None
    return text.strip()


def _handle(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    if args.scripted and (args.model or args.api_key):
        parser.error("--scripted uses no model: drop --model/--api-key, or drop --scripted to ask a server")
    if args.base_url and not args.model:
        parser.error("--base-url needs --model, the model name that server serves")
    if not args.base_url and args.api_key:
        parser.error("--api-key is for a server on --base-url; the embedded model needs none")
    if not args.base_url and not args.scripted and args.model not in (None, *MODELS):
        parser.error(f"without --base-url, --model picks the embedded model: {' or '.join(MODELS)}; got {args.model!r}")
    if args.resume and args.question:
        parser.error("--resume continues the planning run, which asks no questions: drop --question")
    questions = tuple(args.question) if args.question else QUESTIONS
    try:
        return asyncio.run(_run(args, questions))
    except UsageError as error:
        print(f"agentkit demo: {error}", file=sys.stderr)
        return 2
    except AgentkitError as error:
        # Another process resumed the run first (RunClaimed), or the journal failed: one line, not a traceback.
        print(f"agentkit demo: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # asyncio.run has cancelled the demo by now, and leaving `async with LocalModel` stopped the
        # embedded server; what is left to say fits on one line.
        stopped = "" if args.scripted or args.base_url else " (the model server is stopped)"
        if sys.stdout.isatty():
            print(file=sys.stdout)  # end the live status line
        print(f"agentkit demo: interrupted{stopped}", file=sys.stderr)
        return 130


async def _run(args: argparse.Namespace, questions: Sequence[str]) -> int:
    out = sys.stdout
    db, mode = db_flag(args.db), _mode_flags(args)
    if not args.scripted and not args.base_url:
        # Before anything is said or written: a missing extra is one line, with no "Starting it" before it and
        # no journal file left behind.
        check_installed(MODELS[args.model or "0.5b"])
    try:
        # A resume continues a run some journal holds: it never creates one (a mistyped --db would be an empty
        # journal, and the run to continue silently "not there").
        opened = open_journal(args.db, create=not args.resume)
    except JournalUnavailable as missing:
        if not args.resume:
            raise
        # The error's cause, without its general fix: here the fix is the demo's own first run.
        cause = str(missing).split("; ", 1)[0]
        print(
            f"agentkit demo: nothing to resume: {cause}; run `agentkit demo{mode}{db}` first, then decide its proposal",
            file=sys.stderr,
        )
        return 2
    async with opened as journal:
        if args.resume and await _waiting_run(journal, db, mode) is None:
            return 2
        if args.scripted:
            index = BM25Index(load_corpus())
            print("agentkit demo, scripted (no model): replies are replayed from a script.\n", file=out)
            if args.resume:
                return await resume_demo(scripted_resumer(), "scripted", journal, out=out, db=db, mode=mode)
            caller = scripted_caller(index, questions)
            return await run_demo(
                caller,
                "scripted",
                questions,
                out=out,
                scripted=True,
                journal=journal,
                db=db,
                mode=mode,
                verbose=args.verbose,
            )
        if args.base_url:
            from agentkit.providers.openai import OpenAICaller

            remote = OpenAICaller(base_url=args.base_url, api_key=args.api_key or _env_key())
            print(f"agentkit demo on {args.model} at {args.base_url}\n", file=out)
            if args.resume:
                return await resume_demo(remote, args.model, journal, out=out, db=db, mode=mode)
            return await run_demo(
                remote, args.model, questions, out=out, journal=journal, db=db, mode=mode, verbose=args.verbose
            )
        async with _embedded(args.threads, out, MODELS[args.model or "0.5b"]) as (local_caller, model):
            if args.resume:
                return await resume_demo(local_caller, model, journal, out=out, db=db, mode=mode)
            return await run_demo(
                local_caller, model, questions, out=out, journal=journal, db=db, mode=mode, verbose=args.verbose
            )


def _mode_flags(args: argparse.Namespace) -> str:
    """The flags that choose this demo's model, for the commands it prints: `--resume` must continue the
    run on the same model (a scripted run on the script, a server's run on that server)."""
    if args.scripted:
        return " --scripted"
    if args.base_url:
        return f" --base-url {shlex.quote(args.base_url)} --model {shlex.quote(args.model)}"
    return f" --model {args.model}" if args.model not in (None, "0.5b") else ""


def _env_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "none"


@asynccontextmanager
async def _embedded(threads: int, out: TextIO, chosen: ChunkedModel) -> AsyncIterator[tuple[StructuredCaller, str]]:
    from agentkit.providers.local import LocalModel, default_cache_dir

    local = LocalModel(chosen, threads=threads)
    size_mb = chosen.size / 1e6
    joined = default_cache_dir() / f"{chosen.name}.gguf"
    # A cheap look, not the checksum (LocalModel checks that): the note is for the run that joins.
    first = not joined.is_file() or joined.stat().st_size != chosen.size
    print(
        f"agentkit demo on the embedded model {local.model_name} ({size_mb:.0f} MB, {threads} thread"
        f"{'s' if threads != 1 else ''}).",
        file=out,
    )
    print(
        f"Starting it (this first run joins the model's {len(chosen.chunks)} chunks into {joined}) ..."
        if first
        else "Starting it ...",
        file=out,
        flush=True,
    )
    started = time.perf_counter()
    async with local:
        print(f"Ready in {time.perf_counter() - started:.1f} s at {local.base_url}\n", file=out, flush=True)
        yield local.caller(), local.model_name


async def run_demo(
    caller: StructuredCaller,
    model: str,
    questions: Sequence[str],
    *,
    out: TextIO,
    scripted: bool = False,
    journal: Journal | None = None,
    db: str = "",
    mode: str = "",
    verbose: bool = False,
) -> int:
    """Run the questions, then the planning example, printing each round live.

    A model server that cannot be reached ends the demo at the first run that finds out.

    Args:
        caller: The model seam.
        model: The model name to ask.
        questions: The questions to research.
        out: Where to print.
        scripted: `caller` is `scripted_caller`'s, which writes answers only for the built-in
            questions; the others are searched but not answered.
        journal: Where to record the runs and the planning run's proposal; the demo then prints
            the commands that decide the proposal and continue the run (`resume_demo`).
        db: The `--db` flag those commands need (empty for the default journal).
        mode: The flags that chose this model (`--scripted`, `--base-url ... --model ...`), repeated in
            the command that continues the run.
        verbose: Show the executor's rationales too, not only the answers and what each round did.

    Returns:
        0 when no run ended in error, else 1.
    """
    index = BM25Index(load_corpus())
    recorder = JournalObserver(journal) if journal is not None else None
    live = LiveRounds(out, verbose=verbose)
    display: ObserverArg = live if recorder is None else [live, recorder]
    errors = 0
    rounds = 0
    verdicts: dict[int, bool] = {}
    judged = 0
    started = time.perf_counter()
    for number, question in enumerate(questions, 1):
        print(f"[{number}/{len(questions)}] {question}", file=out, flush=True)
        result = await research(caller, model, index, question, observer=display)
        rounds += result.rounds
        errors += result.outcome is Outcome.ERROR
        _summary(result, out, verbose=verbose)
        if _unreachable(result.error, out):
            return 1
        unscripted = scripted and question not in QUESTIONS
        _answer(result, out, scripted=unscripted)
        if result.answer is not None and not unscripted:
            verifier = AnswerVerifier(caller, model, question, result.items, observer=recorder)
            review = await _verdict(verifier, result.answer, out)
            if review is not None:
                verdicts[number] = review.approved
                judged += review.usage.requests
        print(file=out, flush=True)
    _verdicts(verdicts, out)

    print("Planning with tiers: a read runs live, a delete is only proposed.", file=out)
    print(f"Task: {PLANNING_TASK}", file=out, flush=True)
    planned = await plan(caller, model, index, observer=display)
    rounds += planned.rounds
    errors += planned.outcome is Outcome.ERROR
    _summary(planned, out)
    for proposal in planned.proposed:
        args = json.dumps(proposal.args.model_dump(mode="json"), ensure_ascii=False)
        print(f"  proposal tool={proposal.tool_name} tier={proposal.tier.name} args={args}", file=out)
        print(f"           digest={proposal.digest} (not run: it waits for a human)", file=out)
    if journal is not None and recorder is not None:
        await recorder.wait_flushed()
        await _decide_next(journal, planned.run_id, out, db, mode)
    elapsed = time.perf_counter() - started
    calls = rounds + judged
    print(
        f"\n{rounds} rounds and {judged} judge calls in {elapsed:.1f} s "
        f"({elapsed / max(calls, 1):.2f} s per model call).",
        file=out,
        flush=True,
    )
    return 1 if errors else 0


async def _decide_next(journal: Journal, run_id: str, out: TextIO, db: str, mode: str) -> None:
    """Print the planning run's proposals as the inbox holds them, and the commands that go on."""
    waiting = [p for p in await journal.proposals(state=ProposalState.PENDING) if p.run_id == run_id]
    if not waiting:
        return
    print(f"\n  The run is recorded in the journal at {journal.where} (run {run_id}).", file=out)
    for proposal in waiting:
        print(f"  Decide proposal {proposal.id}:", file=out)
        print(f"    agentkit proposals approve {proposal.id} --by NAME{db}", file=out)
        print(f"    agentkit proposals reject {proposal.id} --by NAME --reason TEXT{db}", file=out)
    print(f"  Then continue the run:\n    agentkit demo{mode} --resume{db}", file=out, flush=True)


async def _waiting_run(journal: Journal, db: str, mode: str = "") -> RunRecord | None:
    """The newest planning run `--resume` can continue; `None` (having said why) when there is none."""
    for record in await journal.runs(limit=200):
        if record.agent != Curator.__name__ or record.status is RunStatus.FINISHED:
            continue
        if record.status is RunStatus.WAITING:
            print(
                f"agentkit demo: the planning run {record.id} still waits for a decision on its proposal; decide it "
                f"(`agentkit proposals list --state pending{db}` shows it), then run "
                f"`agentkit demo{mode} --resume{db}` again",
                file=sys.stderr,
            )
            return None
        if record.status is RunStatus.RUNNING:
            print(f"agentkit demo: the planning run {record.id} is being continued by another process", file=sys.stderr)
            return None
        if record.resumable:
            return record
    print(
        f"agentkit demo: no planning run waits to be continued in the journal at {journal.where}; run "
        f"`agentkit demo{db}` first, then decide its proposal",
        file=sys.stderr,
    )
    return None


async def resume_demo(
    caller: StructuredCaller, model: str, journal: Journal, *, out: TextIO, db: str = "", mode: str = ""
) -> int:
    """Continue the newest planning run in `journal` with its recorded decisions, printing each round.

    An approved delete runs once, before the next round; the model sees its result (or the
    rejection and its reason) and goes on.

    Returns:
        0 when the run went on and ended without error, 1 when it ended in error, 2 when no run was
        ready to continue.
    """
    record = await _waiting_run(journal, db, mode)
    if record is None:
        return 2
    index = BM25Index(load_corpus())
    tools: tuple[FunctionTool[Any, Any], ...] = (search_tool(index), delete_tool(index))
    for proposal in await journal.proposals():
        if proposal.run_id == record.id and proposal.round == record.rounds:
            decided = proposal.state.value
            who = proposal.approved_by or proposal.rejected_by or ""
            print(
                f"Continuing the planning run {record.id}: its proposal {proposal.id} is {decided}"
                f"{f' by {who}' if who else ''}.",
                file=out,
                flush=True,
            )
    print(f"Task: {PLANNING_TASK}", file=out, flush=True)
    resumed = await journal.resume(
        record.id, caller, Curator(model=model, tools=tools), tools, PLANNING_TASK, observer=LiveRounds(out)
    )
    _decided(resumed, record.rounds, out)
    _summary(resumed, out)
    for action in resumed.proposed:
        print(f"  proposal tool={action.tool_name} digest={action.digest} (waits for a human)", file=out)
    if resumed.proposed:
        await _decide_next(journal, resumed.run_id, out, db, mode)
    return 1 if resumed.outcome is Outcome.ERROR else 0


def _decided(result: ToolLoopResult[Any, Any], round: int, out: TextIO) -> None:
    """What the decisions on the proposals of `round` (the one this resume settled) did: the approved call
    ran once (and what it returned), or the rejection's reason went to the model."""
    for entry in result.checkpoint.entries:
        if not isinstance(entry, DecisionEntry) or entry.round != round:
            continue
        if not entry.approved:
            print(
                f"  decided  round {entry.round}: rejected by {entry.by}; the model is told: {entry.reason}", file=out
            )
        elif entry.batch is not None:
            ran = ", ".join(str(item) for item in json.loads(entry.batch))
            print(f"  decided  round {entry.round}: approved by {entry.by}; the call ran once -> {ran}", file=out)
        elif entry.error is not None:
            print(f"  decided  round {entry.round}: approved by {entry.by}; the call failed: {entry.error}", file=out)


def _unreachable(error: AgentkitError | None, out: TextIO) -> bool:
    """Whether `error` says the server gave no answer at all; if so, say the demo stops."""
    # No HTTP status: the connection failed or timed out, so every later run would fail the same way.
    if isinstance(error, ProviderError) and error.status is None:
        print("  stopped  the model server did not answer, so the demo ends here.", file=out, flush=True)
        return True
    return False


def _answer(result: ToolLoopResult[Hit, GroundedAnswer], out: TextIO, *, scripted: bool) -> None:
    """The typed answer, and the passage it cites (one the run retrieved), or why there is none."""
    if scripted and result.items:
        print("  answer   (none: the scripted model answers only the built-in questions)", file=out)
    elif result.answer is None:
        why = "nothing was retrieved" if not result.items else f"the run ended {result.stop_reason.value}"
        print(f"  answer   (none: {why})", file=out)
    else:
        print(f"  answer   {result.answer.answer}", file=out)
        for hit in result.cited():
            print(f"  cites    [{hit.id}] {hit.passage.title}: {hit.passage.text}", file=out)


async def _verdict(verifier: AnswerVerifier, answer: GroundedAnswer, out: TextIO) -> Review | None:
    """Check `answer` against the passage it cites and print the verdict; `None` when the judge's call
    failed (the answer is then unchecked, and the line says so)."""
    started = time.perf_counter()
    try:
        review = await verifier.review(answer)
    except AgentkitError as error:
        print(f"  verdict  unchecked: the judge's call failed: {error}", file=out, flush=True)
        return None
    how = f"the judge, {time.perf_counter() - started:.2f} s" if review.usage.requests else "the rules, no model call"
    if review.approved:
        print(f"  verdict  supported by [{answer.passage_id}] ({how})", file=out, flush=True)
    else:
        print(f"  verdict  NOT SUPPORTED: {review.feedback} ({how})", file=out, flush=True)
    return review


def _verdicts(verdicts: dict[int, bool], out: TextIO) -> None:
    """One line for all the checked answers: how many the passage they cite supports, and which it does not."""
    if not verdicts:
        return
    unsupported = [number for number, supported in verdicts.items() if not supported]
    line = f"Answers checked against the passage each cites: {len(verdicts) - len(unsupported)} supported"
    if unsupported:
        line += f", {len(unsupported)} NOT SUPPORTED ({', '.join(f'[{n}]' for n in unsupported)})"
    print(f"{line}.\n", file=out, flush=True)


def _summary(result: ToolLoopResult[Any, Any], out: TextIO, *, verbose: bool = False) -> None:
    print(
        f"  outcome  {result.outcome.name} ({result.stop_reason.value}) after {result.rounds} "
        f"round{'s' if result.rounds != 1 else ''}, {len(result.items)} item{'s' if len(result.items) != 1 else ''}",
        file=out,
    )
    if result.error is not None:
        print(f"  error    {result.error}", file=out)
    if result.items:
        print(f"  items    {_describe(result.items, scores=False)}", file=out)
    if verbose:
        for record in result.trace:
            if record.rationale:
                print(f"  why      round {record.round}: {record.rationale}", file=out)


def _describe(batch: Sequence[Any], *, scores: bool = True) -> str:
    if not batch:
        return "no hits"
    parts = []
    for item in batch:
        if isinstance(item, Hit):
            parts.append(f"{item.id} ({item.score:.2f})" if scores else f"{item.id} {item.passage.title}")
        else:
            parts.append(str(item))
    return ", ".join(parts)


@dataclass(slots=True)
class _Round:
    number: int
    of: int | None
    llm_seconds: float = 0.0
    call: str = ""
    outcome: str = ""
    failed: list[tuple[int, str]] = field(default_factory=list)


class LiveRounds(Observer):
    """Prints each round as it happens: round, call, model latency, hits or proposal.

    On a terminal, a round in progress shows as a status line that the finished round replaces.
    """

    def __init__(self, out: TextIO, *, live: bool | None = None, verbose: bool = False) -> None:
        self.out = out
        self.live = out.isatty() if live is None else live
        self.verbose = verbose
        self.closed = False
        """The output's reader went away: nothing more is written."""
        """Show the executor's rationale on its done line (the summary lists every round's with `--verbose`)."""
        self._round: _Round | None = None

    def on_round_start(self, event: RoundStarted) -> None:
        if isinstance(event.info, ToolRoundInfo):
            self._finish_round(event.info)
        info = event.info
        self._round = _Round(number=info.round, of=info.max_rounds)
        if self.live:
            self._write(f"\r  round {self._position()}  asking the model ...")

    def on_llm_call(self, event: LLMCallFinished) -> None:
        if self._round is None:
            return
        self._round.llm_seconds += event.seconds
        if event.error is not None:
            self._round.failed.append((event.attempt, str(event.error)))

    def on_tool_call(self, event: ToolCallStarted) -> None:
        if self._round is not None:
            self._round.call = f"{event.tool_name} {_args(event.args)}"

    def on_tool_result(self, event: ToolResultReturned) -> None:
        if self._round is None:
            return
        if event.observation is not None:
            self._round.outcome = f"-> told: {event.observation}"
        elif event.error is not None:
            self._round.outcome = f"-> failed: {event.error}"

    def on_proposal(self, event: ProposalCaptured) -> None:
        if self._round is not None:
            proposal = event.proposal
            self._round.call = f"{proposal.tool_name} {_args(proposal.args)}"
            self._round.outcome = f"-> proposed (Tier.{proposal.tier.name}), not run"

    def on_degeneration(self, event: DegenerationDetected) -> None:
        if self._round is not None:
            self._round.call = f"{event.tool_name} {_args(event.args)}"
            refused = "refused, not run (the model is told)" if event.refused else "stalemate"
            self._round.outcome = f"-> a repeat of a recent call: {refused}"

    def on_run_end(self, event: RunFinished) -> None:
        current = self._round
        result = event.result
        trace = result.trace if isinstance(result, ToolLoopResult) else ()
        record = trace[-1] if trace and current is not None and trace[-1].round == current.number else None
        if current is not None and record is not None:
            if record.done:
                current.call = f'done: "{record.rationale}"' if self.verbose and record.rationale else "done"
            elif record.executed and not current.outcome:
                assert isinstance(result, ToolLoopResult)
                batch = result.items[len(result.items) - record.batch_size :] if record.batch_size else []
                current.outcome = f"-> {_describe(batch)}"
            elif record.error and not current.outcome and not current.failed:
                current.outcome = f"-> {record.error}"
        # A run that ends in error has its error printed once, by the summary.
        self._print_round(reasons=event.result.error is None)

    def _finish_round(self, info: ToolRoundInfo[Any]) -> None:
        current = self._round
        if current is None:
            return
        last = info.prior_calls[-1] if info.prior_calls else None
        if last is not None and last.round == current.number and not current.outcome:
            current.outcome = f"-> {_describe(last.batch)}"
        self._print_round()

    def _position(self) -> str:
        current = self._round
        assert current is not None
        return f"{current.number}/{current.of}" if current.of is not None else str(current.number)

    def _print_round(self, *, reasons: bool = True) -> None:
        current = self._round
        if current is None:
            return
        line = f"  round {self._position()}  {current.call or '(no call)'}  [{current.llm_seconds:.2f} s]"
        if current.outcome:
            line += f"  {current.outcome}"
        line += "".join(_failure(attempt, reason if reasons else "") for attempt, reason in current.failed)
        prefix = "\r\x1b[2K" if self.live else ""
        self._write(f"{prefix}{line}\n")
        self._round = None

    def _write(self, text: str) -> None:
        """Write and flush; once the reader has gone (`agentkit demo | head`), write nothing more: the
        demo's own next line meets the closed pipe and ends the command quietly."""
        if self.closed:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:
            self.closed = True


def _failure(attempt: int, reason: str) -> str:
    return f"  (attempt {attempt} failed: {reason})" if reason else f"  (attempt {attempt} failed)"


def _args(args: Any) -> str:
    try:
        return json.dumps(args.model_dump(mode="json"), ensure_ascii=False)
    except AttributeError:
        return repr(args)


def scripted_resumer() -> ScriptedCaller:
    """A caller scripted to continue the planning run: the delete was decided, so it is done."""
    caller = ScriptedCaller()
    caller.add(done_step("The delete was decided, so the task is finished."))
    return caller


def _answered(rationale: str, passage_id: str, answer: str) -> dict[str, Any]:
    """A done step with the researcher's answer, in the wire shape."""
    cited = {"passage_id": passage_id, "answer": answer}
    return {"rationale": rationale, "decision": {"done": True, "answer": cited}}


def _judged(passage: Passage) -> dict[str, Any]:
    """The judge's reply picking `passage` as the one that states the answer, in the wire shape."""
    return {"reason": f"Passage {passage.id} states the answer.", "passage_id": passage.id}


def scripted_caller(index: BM25Index, questions: Sequence[str], task: str = PLANNING_TASK) -> ScriptedCaller:
    """A caller scripted to play the demo: per question a search with its keywords and done, with
    an answer from the best hit for the built-in questions; then the planning example's search and
    delete.

    The searches are derived from `index`, so `--question` works scripted too; but a script
    cannot read, so another question is searched and not answered (`run_demo(scripted=True)`
    asks for no answer there).
    """
    caller = ScriptedCaller()
    for question in questions:
        query = " ".join(keywords(question))[:120] or question[:120]
        hits = index.search(query)
        caller.add(call_step(SearchArgs(query=query), rationale="No results yet, so I must search."))
        if not hits:
            # Nothing to cite, so no answer can be given: the script searches on, with other words, to the ceiling.
            for extra in ("facts", "history", "definition"):
                caller.add(call_step(SearchArgs(query=f"{query} {extra}"[:120]), rationale="Nothing yet; other words."))
            continue
        top = hits[0]
        if question in QUESTIONS:
            answer = top.passage.text.split(". ")[0].rstrip(".") + "."
            caller.add(_answered(f"Passage {top.id} states the answer.", top.id, answer))
            caller.add(_judged(top.passage))
        else:  # the demo shows no answer for it: a script cannot read
            caller.add(_answered("A script stops after one search; it cannot read the passages.", top.id, "-"))
    task_query = "archived Pluto ninth planet"
    caller.add(
        call_step(SearchArgs(query=task_query), tool="search_corpus", rationale="I must find the passage first.")
    )
    target = index.search(task_query)
    if target:
        caller.add(
            call_step(
                DeleteArgs(passage_id=target[0].id, reason="calls Pluto a planet; wrong since 2006"),
                tool="delete_passage",
                rationale=f"Passage {target[0].id} is the outdated one.",
            )
        )
    else:
        caller.add(done_step("The passage was not found."))
    return caller
