"""The documentation's figures: each measured one from a results file, none typed by hand.

Every page (``publish.PAGES``: the README, ``benchmarks/README.md`` and ``docs/**/*.md``) is
checked: outside its generated figures blocks a page may write a time, size, ratio, share or
fraction only where ``STATED`` lists it as a stated value (a default, a limit, a target, a
download's size, a version, an example's fixed output), with the reason it is not a measurement.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import publish

RESULTS = publish.ROOT / "benchmarks" / "results"
HEADLINE = ("README.md", "docs/performance.md")
"""The pages that quote the latest run of each benchmark."""
LATEST = {
    "contenders": "benchmarks/results/latest.json",
    "contenders-short": "benchmarks/results/latest.json",
    "targets": "benchmarks/results/latest.json",
    "loop-alone": "benchmarks/results/latest.json",
    "imports": "benchmarks/results/latest.json",
    "fake-server": "benchmarks/results/fake-server-latest.json",
    "prompt-tokens": "benchmarks/results/prompt-tokens-latest.json",
    "round-split": "benchmarks/results/round-split-2026-12-07.json",
}
"""The results file each kind of block on a headline page must quote: the latest of its benchmark."""
BEFORE_AND_AFTER = {
    "change": "benchmarks/results/latest.json",
    "schema-bytes": "benchmarks/results/schema-bytes-latest.json",
}
"""The kinds of block that set a dated run before a change against the latest after it: the latest each quotes."""
FIGURE = re.compile(
    r"\d(?:[\d,.]*\d)?\s?(?:ms|µs|us|s|seconds?|minutes?|hours?|MiB|KiB|GiB|MB|KB|kB|GB|bytes|times|\u00d7|x|%)(?![\w=])"
    r"|\u00d7\s?\d"
    r"|(?<![\w/.])\d+/\d+(?![\w/])"
)
"""A measured figure: a number with a unit of time, size or ratio, a share, or a fraction such as 17/24
(a count such as "4 rounds" is not one)."""

NOT_YET_CHECKED: set[str] = set()
"""Pages left out of the check for now (none: a page is covered from the day it exists)."""
CHECKED = tuple(page for page in publish.PAGES if page not in NOT_YET_CHECKED)
"""The pages whose prose is held to ``STATED``."""

_DOWNLOAD = "a download's size (the wheels' sizes on the package index), not a measurement"
_ON_DISK = (
    "the local extra's disk once the model is joined: the chunks (491 MB) stay installed beside the joined "
    "file (491 MB), with the runtime as installed (106 MB, from its wheel's listing)"
)
STATED: dict[str, dict[str, str]] = {
    "README.md": {"510 MB": _DOWNLOAD, "34 MB": _DOWNLOAD, "491 MB": _DOWNLOAD, "1.1 GB": _ON_DISK},
    "benchmarks/README.md": {
        **dict.fromkeys(
            ("1.25x", "1.3x", "1.4x", "1.5x", "1.1x", "1.05x", "0.6x", "2x"), "a target (the Targets table)"
        ),
        "1.15x": "issue 28's target for the journal's per-round cost",
        "0.5 s": "the workers' poll interval, a setting",
        "5 ms": "what the benchmark's tool takes, a setting",
        "5 s": "the benchmark's lease, a setting",
        "0.2 s": "linger's default",
    },
    "docs/getting-started.md": {"510 MB": _DOWNLOAD, "1.1 GB": _ON_DISK},
    "docs/human-in-the-loop.md": {"3/4": "the command's output: round 3 of the run's ceiling of 4"},
    "docs/temporal.md": {
        "5\nminutes": "the continue-as-new wait's timeout, a default",
        "5 minutes": "ActivityPolicy.tool_timeout's default",
        "2 minutes": "ActivityPolicy.model_timeout's default",
        "10 s": "Temporal's workflow task timeout and ActivityPolicy.heartbeat, defaults",
        "8 s": "how often the SDK completes a workflow task while local activities run (its heartbeat, 0.8 of 10 s)",
        "5 s": "the sticky queue's schedule-to-start timeout, and the grace past LoopConfig.tool_timeout",
        "50 ms": "the transfer queue's poll interval at its default rate of 20 a second, a setting",
        "1,000 times": "history.transferProcessorMaxPollRPS=1000, a setting",
        "2 MiB": "Temporal's default limit.blobSize.error, and ActivityPolicy.payload_limit's default",
        "16 KiB": "what the activities keep of a payload for what surrounds a batch or a reply, a constant",
        "4 MiB": "the gRPC message limit of Temporal's server, a constant",
    },
    "docs/journal.md": {
        "30 s": "defaults: SQLite's busy timeout, a lease, the poll, POOL_TIMEOUT_S, LOCK_TIMEOUT_S",
        "60 s": "STATEMENT_TIMEOUT_S, a setting",
        "5 s": "the ceiling of the outcome write's back-off, a setting",
        "5s": "a lock_timeout in an example DSN",
    },
    "docs/local-model.md": {
        "510 MB": _DOWNLOAD,
        "34 MB": _DOWNLOAD,
        "491 MB": _DOWNLOAD,
        "1.1 GB": _ON_DISK,
        "491,400,064 bytes": "the pinned model file's size, checked with its SHA-256",
        "1,117,320,768 bytes": "the pinned larger model file's size, checked with its SHA-256",
        "1.12 GB": "the larger model's download",
        "50 MiB": "the chunk packages' size as published",
        "16 MB": "the last chunk package's size as published",
    },
    "docs/mcp.md": {"60 s": "the connection's default timeout", "30 s": "connect_timeout's default"},
    "docs/observability.md": {"0.01 s": "the duration histogram's first bucket", "81.92 s": "its last bucket"},
    "docs/providers.md": {
        "0.2 s": "the trickling fake reply's interval, a test setting",
        "2 s": "the example's timeout",
        "2.0s": "the error message that timeout gives",
        "120 s": "DEFAULT_TIMEOUT",
        "1.3x": "a target (issue 49: a streamed round's client CPU against a non-streamed one)",
    },
    "docs/testing.md": {
        "10%": "cost_tolerance's default",
        # The executed example's printed report: a scripted model, so the same figures every run.
        **dict.fromkeys(("2/2", "0/2", "2/4", "1/2", "50%", "100%", "0%"), "the scripted example's printed report"),
    },
}
"""Per page, the figures it may write outside a figures block, each with why it is stated, not measured."""

PROVENANCE_GAPS = {
    "journal-checkpoint-": "benchmarks/journal_checkpoint.py wrote no date, machine or load before 2026-12-02-b; "
    "the blocks of those files say so",
}
"""Results files (by name prefix) known to record no environment, and why that is not hidden."""


def page_text(page: str) -> str:
    return (publish.ROOT / page).read_text(encoding="utf-8")


def typed_by_hand(page: str, text: str) -> list[str]:
    """The figures ``text`` (the page ``page``) writes outside its figures blocks that ``STATED`` does not list."""
    allowed = STATED.get(page, {})
    return [found.group() for found in FIGURE.finditer(publish.BLOCK.sub("", text)) if found.group() not in allowed]


def pages_with_blocks() -> list[str]:
    return [page for page in publish.PAGES if publish.blocks(page, page_text(page))]


def test_every_page_of_the_documentation_is_checked() -> None:
    """The README, benchmarks/README.md and every docs page are checked, but for the pages named as not yet."""
    docs = {path.relative_to(publish.ROOT).as_posix() for path in (publish.ROOT / "docs").rglob("*.md")}
    assert set(publish.PAGES) == {"README.md", "benchmarks/README.md", *docs}
    assert set(publish.PAGES) >= NOT_YET_CHECKED
    assert set(STATED) <= set(CHECKED)


@pytest.mark.parametrize("page", HEADLINE)
def test_the_headline_pages_publish_figures(page: str) -> None:
    """The README and docs/performance.md each carry figures blocks."""
    assert publish.blocks(page, page_text(page)), f"{page} publishes no figures"


@pytest.mark.parametrize("page", pages_with_blocks())
def test_every_figures_block_is_what_its_results_file_gives(page: str) -> None:
    """Each block holds exactly its renderer's text of the results file it names (python -m benchmarks.publish)."""
    stale = publish.stale(page)
    assert not stale, f"{page}: stale figures {[b.kind for b in stale]}; run python -m benchmarks.publish"


