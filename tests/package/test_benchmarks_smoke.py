"""The benchmark runs end to end for a few iterations, and its server-side check catches short runs.

Only the in-project contenders are used (the raw ``openai`` floor and agentkit), so this needs no
peers' environment. No figure is asserted: performance is measured by ``benchmarks/run.sh``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import (
    evals_overhead,
    harness,
    journal_checkpoint,
    otel_metrics,
    prompt_tokens,
    scenario,
    schema_bytes,
    server,
)

RUN = b"0123456789abcdef"


def body(searches_done: int, *, tools: list[str] | None = None, **extra: Any) -> bytes:
    """A request of run ``RUN`` that shows the results of ``searches_done`` searches."""
    items = [item for k in range(1, searches_done + 1) for item in scenario.search_items(f"{RUN.decode()}-{k}")]
    request: dict[str, Any] = {
        "model": scenario.MODEL,
        "messages": [{"role": "user", "content": scenario.step_prompt(scenario.question(RUN.decode()), items, 1, 6)}],
        **extra,
    }
    if tools:
        request["tools"] = [{"type": "function", "function": {"name": name, "parameters": {}}} for name in tools]
    return json.dumps(request).encode()


@pytest.fixture(autouse=True)
def fresh_stats() -> None:
    server.STATS.reset()


def message_of(reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = reply["choices"][0]["message"]
    return message


def test_server_asks_for_three_searches_then_finishes_a_step_run() -> None:
    """Step protocol: a search call while fewer than 3 searches are shown, then done."""
    first = json.loads(message_of(server.reply(body(0)))["content"])
    last = json.loads(message_of(server.reply(body(3)))["content"])
    assert first == {"rationale": "need more results", "done": False, "call": {"query": f"{RUN.decode()}-1"}}
    assert last["done"] is True
    assert last["call"] is None


def test_server_answers_tool_protocol_with_the_final_tool() -> None:
    """Tool protocol: search calls, then the final answer as a call of the other offered tool."""
    searching = message_of(server.reply(body(1, tools=["search", "final_result"])))
    final = message_of(server.reply(body(3, tools=["search", "final_result"])))
    assert searching["tool_calls"][0]["function"]["name"] == "search"
    assert final["tool_calls"][0]["function"]["name"] == "final_result"
    answer = scenario.Answer.model_validate_json(final["tool_calls"][0]["function"]["arguments"])
    scenario.check_answer(answer)


def test_server_check_flags_a_run_that_skipped_a_search() -> None:
    """A run whose requests do not show 0, 1, 2, 3 searches in turn is counted as wrong."""
    for done in (0, 1, 3):
        server.reply(body(done))
    summary = server.STATS.summary()
    assert summary["runs"] == 1
    assert summary["correct_runs"] == 0
    assert summary["wrong_runs"] == {RUN.decode(): [0, 1, 3]}


def test_server_check_passes_a_complete_run() -> None:
    """A run that shows 0, 1, 2 and 3 searches in turn is correct."""
    for done in range(scenario.ROUNDS):
        server.reply(body(done))
    summary = server.STATS.summary()
    assert (summary["runs"], summary["correct_runs"], summary["finals"]) == (1, 1, 1)


@pytest.mark.slow
def test_benchmark_runs_for_a_few_iterations_and_writes_the_table(tmp_path: Path) -> None:
    """The harness measures the floor and agentkit, every run passes the server-side check, and the table is written."""
    names = ["raw-openai", "agentkit-json_schema"]
    argv = ["--contenders", ",".join(names), "--repeats", "1", "--runs", "2", "--warmup", "1"]
    argv += ["--concurrent", "5", "--import-repeats", "0", "--micro-repeats", "0", "--out", str(tmp_path)]
    assert harness.main(argv) == 0
    summary = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert summary["failures"] == []
    for name in names:
        figures = summary["contenders"][name]
        assert figures["correct_samples"] == figures["samples"] == 1
        assert figures["concurrent"]["errors"] == 0
        assert figures["concurrent"]["correct_runs"] == 5
    table = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in table for name in names)


def test_a_labelled_benchmark_run_leaves_latest_as_it_is(tmp_path: Path) -> None:
    """With `--label`, the results are written as `<date>-<label>` only: the published `latest` stays."""
    argv = ["--contenders", "raw-httpx,agentkit-json_schema", "--repeats", "1", "--runs", "2", "--warmup", "1"]
    argv += ["--concurrent", "0", "--import-repeats", "0", "--micro-repeats", "0", "--out", str(tmp_path)]
    assert harness.main([*argv, "--label", "before"]) == 0
    [written] = tmp_path.glob("*-before.json")
    assert sorted(path.name for path in tmp_path.iterdir()) == [written.name, written.with_suffix(".md").name]
    summary = json.loads(written.read_text(encoding="utf-8"))
    assert summary["failures"] == []
    assert summary["options"]["label"] == "before"
    assert summary["contenders"]["agentkit-json_schema"]["correct_samples"] == 1


async def test_context_growth_benchmark_bounds_the_request_under_a_window() -> None:
    """The context benchmark runs; with last=1 the request stops growing while the unbounded one grows."""
    from agentkit import ContextWindow
    from benchmarks import context_growth

    before = await context_growth.measure("none", None, 5)
    after = await context_growth.measure("last=1", ContextWindow(last=1), 5)
    assert before.sizes[0] == after.sizes[0]
    assert before.sizes[1] < before.sizes[2] < before.sizes[3]
    assert after.sizes[2] - after.sizes[1] < 200  # only the left-out note is added
    assert after.sizes[3] < before.sizes[3]


@pytest.mark.slow
async def test_journal_checkpoint_benchmark_measures_every_variant() -> None:
    """The journal checkpoint benchmark runs each variant to its fourth round and reports each against the baseline."""
    report = await journal_checkpoint.measure(1, 1)
    assert list(report["variants"]) == [
        "no-journal",
        "observer-only",
        "journal-events",
        "journal-checkpoints",
        "sql-floor",
    ]
    assert report["variants"]["no-journal"]["cpu_x"] == 1.0
    table = journal_checkpoint.markdown(report)
    assert all(f"| {name} |" in table for name in report["variants"])


async def test_the_sql_floor_commits_each_rounds_entries_before_the_next_round(tmp_path: Path) -> None:
    """The journal benchmark's floor writes what a resumable run needs: by each round's end the entries so far
    are committed (read from another connection), and at the run's end all of them and the outcome."""
    import sqlite3

    from agentkit import RunCheckpoint, run_tool_loop_tiered
    from agentkit.testing import ScriptedCaller, call_step, done_step
    from tests.support import Finder, Query, search

    seen: list[int] = []

    class Watched(journal_checkpoint.SQLFloor):
        def on_checkpoint(self, run_id: str, checkpoint: RunCheckpoint) -> None:
            super().on_checkpoint(run_id, checkpoint)
            with sqlite3.connect(tmp_path / "floor.db") as other:
                seen.append(other.execute("SELECT COUNT(*) FROM entries WHERE run_id = ?", (run_id,)).fetchone()[0])

    floor = Watched(tmp_path / "floor.db")
    script = [call_step(Query(query="a")), call_step(Query(query="b")), done_step()]
    result = await run_tool_loop_tiered(ScriptedCaller(script), Finder(), search, "ctx", observer=floor)
    floor.db.close()
    assert seen == [0, 1, 2]
    with sqlite3.connect(tmp_path / "floor.db") as db:
        bodies = [row[0] for row in db.execute("SELECT body FROM entries ORDER BY seq")]
        (outcome,) = db.execute("SELECT outcome FROM runs WHERE id = ?", (result.run_id,)).fetchone()
    assert bodies == [entry.model_dump_json() for entry in result.checkpoint.entries]
    assert outcome == result.outcome.value


