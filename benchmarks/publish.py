"""The published performance figures, written from the benchmarks' results files and nowhere else.

``python -m benchmarks.publish`` rewrites every figures block of the pages in ``PAGES`` from the
results file it names; ``--check`` only reports the blocks that differ (exit 1), as
``tests/docs/test_published_figures.py`` does. A block is::

    <!-- figures: contenders from benchmarks/results/latest.json -->
    (the table and the line that says when, where and under what load it was measured)
    <!-- end figures -->

Its kind (``contenders`` here) names the renderer, and ``from`` the results file, relative to the
repository root; ``change`` takes two files (``from BEFORE to AFTER``), ``temporal-rounds`` one or
more (``from A and B``, a row each). What is between the two comments is generated: edit the
renderer or rerun the benchmark, never the page.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import report

ROOT = Path(__file__).resolve().parent.parent


def doc_pages() -> tuple[str, ...]:
    """Every page of the documentation: the README, ``benchmarks/README.md`` and ``docs/**/*.md``."""
    docs = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))
    return ("README.md", "benchmarks/README.md", *docs)


PAGES = doc_pages()
"""The pages whose figures blocks ``python -m benchmarks.publish`` writes."""
BLOCK = re.compile(
    r"(?P<open><!-- figures: (?P<kind>[a-z-]+) from (?P<files>[^>]+?) -->\n)"
    r"(?P<body>.*?)(?P<close><!-- end figures -->)",
    re.DOTALL,
)
X = "\u00d7"
"""The multiplication sign the tables write ratios with."""

FRIENDLY = {
    "raw-httpx": "bare `httpx2` loop (floor)",
    "raw-openai": "raw `openai` client",
    "raw-openai-tools": "raw `openai` client, tool calling",
    "agentkit-json_schema": "**agentkit, JSON schema (default)**",
    "agentkit-tools": "**agentkit, tools mode**",
    "agentkit-json": "agentkit, JSON mode",
    "agentkit-md_json": "agentkit, markdown JSON",
    "instructor-json_schema": "instructor loop, JSON schema",
    "instructor-tools": "instructor loop, tools",
    "pydantic-ai": "pydantic-ai",
    "openai-agents": "OpenAI Agents SDK",
    "langgraph": "LangGraph",
}
"""How a contender is named on the pages."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """One figures block of a page."""

    page: str
    kind: str
    files: tuple[str, ...]
    body: str
    span: tuple[int, int]
    """Where ``body`` is in the page."""


def blocks(page: str, text: str) -> list[Block]:
    """The figures blocks of ``text`` (the page ``page``)."""
    found = []
    for match in BLOCK.finditer(text):
        files = tuple(part.strip() for part in re.split(r"\s+(?:to|and)\s+", match["files"].strip()))
        found.append(Block(page=page, kind=match["kind"], files=files, body=match["body"], span=match.span("body")))
    return found


def load(path: str) -> dict[str, Any]:
    """A results file, by its path from the repository root."""
    loaded: dict[str, Any] = json.loads((ROOT / path).read_text(encoding="utf-8"))
    return loaded


def _median(figure: Mapping[str, Any] | None) -> float | None:
    return None if not figure else figure.get("median")


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def measured(results: Mapping[str, Any], path: str) -> str:
    """The line under a table: when, on what, under what load, how many samples, from which file."""
    if "environment" not in results:
        return _measured_flat(results, path)
    env = results["environment"]
    load_before, load_after = env["load_before"][0], env.get("load_after", [None])[0]
    options = results.get("options") or {}
    samples = ""
    if options:
        samples = f"; {options['repeats']} interleaved repeats of {options['runs']} runs of 4 model round trips"
    elif "repeats" in results:
        samples = f"; {results['repeats']} interleaved repeats of {results['runs']} runs"
    return (
        f"Measured {env['date']} at commit `{env.get('commit', 'unknown')}` on {env['machine']} "
        f"(Python {env['python']}, load average "
        f"{_num(load_before)} before and {_num(load_after)} after{samples}); results file `{path}`."
    )


def _measured_flat(results: Mapping[str, Any], path: str) -> str:
    """``measured`` for the results files that keep ``date``, ``machine`` and ``loadavg`` at their top."""
    samples = ""
    if "repeats" in results and "runs" in results:
        samples = f"; {results['repeats']} interleaved repeats of {results['runs']} runs"
    if "date" not in results:
        # benchmarks/journal_checkpoint.py records neither when nor where: say so rather than guess.
        day = re.search(r"\d{4}-\d\d-\d\d", Path(path).name)
        when = f"on {day.group()} (the date in the file's name)" if day else "on a day the file does not record"
        return f"Measured {when}; the file records no machine or load{samples}; results file `{path}`."
    loadavg = results.get("loadavg")
    load = "" if not loadavg else f", load average {_num(loadavg[0])}"
    return f"Measured {results['date']} on {results['machine']}{load}{samples}; results file `{path}`."


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _order(figures: Mapping[str, Any]) -> list[str]:
    return sorted(figures, key=lambda name: _median(figures[name]["wall_ms_per_round"]) or float("inf"))


def _concurrent(figure: Mapping[str, Any]) -> str:
    conc = figure.get("concurrent")
    if not conc:
        return "-"
    if "error" in conc:
        return "failed"
    return f"{_num(conc['wall_s'], 1)} / {_num(conc['peak_rss_mib'], 0)} / {conc['errors']}"


_SHORT = (
    ("wall_ms_per_round", 3),
    ("wall_ratio_http", 2),
    ("cpu_ms_per_round", 3),
    ("cpu_ratio_http", 2),
    ("request_body_bytes_per_round", 0),
)
"""The README's columns: a figure's key and the digits it is written with."""


def _cells(name: str, figure: Mapping[str, Any], columns: Sequence[tuple[str, int]]) -> list[str]:
    """A contender's row: its name, then the median of each column's figure ("-" where the run had none)."""
    return [FRIENDLY.get(name, f"`{name}`"), *(_num(_median(figure.get(key)), digits) for key, digits in columns)]


def contenders(files: Sequence[str]) -> str:
    """Every contender: time and CPU per round against both floors, request bytes, 1,000 concurrent runs."""
    results = load(files[0])
    figures = results["contenders"]
    concurrent = results["options"]["concurrent"]
    lines = [
        f"| contender | wall ms/round | {X} bare httpx | {X} `openai` client | client CPU ms/round | {X} bare httpx "
        f"| {X} `openai` client | request bytes/round | {concurrent:,} concurrent runs: s / peak MiB / errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    columns = (*_SHORT[:2], ("wall_ratio", 2), *_SHORT[2:4], ("cpu_ratio", 2), _SHORT[4])
    for name in _order(figures):
        cells = [*_cells(name, figures[name], columns), _concurrent(figures[name])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", measured(results, files[0])])


def contenders_short(files: Sequence[str]) -> str:
    """The README's table: time and CPU per round against the bare-HTTP floor, and request bytes."""
    results = load(files[0])
    figures = results["contenders"]
    lines = [
        f"| contender | wall ms/round | {X} bare httpx | client CPU ms/round | {X} bare httpx | request bytes/round |",
        "|---|---|---|---|---|---|",
    ]
    for name in _order(figures):
        lines.append("| " + " | ".join(_cells(name, figures[name], _SHORT)) + " |")
    return "\n".join([*lines, "", measured(results, files[0])])