@pytest.mark.parametrize("page", HEADLINE)
def test_the_pages_quote_the_latest_results(page: str) -> None:
    """Every block of a kind that has a latest results file quotes that file (the before side of a change aside)."""
    for block in publish.blocks(page, page_text(page)):
        if block.kind in LATEST:
            assert block.files == (LATEST[block.kind],), (page, block.kind, block.files)
        else:
            assert block.kind in BEFORE_AND_AFTER, (page, block.kind)
            assert block.files[-1] == BEFORE_AND_AFTER[block.kind]


def test_latest_is_the_newest_dated_run_of_the_benchmark() -> None:
    """latest.json is the dated results file of its own date, and no dated run of the benchmark is newer."""
    latest = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))
    day = latest["environment"]["date"][:10]
    assert json.loads((RESULTS / f"{day}.json").read_text(encoding="utf-8")) == latest
    dated = sorted(path.stem for path in RESULTS.glob("????-??-??.json"))
    assert dated[-1] == day
    for kind in ("fake-server", "prompt-tokens", "schema-bytes"):
        other = json.loads((RESULTS / f"{kind}-latest.json").read_text(encoding="utf-8"))
        assert (RESULTS / f"{kind}-{other['environment']['date'][:10]}.json").exists()


def series(path: str) -> tuple[str, str]:
    """A dated results file's benchmark (its name up to the date) and the rest of its name (the date on)."""
    found = re.fullmatch(r"(?P<series>.+?)-(?P<dated>\d{4}-\d\d-\d\d.*)\.json", Path(path).name)
    assert found is not None, f"{path} is not named after its benchmark and date"
    return found["series"], found["dated"]