async def test_evals_overhead_benchmark_replays_every_case_both_ways() -> None:
    """Both arms run every recorded case through its replay (evaluate's report asserts each passed)."""
    report = await evals_overhead.measure(cases=6, concurrency=3, repeats=1)
    assert report["cases"] == 6
    assert report["wall_x"] > 0
    assert report["cpu_x"] > 0


@pytest.mark.slow
async def test_otel_metrics_benchmark_measures_every_variant_in_both_settings() -> None:
    """The metrics benchmark runs each variant to its fourth round, scripted and over HTTP, against spans only."""
    report = await otel_metrics.measure(1, 1)
    assert list(report["settings"]) == ["scripted", "http"]
    for variants in report["settings"].values():
        assert list(variants) == ["spans-only", "metrics-noop", "metrics-sdk"]
        assert variants["spans-only"]["cpu_x"] == 1.0
    table = otel_metrics.markdown(report)
    assert table.count("| metrics-noop |") == 2


async def test_agentkits_requests_are_within_a_tenth_of_the_raw_loops_bytes() -> None:
    """Over one run of the scenario, agentkit's request bodies are at most 1.1x the raw openai loop's.

    Byte counts do not depend on the machine, so this is checked here; times are the benchmark's.
    """
    ours = await prompt_tokens.request_bodies("agentkit-json_schema")
    raw = await prompt_tokens.request_bodies("raw-openai")
    assert len(ours) == len(raw) == scenario.ROUNDS
    assert sum(map(len, ours)) <= 1.1 * sum(map(len, raw)), (list(map(len, ours)), list(map(len, raw)))