def targets(files: Sequence[str]) -> str:
    """agentkit's targets with the measured value and whether it was met: the results file's figures held
    to the limits ``benchmarks/report.py`` sets now (a file keeps the targets of its own day too)."""
    results = load(files[0])
    lines = ["| target | measured | limit | met |", "|---|---|---|---|"]
    for target in report.targets(results):
        if not target["target"].startswith(("agentkit-json_schema", "agentkit-tools", "import agentkit loads")):
            continue
        met = {True: "yes", False: "**no**", None: "not measured"}[target["met"]]
        value = target["note"] or "-" if target["value"] is None else _num(target["value"], 2)
        lines.append(f"| {target['target']} | {value} | {target['limit']} | {met} |")
    return "\n".join([*lines, "", measured(results, files[0])])


def change(files: Sequence[str]) -> str:
    """agentkit's ratios to the bare-HTTP floor and its request bytes, in two results files (before, after)."""
    before, after = load(files[0]), load(files[1])
    lines = [
        f"| contender | wall {X} bare httpx, before | after | client CPU {X} bare httpx, before | after "
        "| request bytes/round, before | after |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figure in after["contenders"].items():
        old = before["contenders"].get(name)
        if old is None or not name.startswith(("agentkit-", "raw-openai")) or name == "raw-openai-tools":
            continue
        cells = [
            FRIENDLY.get(name, f"`{name}`"),
            _num(_median(old.get("wall_ratio_http"))),
            _num(_median(figure["wall_ratio_http"])),
            _num(_median(old.get("cpu_ratio_http"))),
            _num(_median(figure["cpu_ratio_http"])),
            _num(_median(old["request_body_bytes_per_round"]), 0),
            _num(_median(figure["request_body_bytes_per_round"]), 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", "Before: " + measured(before, files[0]), "", "After: " + measured(after, files[1])])


def loop_alone(files: Sequence[str]) -> str:
    """The loop itself over a scripted caller (no HTTP), against a hand-written loop."""
    results = load(files[0])
    lines = [
        "| rounds per run | agentkit µs/round | hand-written loop µs/round | the loop's own µs/round |",
        "|---|---|---|---|",
    ]
    for rounds, figure in (results.get("micro") or {}).items():
        cells = [
            rounds,
            _num(figure["agentkit_us_per_round"], 1),
            _num(figure["baseline_us_per_round"], 1),
            _num(figure["overhead_us_per_round"], 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", measured(results, files[0])])


def imports(files: Sequence[str]) -> str:
    """Cold import times (a fresh interpreter each), and what ``import agentkit`` loads."""
    results = load(files[0])
    shown = ("import pydantic", "import agentkit", "import openai", "import agentkit; import agentkit.providers.openai")
    lines = ["| import | cold ms | optional modules loaded |", "|---|---|---|"]
    for label in shown:
        figure = results["imports"].get(label)
        if figure is not None:
            loaded = ", ".join(figure["loaded_forbidden"]) or "none"
            lines.append(f"| `{label}` | {_num(_median(figure['ms']), 0)} | {loaded} |")
    return "\n".join([*lines, "", measured(results, files[0])])


def fake_server(files: Sequence[str]) -> str:
    """A round against ``FakeOpenAIServer``, against the bare benchmark server, both in the test's process."""
    results = load(files[0])
    lines = [f"| server | wall ms/round | {X} bare server | CPU ms/round (client and server) | {X} bare server |"]
    lines.append("|---|---|---|---|---|")
    for row in results["servers"].values():
        cells = [
            row["server"],
            _num(row["wall_ms_per_round"], 3),
            _num(row["wall_x"]),
            _num(row["cpu_ms_per_round"], 3),
            _num(row["cpu_x"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", measured(results, files[0])])


def sse_first_event(files: Sequence[str]) -> str:
    """The model server's first byte to the first `RationaleDelta` a browser's `EventSource` gets (`agentkit.web`)."""
    results = load(files[0])
    lines = [
        "| client | runs | median ms | p90 ms | fastest ms | slowest ms |",
        "|---|---|---|---|---|---|",
        _row(
            [
                results["client"],
                len(results["samples_ms"]),
                _num(results["median_ms"]),
                _num(results["p90_ms"]),
                _num(results["min_ms"]),
                _num(results["max_ms"]),
            ]
        ),
    ]
    return "\n".join([*lines, "", measured(results, files[0])])


def streaming(files: Sequence[str]) -> str:
    """The client CPU of a streamed round against a non-streamed one, per chunk size (`benchmarks.streaming_round`)."""
    results = load(files[0])
    ways = results["ways"]
    floored = any("floor" in row for row in ways.values())
    head = f"| way | client CPU ms/round | {X} its own not-streamed way |"
    if floored:
        head += f" {X} bare `httpx2`'s same way |"
    lines = [f"{head} events per run |", "|---" * (5 if floored else 4) + "|"]
    for way, row in ways.items():
        cells = [way, _num(row["client_cpu_ms_per_round"], 3), _num(row["cpu_x"])]
        if floored:
            cells.append(_num(row["cpu_x_floor"]) if "cpu_x_floor" in row else "-")
        cells.append("-" if row.get("events_per_run") is None else str(row["events_per_run"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", measured(results, files[0])])


def prompt_tokens(files: Sequence[str]) -> str:
    """Request bytes and the embedded model's tokens per round, against the raw openai loop."""
    results = load(files[0])
    lines = [
        f"| contender | request bytes/round | {X} raw `openai` loop | tokens/round | {X} raw `openai` loop |",
        "|---|---|---|---|---|",
    ]
    for name, row in results["contenders"].items():
        cells = [
            FRIENDLY.get(name, f"`{name}`"),
            _num(row["bytes_per_round"], 0),
            _num(row["bytes_x"]),
            _num(row["tokens_per_round"], 0),
            _num(row["tokens_x"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    tokenizer = f"Tokens by `{results['tokenizer']}`'s tokenizer. "
    return "\n".join([*lines, "", tokenizer + measured(results, files[0])])


SCHEMA_BYTES_MODES = {
    "json_schema": "JSON schema (default)",
    "json_schema strict": "JSON schema, strict",
    "tools": "tools",
    "tools strict": "tools, strict",
    "json": "JSON (schema in the system message)",
    "md_json": "markdown JSON (schema in the system message)",
}
"""How a cell of ``benchmarks/schema_bytes.py`` is named on the pages."""


def schema_bytes(files: Sequence[str]) -> str:
    """The step schema's bytes (and tokens) per request against a raw loop's tool definitions, before and after."""
    before, after = load(files[0]), load(files[-1])
    tokens = before.get("tokenizer") is not None and after.get("tokenizer") is not None
    lines = [
        f"| tools | mode | raw loop's `tools`, bytes | before, bytes | {X} raw | after, bytes | {X} raw |"
        + (f" tokens, before | after | {X} raw |" if tokens else ""),
        "|---|---|---|---|---|---|---|" + ("---|---|---|" if tokens else ""),
    ]
    for label, row in after["tool_sets"].items():
        old = before["tool_sets"][label]
        for mode, name in SCHEMA_BYTES_MODES.items():
            key = "extra" if mode.startswith(("json_schema", "tools")) else "overhead"
            cells = [label, name, _num(row["raw"]["tools_bytes"], 0)]
            for run in (old, row):
                sent = run[mode][f"{key}_bytes"]
                cells += [_num(sent, 0), _num(sent / run["raw"]["tools_bytes"])]
            if tokens:
                cells += [
                    _num(old[mode][f"{key}_tokens"], 0),
                    _num(row[mode][f"{key}_tokens"], 0),
                    _num(row[mode][f"{key}_tokens"] / row["raw"]["tools_tokens"]),
                ]
            lines.append("| " + " | ".join(cells) + " |")
    tokenizer = f"Tokens by `{after['tokenizer']}`'s tokenizer. " if tokens else ""
    return "\n".join(
        [*lines, "", tokenizer + "Before: " + measured(before, files[0]), "", "After: " + measured(after, files[-1])]
    )


JOURNAL_VARIANTS = {
    "no-journal": "no journal",
    "observer-only": "an observer that takes each round's state, writing nothing",
    "journal-events": "journal, events only",
    "journal-checkpoints": "journal, events and a checkpoint per round (as it ships)",
    "sql-floor": "the floor: each round's entries committed as one SQLite row, nothing else",
}
"""How a variant of ``benchmarks/journal_checkpoint.py`` is named on the pages."""


def _against_baseline(names: Mapping[str, str], variants: Mapping[str, Any], unit: str) -> list[list[str]]:
    """A row per variant: its name, wall and CPU per round in ``unit`` (``ms`` or ``us``), each with its ratio."""
    digits, ratio = (3, 2) if unit == "ms" else (1, 3)
    return [
        [
            names.get(name, f"`{name}`"),
            _num(row[f"wall_{unit}_per_round"], digits),
            _num(row["wall_x"], ratio),
            _num(row[f"cpu_{unit}_per_round"], digits),
            _num(row["cpu_x"], ratio),
        ]
        for name, row in variants.items()
    ]


def journal_checkpoint(files: Sequence[str]) -> str:
    """What recording a run into a SQLite journal costs per round, against no journal."""
    results = load(files[0])
    lines = [
        f"| variant | wall ms/round | {X} no journal | client CPU ms/round | {X} no journal |",
        "|---|---|---|---|---|",
        *(_row(cells) for cells in _against_baseline(JOURNAL_VARIANTS, results["variants"], "ms")),
    ]
    return "\n".join([*lines, "", measured(results, files[0])])


def per_file(
    files: Sequence[str],
    header: Sequence[str],
    figures: Callable[[str, dict[str, Any]], tuple[list[list[object]], str]],
) -> str:
    """A table of rows from each results file, then a note on each: `figures(path, results)` gives both."""
    lines, notes = list(header), []
    for path in files:
        rows, note = figures(path, load(path))
        lines += [_row(cells) for cells in rows]
        notes.append(note)
    return "\n".join([*lines, "", *(f"- {note}" for note in notes)])


def long_run(files: Sequence[str]) -> str:
    """One long tiered run recorded into a journal or not: rounds 11-60 against the last 50, and the files."""
    header = (
        f"| results file | variant | rounds 11-60 ms/round | last 50 ms/round | last 50 {X} rounds 11-60 "
        "| journal files MiB | busy processes meanwhile |",
        "|---|---|---|---|---|---|---|",
    )

    def figures(path: str, results: dict[str, Any]) -> tuple[list[list[object]], str]:
        busy = results.get("load", 0)
        rows: list[list[object]] = [
            [f"`{Path(path).name}`", name, v["rounds_11_60_ms"], v["last_50_ms"], v["growth_x"], v["files_mib"], busy]
            for name, v in results["variants"].items()
        ]
        return rows, f"{results['rounds']} rounds. " + measured(results, path)

    return per_file(files, header, figures)


OTEL_VARIANTS = {
    "spans-only": "spans only",
    "metrics-noop": "metrics, no-op meter provider",
    "metrics-sdk": "metrics, SDK meter provider",
}
"""How a variant of ``benchmarks/otel_metrics.py`` is named on the pages."""


def otel_metrics(files: Sequence[str]) -> str:
    """What ``OTelObserver``'s metrics cost per round, against its spans alone."""
    results = load(files[0])
    lines = [
        f"| setting | variant | wall µs/round | {X} spans only | client CPU µs/round | {X} spans only |",
        "|---|---|---|---|---|---|",
    ]
    for setting, variants in results["settings"].items():
        lines += [_row([setting, *cells]) for cells in _against_baseline(OTEL_VARIANTS, variants, "us")]
    return "\n".join([*lines, "", measured(results, files[0])])


def grounded(files: Sequence[str]) -> str:
    """The demo's questions on the embedded model: each prompt with and without the retrieval recipe."""
    results = load(files[0])
    # Results from before the answers were checked against their passages have no verdict columns.
    checked = "supported" in results["variants"][0]
    verdicts = " supported by the cited passage | not supported | verdict and pattern disagree |" if checked else ""
    lines = [
        "| prompt | recipe | valid steps | the executor ended the run | answer passage retrieved | answered "
        f"| answer correct | citation names a retrieved passage |{verdicts} s per round |",
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if checked else ""),
    ]
    for row in results["variants"]:
        runs, answered = row["runs"], row["answered"]
        cells = [
            row["prompt"],
            "yes" if row["recipe"] else "no",
            f"{row['valid_steps']:.0%}",
            f"{row['executor_ended']}/{runs}",
            f"{row['passage_retrieved']}/{runs}",
            f"{answered}/{runs}",
            f"{row['correct']}/{runs}",
            f"{row['citations_valid']}/{answered}",
        ]
        if checked:
            judged = row["supported"] + row["unsupported"]
            cells += [f"{row['supported']}/{answered}", f"{row['unsupported']}/{answered}"]
            cells.append(f"{row['verdict_disagrees']}/{judged}")
        lines.append(_row([*cells, _num(row["seconds_per_round"])]))
    model = f"The embedded {results['model']} model, {results['threads']} generation threads. "
    return "\n".join([*lines, "", model + measured(results, files[0])])


def multi_call(files: Sequence[str]) -> str:
    """Several calls in one step on the embedded model: a row per ``max_calls_per_step``
    (``benchmarks/multi_call.py``)."""
    results = load(files[0])
    lines = [
        "| calls per step | every needed passage retrieved | answer correct | answer cites every needed passage "
        "| first step made several calls | rounds per answer | s per answer |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["settings"]:
        runs = row["runs"]
        cells = [
            str(row["max_calls_per_step"]),
            f"{row['all_retrieved']}/{runs}",
            f"{row['correct']}/{runs}",
            f"{row['cites_all']}/{runs}",
            f"{row['several_calls_first_round']}/{runs}",
            _num(row["rounds_per_answer"]),
            _num(row["seconds_per_answer"]),
        ]
        lines.append(_row(cells))
    model = f"The embedded {results['model']} model, {results['threads']} generation threads. "
    return "\n".join([*lines, "", model + measured(results, files[0])])


def temporal_rounds(files: Sequence[str]) -> str:
    """A round on Temporal against in process and pydantic-ai's ``TemporalAgent``, and many runs at once:
    a row per results file of ``benchmarks/temporal_rounds.py``."""
    header = (
        "| results file | server settings | in process ms/round | agentkit.temporal ms/round | pydantic-ai ms/round "
        f"| {X} pydantic-ai | workflow tasks a run | concurrent runs | runs/s | server CPU ms a run | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    )

    def figures(path: str, results: dict[str, Any]) -> tuple[list[list[object]], str]:
        settings = ", ".join(f"`{key}={value}`" for key, value in (results.get("dynamic_config") or {}).items())
        conc = results.get("concurrent") or {}
        cells: list[object] = [
            f"`{Path(path).name}`",
            settings or "stock",
            _num(results.get("in_process_ms_per_round"), 1),
            _num(results.get("temporal_ms_per_round"), 1),
            _num(results.get("pydantic_ai_temporal_ms_per_round"), 1),
            _num(results.get("temporal_x_pydantic_ai")),
            (results.get("temporal_history") or {}).get("workflow_tasks", "-"),
            f"{conc['runs']:,} through {conc['workers']} workers" if conc else "-",
            _num(conc.get("runs_per_s")),
            _num(conc.get("server_cpu_ms_per_run"), 1),
            conc.get("errors", "-"),
        ]
        return [cells], f"{results['rounds']} rounds a run, median of {results['repeats']}. " + measured(results, path)

    return per_file(files, header, figures)


def temporal_change(files: Sequence[str]) -> str:
    """Pairs of Temporal runs, before and after a change: a row per ``benchmarks.temporal_rounds --compare``
    file, each figure as before, after and after / before."""
    shown = (
        ("temporal_ms_per_round", "ms per round"),
        ("temporal_history.workflow_tasks", "workflow tasks a run"),
        ("temporal_history.activity_tasks", "activity tasks a run"),
        ("concurrent.runs_per_s", "concurrent runs: runs/s"),
        ("concurrent.server_cpu_ms_per_run", "server CPU ms a run"),
    )
    header = (
        "| pair (ratios file) | " + " | ".join(f"{label}: before, after, {X}" for _, label in shown) + " |",
        "|---|" + "---|" * len(shown),
    )

    def figures(path: str, results: dict[str, Any]) -> tuple[list[list[object]], str]:
        pairs = {row["figure"]: row for row in results["figures"]}
        cells: list[object] = [f"`{Path(path).name}`"]
        for key, _ in shown:
            row = pairs.get(key)
            cells.append("-" if row is None else f"{row['before']}, {row['after']}, **{row['ratio']}**")
        return [cells], f"`{Path(path).name}`: before `{results['before']}`, after `{results['after']}`."

    return per_file(files, header, figures)


def journal_workers(files: Sequence[str]) -> str:
    """``journal.work`` on SQLite and PostgreSQL: throughput by worker count, wake-up latency, a SIGKILL."""
    results = load(files[0])
    lines = [
        "| backend | workers | calls/s | refusals | worker CPU ms/call | server CPU ms/call | exactly once |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["scale"]:
        cells = [
            row["backend"],
            row["workers"],
            _num(row["per_s"], 1),
            f"{_num(row['refusal_pct'], 1)}%",
            _num(row["worker_cpu_ms_per_call"]),
            _num(row["server_cpu_ms_per_call"]),
            "yes" if row["exactly_once"] else "**no**",
        ]
        lines.append(_row(cells))
    lines += ["", "| backend | wake-up | approval to call, median ms | p95 ms | max ms |", "|---|---|---|---|---|"]
    for row in results["latency"]:
        lines.append(_row([row["backend"], row["wake"], row["median_ms"], row["p95_ms"], row["max_ms"]]))
    lines += [
        "",
        "| backend, one of four workers SIGKILLed in a call | calls run twice | executed | orphans "
        "| `stuck()` lists the orphan after, s | lease, s |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["kill"]:
        cells = [row["backend"], row["twice"], row["executed"], row["orphans"]]
        lines.append(_row([*cells, row["stuck_listed_after_kill_s"], row["lease_s"]]))
    return "\n".join([*lines, "", measured(results, files[0])])


def anthropic_cache(files: Sequence[str]) -> str:
    """The cached share of input over a 10-round run through AnthropicCaller, with its cache breakpoint and without."""
    results = load(files[0])
    lines = [
        "| `AnthropicCaller` | input tokens | read from the cache | written to the cache | cached share of input |",
        "|---|---|---|---|---|",
    ]
    for name, row in results["variants"].items():
        cells = [
            f"`{name}`",
            _num(row["input_tokens"], 0),
            _num(row["cached_input_tokens"], 0),
            _num(row["cache_write_tokens"], 0),
            f"{_num(100 * row['cached_share'], 1)}%",
        ]
        lines.append(_row(cells))
    scope = (
        f"One run of {next(iter(results['variants'].values()))['rounds']} rounds against `FakeAnthropicServer` "
        f"(its simulated cache keeps prefixes of {results['min_cache_tokens']} tokens or more; tokens estimated "
        f"from the JSON's bytes); a system prompt of {results['system_bytes']} bytes. "
    )
    return "\n".join([*lines, "", scope + measured(results, files[0])])


def injection(files: Sequence[str]) -> str:
    """The AgentDojo injection benchmark (``python -m benchmarks.injection``): per suite, the attacks and the
    benign runs with the policy off, on, and strict, each of the last two also with the task's sources declared."""
    results = load(files[0])
    attacks = [
        "| suite | pairs needing a call | attacks succeeded: policy off | on | on, sources declared | strict "
        "| strict, sources declared | answer-only pairs: words said, off / on | answers marked |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    benign = [
        "| suite | benign tasks | utility: policy off | on | on, sources declared | strict | strict, sources declared "
        "| approvals per benign task: off / on / strict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [*results["suites"].values()]
    if len(rows) > 1:
        rows.append(results["total"])
    for row in rows:
        tasks = row["tasks"] or 1
        answers = row["answer_pairs"]
        attack_cells = [
            row["suite"],
            row["pairs"],
            row["attacks_off"],
            f"**{row['attacks']}**",
            row["attacks_sources"],
            f"**{row['attacks_strict']}**",
            row["attacks_strict_sources"],
            f"{row['answer_attacks_off']} / {row['answer_attacks']} of {answers}" if answers else "-",
            f"{row['answer_flagged']} of {answers}" if answers else "-",
        ]
        attacks.append(_row(attack_cells))
        per_task = " / ".join(f"{row[name] / tasks:.2f}" for name in ("approvals_off", "approvals", "approvals_strict"))
        benign_cells = [
            row["suite"],
            row["tasks"],
            row["utility_off"],
            f"**{row['utility']}**",
            row["utility_sources"],
            f"**{row['utility_strict']}**",
            row["utility_strict_sources"],
            per_task,
        ]
        benign.append(_row(benign_cells))
    lines = [*attacks, "", *benign, "", f"`{results['line']}`", "", f"`{results['strict_line']}`"]
    return "\n".join([*lines, "", measured(results, files[0])])


def injection_local(files: Sequence[str]) -> str:
    """The injection benchmark with the embedded model as the executor: what its episodes did (a run stopped
    early, ``"complete": false``, counts the episodes that finished)."""
    results = load(files[0])
    rows = [row for suite_rows in results["episodes"].values() for row in suite_rows]
    tasks = [row for row in rows if "injection_task" not in row]
    pairs = [row for row in rows if row.get("kind") == "calls"]
    lines = [
        "| episodes | benign utility: policy off | on | pairs | injection read (policy on) "
        "| attacks succeeded: policy off | on |",
        "|---|---|---|---|---|---|---|",
        _row(
            [
                2 * len(rows),
                f"{sum(row['utility_off'] for row in tasks)}/{len(tasks)}",
                f"{sum(row['utility'] for row in tasks)}/{len(tasks)}",
                len(pairs),
                sum(row["saw_injection"] for row in pairs),
                f"{sum(bool(row['attack_off']) for row in pairs)}/{len(pairs)}",
                f"{sum(bool(row['attack']) for row in pairs)}/{len(pairs)}",
            ]
        ),
    ]
    users = sorted({row["user_task"] for row in rows}, key=lambda name: int(name.rsplit("_", 1)[-1]))
    stopped = "" if results.get("complete", True) else ", the run stopped before the rest"
    return "\n".join([*lines, "", f"User tasks: {', '.join(users)}{stopped}.", "", measured(results, files[0])])


def round_split(files: Sequence[str]) -> str:
    """Where a round's client CPU goes: the wire, the loop alone and interleaved (`benchmarks.round_split`)."""
    results = load(files[0])
    cpu = results["cpu_us"]
    rows = [
        ("the wire: one request built, sent, read and validated", "wire: OpenAICaller.complete", "wire: bare httpx2"),
        ("the whole round (the scenario's runs, per round)", "round: run_tool_loop", "round: bare httpx2 loop"),
        ("the loop alone, over the completions recorded", "loop alone: recorded completions", None),
        ("the loop beside the floor's request, interleaved", "loop beside the floor's request", None),
    ]
    ratios = {"wire: OpenAICaller.complete": results["wire_x_floor"], "round: run_tool_loop": results["round_x_floor"]}
    lines = [f"| part | agentkit, CPU µs | bare `httpx2`, CPU µs | {X} bare `httpx2` |", "|---|---|---|---|"]
    for label, mine, floor in rows:
        cells = [label, _num(cpu[mine], 1), "-" if floor is None else _num(cpu[floor], 1)]
        cells.append(_num(ratios[mine]) if mine in ratios else "-")
        lines.append("| " + " | ".join(cells) + " |")
    summary = (
        f"The round less the wire: {_num(results['loop_in_place_us'], 1)} µs. The loop alone plus the floor's "
        f"request, measured apart: {_num(results['apart_us'], 1)} µs; interleaved, {_num(results['sharing_us'], 1)} "
        f"µs more. {results['repeats']} interleaved repeats of {results['requests_per_sample']} requests or "
        f"{results['runs_per_sample']} runs."
    )
    stamp = {key: value for key, value in results.items() if key != "repeats"}  # said in the summary
    return "\n".join([*lines, "", summary, "", measured(stamp, files[0])])


RENDERERS: dict[str, Callable[[Sequence[str]], str]] = {
    "contenders": contenders,
    "contenders-short": contenders_short,
    "targets": targets,
    "change": change,
    "loop-alone": loop_alone,
    "imports": imports,
    "fake-server": fake_server,
    "sse-first-event": sse_first_event,
    "streaming": streaming,
    "round-split": round_split,
    "prompt-tokens": prompt_tokens,
    "schema-bytes": schema_bytes,
    "journal-checkpoint": journal_checkpoint,
    "long-run": long_run,
    "otel-metrics": otel_metrics,
    "grounded": grounded,
    "multi-call": multi_call,
    "temporal-rounds": temporal_rounds,
    "temporal-change": temporal_change,
    "journal-workers": journal_workers,
    "anthropic-cache": anthropic_cache,
    "injection": injection,
    "injection-local": injection_local,
}


def render(block: Block) -> str:
    """What ``block`` holds when it is up to date: its renderer's text of its results files."""
    renderer = RENDERERS.get(block.kind)
    if renderer is None:
        raise ValueError(f"{block.page}: no renderer for figures of kind {block.kind!r}; one of {sorted(RENDERERS)}")
    return renderer(block.files).rstrip("\n") + "\n"


def stale(page: str) -> list[Block]:
    """The blocks of ``page`` whose text is not what their results files give."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [block for block in blocks(page, text) if block.body != render(block)]


def publish(page: str) -> bool:
    """Rewrite every block of ``page`` from its results files; whether anything changed."""
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    rebuilt, last = [], 0
    for block in blocks(page, text):
        start, end = block.span
        rebuilt += [text[last:start], render(block)]
        last = end
    rebuilt.append(text[last:])
    new = "".join(rebuilt)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks (exit 1 when any)")
    options = parser.parse_args(argv)
    if options.check:
        found = [block for page in PAGES for block in stale(page)]
        for block in found:
            print(f"{block.page}: the {block.kind} figures differ from {', '.join(block.files)}", file=sys.stderr)
        return 1 if found else 0
    for page in PAGES:
        print(f"{page}: {'rewritten' if publish(page) else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