@pytest.mark.parametrize("page", [page for page in CHECKED if page.startswith("docs/")])
def test_the_docs_pages_quote_the_newest_run_of_each_benchmark(page: str) -> None:
    """A docs page's block quotes the newest results file of its benchmark (benchmarks/README.md keeps the history)."""
    for block in publish.blocks(page, page_text(page)):
        if block.kind in LATEST or block.kind in BEFORE_AND_AFTER:
            continue
        for file in block.files:
            name, dated = series(file)
            newest = max(
                series(other.name)[1] for other in RESULTS.glob(f"{name}-*.json") if series(other.name)[0] == name
            )
            assert dated == newest, f"{page}: the {block.kind} block quotes {file}, not the newest {name}-{newest}.json"


def quoted_files() -> list[str]:
    return sorted({file for page in publish.PAGES for b in publish.blocks(page, page_text(page)) for file in b.files})


@pytest.mark.parametrize("path", quoted_files())
def test_each_quoted_results_file_records_when_where_and_under_what_load(path: str) -> None:
    """A results file carries the date, the machine and its load (or was written before its benchmark recorded them,
    a known gap: then it has none of them, and its block says so)."""
    results = json.loads((publish.ROOT / path).read_text(encoding="utf-8"))
    gap = any(Path(path).name.startswith(prefix) for prefix in PROVENANCE_GAPS)
    if gap and not {"environment", "date", "machine"} & set(results):
        return
    environment = results.get("environment")
    if environment is None:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", results["date"])
        assert results["machine"]
        assert len(results.get("loadavg", ())) == 3 or "load average" in results["machine"]
        return
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", environment["date"])
    assert environment["machine"]
    assert len(environment["load_before"]) == 3
    assert len(environment["load_after"]) == 3


@pytest.mark.parametrize("page", CHECKED)
def test_no_figure_in_the_documentation_is_typed_by_hand(page: str) -> None:
    """Outside the generated blocks a page writes no time, size, ratio, share or fraction but the stated ones."""
    typed = typed_by_hand(page, page_text(page))
    assert not typed, f"{page}: figures typed by hand (put them in a figures block, or list a stated one): {typed}"