def test_the_prompt_tokens_benchmark_counts_every_request_of_each_contender(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each contender's four requests are counted, with ratios to the raw loop (a stand-in tokenizer here)."""

    def quarter(base_url: str, text: str) -> int:
        return len(text) // 4

    monkeypatch.setattr(prompt_tokens, "count_tokens", quarter)
    report = prompt_tokens.measure("http://unused/v1")
    assert list(report["contenders"]) == list(prompt_tokens.CONTENDERS)
    for row in report["contenders"].values():
        assert row["requests"] == scenario.ROUNDS
        assert row["tokens_per_request"] == [size // 4 for size in row["bytes_per_request"]]
    assert report["contenders"]["raw-openai"]["tokens_x"] == 1.0


async def test_the_fake_server_round_benchmark_runs_every_server() -> None:
    """``benchmarks.fake_server_round`` measures a round against each server and ratios them to the bare one."""
    from benchmarks import fake_server_round

    report = await fake_server_round.measure(repeats=1, runs=1, before_runs=1)
    assert set(report["servers"]) == set(fake_server_round.SERVERS)
    assert report["servers"]["bare"]["wall_x"] == 1.0
    assert all(row["wall_ms_per_round"] > 0 for row in report["servers"].values())


def test_the_schema_bytes_benchmark_measures_every_mode_against_the_raw_loop() -> None:
    """Each tool set gets the raw loop's figures and one cell per mode, its ratio taken from what was sent."""
    report = schema_bytes.measure(len)  # characters stand in for the embedded model's tokens
    assert list(report) == list(schema_bytes.TOOL_SETS)
    for row in report.values():
        assert set(row) == {"raw", *(f"{mode}{' strict' if strict else ''}" for mode, strict in schema_bytes.CELLS)}
        cell = row["json_schema"]
        assert cell["extra_x_raw_tools"] == round(cell["extra_bytes"] / row["raw"]["tools_bytes"], 2)
        assert cell["extra_tokens"] == cell["extra_bytes"]  # ASCII: one character a byte
        assert row["json"]["overhead_bytes"] > row["json"]["extra_bytes"]  # the schema rides in the system message
