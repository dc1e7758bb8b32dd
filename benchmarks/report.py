"""Summaries of the raw samples, the targets they are held to, and the markdown table."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks import contenders, scenario

WALL_TARGET = 1.25
"""agentkit's wall time per round, at most this many times the floor's."""
CPU_TARGET = 1.3
"""agentkit's client CPU time per round, at most this many times the floor's."""
HTTP_TARGET = 1.5
"""agentkit's wall and client CPU time per round, at most this many times the bare-httpx floor's."""
HTTP_TARGETS = {"agentkit-json_schema": 1.3, "agentkit-tools": 1.4}
"""Tighter bare-httpx targets for the default mode and the tools mode (``HTTP_TARGET`` for the others)."""
BYTES_TARGET = 1.1
"""The default mode's request bytes per round, at most this many times the raw openai loop's."""
RSS_TARGET = 1.3
"""agentkit's peak RSS with 1,000 concurrent runs, at most this many times the floor's."""
IMPORT_TARGET = 1.5
"""``import agentkit``, at most this many times ``import pydantic`` (the BaseModel import, see README)."""
PYDANTIC_BASELINE = "import pydantic"
"""The baseline the import target names."""
PYDANTIC_MODEL = "pydantic with one model defined"
"""The baseline a library with any model at import time pays (pydantic's schema machinery and plugin scan)."""


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Median, min, max and count of ``values``."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _good(samples: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [sample for sample in samples if "error" not in sample and sample["check"]["ok"]]


def _per_round(sample: Mapping[str, Any], key: str) -> float:
    """Milliseconds per round from a sample's median run (robust to bursts of load on a shared host)."""
    return float(sample[key]) / scenario.ROUNDS * 1e3


def _paired_ratios(samples: Sequence[Mapping[str, Any]], floor: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """Per repeat, this contender's median run over the floor's in the same repeat."""
    by_repeat = {sample["repeat"]: sample for sample in _good(floor)}
    ratios = []
    for sample in _good(samples):
        base = by_repeat.get(sample["repeat"])
        if base is not None and base[key] > 0:
            ratios.append(sample[key] / base[key])
    return ratios


def _sequential(
    samples: Sequence[Mapping[str, Any]], floor: Sequence[Mapping[str, Any]], http_floor: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    good = _good(samples)
    return {
        "samples": len(samples),
        "correct_samples": len(good),
        "wall_ms_per_round": spread([_per_round(s, "run_wall_median") for s in good]),
        "cpu_ms_per_round": spread([_per_round(s, "run_cpu_median") for s in good]),
        "wall_ratio": spread(_paired_ratios(samples, floor, "run_wall_median")),
        "cpu_ratio": spread(_paired_ratios(samples, floor, "run_cpu_median")),
        "wall_ratio_http": spread(_paired_ratios(samples, http_floor, "run_wall_median")),
        "cpu_ratio_http": spread(_paired_ratios(samples, http_floor, "run_cpu_median")),
        "server_cpu_ms_per_round": spread(
            [s["server"]["cpu_seconds"] / s["server"]["requests"] * 1e3 for s in good if s["server"]["requests"]]
        ),
        "request_body_bytes_per_round": spread(
            [s["server"]["body_bytes"] / s["server"]["requests"] for s in good if s["server"]["requests"]]
        ),
        "request_header_bytes_per_round": spread(
            [s["server"]["header_bytes"] / s["server"]["requests"] for s in good if s["server"]["requests"]]
        ),
    }


def _concurrent(sample: Mapping[str, Any] | None, floor: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if sample is None:
        return None
    if "error" in sample:
        return {"error": sample["error"]}
    peak = sample["peak_rss_kib"] / 1024
    base = floor["peak_rss_kib"] / 1024 if floor and "error" not in floor else None
    return {
        "runs": sample["runs"],
        "wall_s": sample["wall"],
        "cpu_s": sample["cpu"],
        "errors": sample["errors"],
        "first_error": sample["first_error"],
        "correct": sample["check"]["ok"],
        "correct_runs": sample["check"]["correct_runs"],
        "rss_before_mib": sample["rss_before_kib"] / 1024,
        "peak_rss_mib": peak,
        "peak_rss_ratio": peak / base if base else None,
    }


def _imports(samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    return {
        label: {
            "ms": spread([s["seconds"] * 1e3 for s in runs]),
            "loaded_forbidden": sorted({m for s in runs for m in s["loaded"]}),
        }
        for label, runs in samples.items()
    }


def summarise(
    options: Mapping[str, Any],
    sequential: Mapping[str, Sequence[Mapping[str, Any]]],
    concurrent: Mapping[str, Mapping[str, Any]],
    imports: Mapping[str, Sequence[Mapping[str, Any]]],
    env: Mapping[str, Any],
) -> dict[str, Any]:
    """Figures per contender (medians with min and max), ratios to the floor, and the raw samples."""
    floor_seq = sequential.get(contenders.FLOOR, [])
    floor_conc = concurrent.get(contenders.FLOOR)
    http_seq = sequential.get(contenders.HTTP_FLOOR, [])
    figures = {}
    for name in options["contenders"]:
        spec = contenders.spec(name)
        figures[name] = {
            "note": spec.note,
            "peer": spec.peer,
            "import_statement": spec.imports,
            **_sequential(sequential.get(name, []), floor_seq, http_seq),
            "concurrent": _concurrent(concurrent.get(name), floor_conc),
        }
    return {
        "environment": dict(env),
        "options": dict(options),
        "floor": contenders.FLOOR,
        "http_floor": contenders.HTTP_FLOOR,
        "contenders": figures,
        "imports": _imports(imports),
        "raw": {"sequential": sequential, "concurrent": concurrent, "imports": imports},
    }


def _median(figure: Mapping[str, Any] | None) -> float | None:
    return None if figure is None else figure.get("median")


def _target(name: str, value: float | None, limit: str, met: bool | None, note: str = "") -> dict[str, Any]:
    return {"target": name, "value": value, "limit": limit, "met": met, "note": note}


def _rivals(figures: Mapping[str, Any]) -> dict[str, float]:
    """Median wall time per round of every contender that is neither agentkit nor a raw floor."""
    rivals = {}
    for name, figure in figures.items():
        wall = _median(figure["wall_ms_per_round"])
        if not name.startswith(("agentkit-", "raw-")) and wall is not None:
            rivals[name] = wall
    return rivals


def _contender_targets(name: str, figure: Mapping[str, Any], rivals: Mapping[str, float]) -> list[dict[str, Any]]:
    wall_ratio, cpu_ratio = _median(figure["wall_ratio"]), _median(figure["cpu_ratio"])
    wall = _median(figure["wall_ms_per_round"])
    fastest = min(rivals.items(), key=lambda item: item[1]) if rivals else None
    found = [
        _target(
            f"{name}: wall/round vs floor",
            wall_ratio,
            f"<= {WALL_TARGET}x",
            None if wall_ratio is None else wall_ratio <= WALL_TARGET,
        ),
        _target(
            f"{name}: wall/round below every other contender",
            wall,
            f"< {fastest[0]} ({fastest[1]:.3f} ms)" if fastest else "no rival measured",
            None if wall is None or fastest is None else wall < fastest[1],
        ),
        _target(
            f"{name}: client CPU/round vs floor",
            cpu_ratio,
            f"<= {CPU_TARGET}x",
            None if cpu_ratio is None else cpu_ratio <= CPU_TARGET,
        ),
    ]
    limit = HTTP_TARGETS.get(name, HTTP_TARGET)
    for key, label in (("wall_ratio_http", "wall"), ("cpu_ratio_http", "client CPU")):
        ratio = _median(figure.get(key))
        found.append(
            _target(
                f"{name}: {label}/round vs bare-httpx floor",
                ratio,
                f"<= {limit}x",
                None if ratio is None else ratio <= limit,
            )
        )
    conc = figure["concurrent"]
    if conc is not None and "error" not in conc:
        found.append(
            _target(
                f"{name}: {conc['runs']:,} concurrent runs, errors",
                conc["errors"],
                "0",
                conc["errors"] == 0 and conc["correct"],
            )
        )
        ratio = conc["peak_rss_ratio"]
        found.append(
            _target(
                f"{name}: peak RSS vs floor", ratio, f"<= {RSS_TARGET}x", None if ratio is None else ratio <= RSS_TARGET
            )
        )
    return found


def targets(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its measured value and whether it was met (``None``: not measured)."""
    figures = summary["contenders"]
    rivals = _rivals(figures)
    found: list[dict[str, Any]] = []
    for name, figure in figures.items():
        if name.startswith("agentkit-"):
            found.extend(_contender_targets(name, figure, rivals))
    ours, raw = figures.get("agentkit-json_schema"), figures.get(contenders.FLOOR)
    if ours is not None and raw is not None:
        mine, theirs = _median(ours["request_body_bytes_per_round"]), _median(raw["request_body_bytes_per_round"])
        ratio = None if mine is None or not theirs else mine / theirs
        met = None if ratio is None else ratio <= BYTES_TARGET
        found.append(_target("agentkit-json_schema: request bytes/round vs floor", ratio, f"<= {BYTES_TARGET}x", met))
    imports = summary["imports"]
    core, base = imports.get("import agentkit"), imports.get(PYDANTIC_BASELINE)
    if core is not None:
        heavy = core["loaded_forbidden"]
        found.append(
            _target("import agentkit loads no openai/instructor/extra", None, "none", not heavy, ", ".join(heavy))
        )
    for label in (PYDANTIC_BASELINE, PYDANTIC_MODEL):
        base = imports.get(label)
        if core is not None and base is not None and base["ms"]["median"]:
            ratio = core["ms"]["median"] / base["ms"]["median"]
            found.append(_target(f"import agentkit vs {label}", ratio, f"< {IMPORT_TARGET}x", ratio < IMPORT_TARGET))
    return found


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cell(figure: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not figure or figure.get("median") is None:
        return "-"
    return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}-{figure['max']:.{digits}f})"


def _headline_row(name: str, figure: Mapping[str, Any], imports: Mapping[str, Any]) -> str:
    conc = figure["concurrent"] or {}
    imported = imports.get(figure["import_statement"], {}).get("ms")
    checked = f"{figure['correct_samples']}/{figure['samples']}"
    if "error" in conc:
        conc_cells = ["failed", "-", "-", "-"]
    else:
        conc_cells = [
            _fmt(conc.get("wall_s")),
            _fmt(conc.get("peak_rss_mib"), 0),
            _fmt(conc.get("peak_rss_ratio")),
            str(conc.get("errors", "-")),
        ]
    cells = [
        f"`{name}`",
        _cell(figure["wall_ms_per_round"], 3),
        _cell(figure["wall_ratio"]),
        _cell(figure.get("wall_ratio_http")),
        _cell(figure["cpu_ms_per_round"], 3),
        _cell(figure["cpu_ratio"]),
        _cell(figure.get("cpu_ratio_http")),
        _fmt(_median(figure["server_cpu_ms_per_round"]), 3),
        _fmt(_median(figure["request_body_bytes_per_round"]), 0),
        *conc_cells,
        _fmt(_median(imported), 0),
        checked,
    ]
    return "| " + " | ".join(cells) + " |"


HEADLINE_HEADER = (
    "| contender | wall ms/round | x openai floor | x httpx floor | client CPU ms/round | x openai floor "
    "| x httpx floor | server CPU ms/round | request bytes/round "
    "| concurrent: wall s | peak RSS MiB | x openai floor | errors | cold import ms | samples correct |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def headline(summary: Mapping[str, Any]) -> str:
    """The main table: one row per contender, sorted by median wall time per round."""
    figures = summary["contenders"]
    order = sorted(figures, key=lambda name: _median(figures[name]["wall_ms_per_round"]) or float("inf"))
    rows = [_headline_row(name, figures[name], summary["imports"]) for name in order]
    return "\n".join([HEADLINE_HEADER, *rows])


def _micro_table(micro: Mapping[str, Any] | None) -> str:
    if not micro:
        return "(not measured)"
    lines = [
        "| rounds per run | agentkit us/round | hand-written loop us/round | loop overhead us/round |",
        "|---|---|---|---|",
    ]
    for rounds, figure in micro.items():
        low, high = figure["agentkit_spread"]
        lines.append(
            f"| {rounds} | {figure['agentkit_us_per_round']:.1f} ({low:.1f}-{high:.1f}) "
            f"| {figure['baseline_us_per_round']:.1f} | {figure['overhead_us_per_round']:.1f} |"
        )
    return "\n".join(lines)


def _imports_table(imports: Mapping[str, Any]) -> str:
    lines = ["| import | cold ms | forbidden modules loaded |", "|---|---|---|"]
    for label, figure in sorted(imports.items(), key=lambda item: item[1]["ms"]["median"] or 0):
        lines.append(f"| `{label}` | {_cell(figure['ms'], 0)} | {', '.join(figure['loaded_forbidden']) or '-'} |")
    return "\n".join(lines)


def _targets_table(found: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| target | measured | limit | met |", "|---|---|---|---|"]
    for target in found:
        met = {True: "yes", False: "**no**", None: "not measured"}[target["met"]]
        value = target["note"] if target["value"] is None else _fmt(target["value"], 3)
        lines.append(f"| {target['target']} | {value or '-'} | {target['limit']} | {met} |")
    return "\n".join(lines)


def _import_profile_table(profile: Mapping[str, float] | None) -> str:
    if not profile:
        return "(not measured)"
    lines = ["| package | self ms (-X importtime) |", "|---|---|"]
    lines += [f"| {package} | {ms:.1f} |" for package, ms in list(profile.items())[:12]]
    return "\n".join(lines)


def markdown(summary: Mapping[str, Any]) -> str:
    """The whole report as markdown."""
    env, options = summary["environment"], summary["options"]
    versions = ", ".join(f"{name} {version}" for name, version in env["versions"].items())
    failures = summary.get("failures") or []
    parts = [
        f"# agentkit benchmark, {env['date']}",
        "",
        f"Machine: {env['machine']}; Python {env['python']}; commit {env['commit']}; "
        f"load average {_fmt(env['load_before'][0])} before, {_fmt(env.get('load_after', [None])[0])} after; "
        f"{_fmt(env.get('seconds'), 0)} s in all.",
        f"Command: `{options['command']}` ({options['repeats']} interleaved repeats x {options['runs']} runs "
        f"x 4 rounds per contender, {options['concurrent']} concurrent runs once per contender).",
        f"Versions: {versions}.",
        "",
        "Each sample's figure is its median run; the table gives the median over the repeats, (min-max) "
        f"in brackets; `x openai floor` and `x httpx floor` are the medians of per-repeat ratios to "
        f"`{summary['floor']}` and `{summary.get('http_floor')}`. Every sample "
        "passed the server-side check (3 searches + 1 final answer per run) unless the last column says otherwise.",
        "",
        headline(summary),
        "",
        "## Targets",
        "",
        _targets_table(summary.get("targets") or []),
        "",
        "## The loop alone (scripted caller, no HTTP)",
        "",
        _micro_table(summary.get("micro")),
        "",
        "## Cold imports (fresh interpreter, median of repeats)",
        "",
        _imports_table(summary["imports"]),
        "",
        "Where `import agentkit` spends its time (self time per top-level package, one `-X importtime` run):",
        "",
        _import_profile_table(summary.get("import_profile")),
    ]
    if failures:
        parts += ["", "## Failed samples", "", *[f"- {failure}" for failure in failures]]
    parts += ["", "## Contenders", "", *[f"- `{n}`: {f['note']}" for n, f in summary["contenders"].items()], ""]
    return "\n".join(parts)