@pytest.mark.parametrize("page", sorted(STATED))
def test_each_stated_figure_is_on_its_page_with_a_reason(page: str) -> None:
    """A stated figure is still written on its page, outside the blocks, and says why it is not measured."""
    prose = {found.group() for found in FIGURE.finditer(publish.BLOCK.sub("", page_text(page)))}
    for figure, reason in STATED[page].items():
        assert figure in prose, f"{page} no longer writes {figure!r}: drop it from STATED"
        assert reason.strip(), (page, figure)


def test_a_figure_typed_by_hand_is_caught() -> None:
    """The check would see the figures a page used to type by hand."""
    typed = ("3.40 ms", "1.38x", "\u00d7 2", "1.2\u00d7", "338 MiB", "57 µs", "2,271 bytes", "40 ms", "27%", "17/24")
    for figure in (*typed, "45 seconds", "2 minutes", "1.12 GB", "17 times"):
        assert FIGURE.search(f"it took {figure} per round"), figure
    for count in ("4 model round trips", "1,000 concurrent runs", "three searches", "Python 3.11", "15 repeats"):
        assert not FIGURE.search(count), count
    for path in ("/v1/chat/completions", "2026-12-01", "docs/journal.md", "MCP SDK 2.x", "attempt=1 seconds=0.0001"):
        assert not FIGURE.search(path), path


def test_a_measured_figure_typed_into_a_page_outside_a_block_is_caught() -> None:
    """A figure typed into a checked page is reported, even one another page states; inside a block it is not."""
    page = "docs/journal.md"
    text = page_text(page)
    assert typed_by_hand(page, text) == []
    other = next(figure for figures in STATED.values() for figure in figures if figure not in STATED.get(page, {}))
    typed = f"\nWritten at once a round costs 1.1x, 3.40 ms, and {other}: 21/24 runs.\n"
    assert typed_by_hand(page, text + typed) == ["1.1x", "3.40 ms", other, "21/24"]
    block = f"<!-- figures: journal-checkpoint from benchmarks/results/x.json -->{typed}<!-- end figures -->\n"
    assert typed_by_hand(page, text + "\n" + block) == []


def test_publish_rewrites_a_stale_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose text is not its results file's is rewritten from it, and the rest of the page is kept."""
    page = tmp_path / "page.md"
    opening = "<!-- figures: loop-alone from benchmarks/results/latest.json -->"
    page.write_text(f"intro\n{opening}\nold figures\n<!-- end figures -->\nend\n", encoding="utf-8")
    monkeypatch.setattr(publish, "ROOT", tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "latest.json").write_text(
        (RESULTS / "latest.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    assert publish.stale("page.md")
    assert publish.publish("page.md")
    assert not publish.stale("page.md")
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"intro\n{opening}\n")
    assert text.endswith("<!-- end figures -->\nend\n")
    assert "old figures" not in text


def test_a_temporal_rounds_block_has_a_row_per_results_file() -> None:
    """``temporal-rounds from A and B`` names both files, and its table has a row for each, in that order."""
    files = sorted(path.relative_to(publish.ROOT).as_posix() for path in RESULTS.glob("temporal-rounds-*.json"))[:2]
    opening = f"<!-- figures: temporal-rounds from {files[0]} and {files[1]} -->\n"
    [block] = publish.blocks("page.md", f"{opening}<!-- end figures -->")
    assert block.files == tuple(files)
    rows = [line for line in publish.render(block).splitlines() if line.startswith("| `temporal-rounds-")]
    assert [row.split("`")[1] for row in rows] == [Path(file).name for file in files]


def test_a_block_of_an_unknown_kind_is_refused() -> None:
    """A block whose kind has no renderer fails with the kinds there are, instead of publishing nothing."""
    [block] = publish.blocks("page.md", "<!-- figures: nonsense from a.json -->\n<!-- end figures -->")
    with pytest.raises(ValueError, match="no renderer for figures of kind 'nonsense'; one of"):
        publish.render(block)
