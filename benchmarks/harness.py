"""The benchmark run: every figure for every contender, in one invocation, interleaved.

``python -m benchmarks`` (or ``bash benchmarks/run.sh``, which first builds the peers' venv):

1. starts the lean server (``benchmarks.server``) in its own process;
2. cold import times: a fresh interpreter per sample, every target once per repeat, shuffled;
3. sequential samples: one worker process per contender (``benchmarks.worker --mode serve``);
   each repeat asks every worker for one sample, in a shuffled order, so drifting machine load
   hits every contender alike; a sample's figure is the median over its runs, ratios to the floor
   are taken within a repeat, and the median over the repeats is reported;
4. 1,000 runs started at once, once per contender (wall time, peak RSS, errors);
5. the scripted-caller microbenchmark of the loop itself (``benchmarks.microbench``);
6. writes ``results/<date>.json`` and ``.md``, plus ``latest.json`` and ``latest.md``.

Every sample is checked server-side (3 searches and 1 final answer per run, nothing more); a
sample that fails the check counts as failed and none of its figures are used.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import contenders, report

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FORBIDDEN_IN_CORE = ("openai", "instructor", "httpx", "httpx2", "opentelemetry", "psycopg", "xllamacpp", "jinja2")
VERSIONED = (
    "agentkit",
    "openai",
    "instructor",
    "pydantic",
    "pydantic-core",
    "httpx2",
    "pydantic-ai-slim",
    "openai-agents",
    "langgraph",
    "langchain-openai",
    "langchain-core",
)
IMPORT_CODE = """\
import sys, time
started = time.perf_counter()
{statement}
seconds = time.perf_counter() - started
print(seconds, ",".join(m for m in {forbidden!r} if m in sys.modules))
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    """What one benchmark invocation measures."""

    contenders: tuple[str, ...]
    repeats: int = 15
    runs: int = 20
    warmup: int = 2
    concurrent: int = 1000
    import_repeats: int = 7
    micro: bool = True
    micro_repeats: int = 5
    out: Path = RESULTS
    seed: int = 0
    command: str = ""
    profile: bool = False
    label: str = ""
    """Names the results ``<date>-<label>.json`` and ``.md``, and leaves ``latest`` as it is (a before or after
    side of a change, measured with fewer contenders than the published figures)."""


@dataclass(kw_only=True)
class Collected:
    """Raw samples, as measured."""

    sequential: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    concurrent: dict[str, dict[str, Any]] = field(default_factory=dict)
    imports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    import_profile: dict[str, float] = field(default_factory=dict)
    micro: dict[str, Any] | None = None
    failures: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def publish(report: dict[str, Any], out: Path | None, name: str, markdown: Callable[[dict[str, Any]], str]) -> None:
    """Stamp a small benchmark's ``report`` with the date, the machine and its load, print it as one JSON
    object and, with ``out``, write it there as ``<name>-<date>.json`` and its table as ``.md``."""
    report |= {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = out / f"{name}-{report['date']}"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        stem.with_suffix(".md").write_text(markdown(report))


@contextlib.contextmanager
def serving() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The benchmark server in its own process, for the duration of the block."""
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks.server"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            port = server.stdout.readline().strip()
            if not port.isdigit():
                raise RuntimeError(f"benchmark server did not start (said {port!r}); run python -m benchmarks.server")
            yield f"http://127.0.0.1:{port}/v1", server
        finally:
            server.terminate()
            server.wait(timeout=10)


def worker(args: Sequence[str], timeout: float = 600) -> dict[str, Any]:
    """Run one worker sample; raise with its stderr when it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.worker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    sample: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return sample


def import_targets(names: Sequence[str]) -> dict[str, str]:
    """Label -> import statement: the baselines, ``import agentkit``, and what each contender imports."""
    targets = {
        "import pydantic": "import pydantic",
        "from pydantic import BaseModel": "from pydantic import BaseModel",
        report.PYDANTIC_MODEL: "from pydantic import BaseModel\nclass Model(BaseModel):\n    x: int",
        "import agentkit": "import agentkit",
    }
    for name in names:
        statement = contenders.spec(name).imports
        targets.setdefault(statement, statement)
    return targets


def measure_imports(targets: dict[str, str], repeats: int, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in targets}
    labels = list(targets)
    for repeat in range(repeats + 1):
        rng.shuffle(labels)
        for label in labels:
            code = IMPORT_CODE.format(statement=targets[label].replace("; ", "\n"), forbidden=FORBIDDEN_IN_CORE)
            done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
            seconds, _, loaded = done.stdout.strip().partition(" ")
            if repeat:  # the first pass only warms the bytecode caches
                samples[label].append({"seconds": float(seconds), "loaded": [m for m in loaded.split(",") if m]})
    return samples


def import_profile(statement: str = "import agentkit") -> dict[str, float]:
    """Milliseconds of ``python -X importtime``'s self time per top-level package, largest first."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], cwd=ROOT, capture_output=True, text=True, check=True
    )
    by_package: dict[str, float] = {}
    for line in done.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        package = fields[2].strip().split(".")[0]
        by_package[package] = by_package.get(package, 0.0) + int(fields[0]) / 1e3
    return dict(sorted(by_package.items(), key=lambda item: -item[1]))


@contextlib.contextmanager
def sample_servers(names: Sequence[str], base_url: str) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """One ``worker --mode serve`` process per contender, all started (and imported) before any sample."""
    workers: dict[str, subprocess.Popen[str]] = {}
    with contextlib.ExitStack() as stack:
        for name in names:
            errors = stack.enter_context(tempfile.TemporaryFile("w+"))
            command = [sys.executable, "-m", "benchmarks.worker", "--contender", name, "--base-url", base_url]
            workers[name] = stack.enter_context(
                subprocess.Popen(
                    [*command, "--mode", "serve"],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                )
            )
            workers[name].errors = errors  # type: ignore[attr-defined]  # kept beside the process for failure reports
        for name, process in workers.items():
            assert process.stdout is not None
            if not process.stdout.readline():
                log(f"{name}: worker did not start: {_stderr_tail(process)}")
        try:
            yield workers
        finally:
            for process in workers.values():
                assert process.stdin is not None
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.close()
                process.wait(timeout=30)


def _stderr_tail(process: subprocess.Popen[str]) -> str:
    errors = process.errors  # type: ignore[attr-defined]  # set by sample_servers
    errors.seek(0)
    lines = errors.read().strip().splitlines()
    return lines[-1] if lines else f"exit {process.poll()}"


def one_sample(process: subprocess.Popen[str], runs: int, warmup: int) -> dict[str, Any]:
    """Ask a serving worker for one sequential sample."""
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(f"{runs} {warmup}\n")
        process.stdin.flush()
    except BrokenPipeError:
        return {"error": _stderr_tail(process)}
    line = process.stdout.readline()
    if not line:
        return {"error": _stderr_tail(process)}
    sample: dict[str, Any] = json.loads(line)
    return sample


def measure_sequential(base_url: str, options: Options, rng: random.Random, collected: Collected) -> None:
    order = list(options.contenders)
    with sample_servers(order, base_url) as workers:
        for repeat in range(options.repeats):
            rng.shuffle(order)
            log(f"sequential repeat {repeat + 1}/{options.repeats}: {', '.join(order)}")
            for name in order:
                sample = one_sample(workers[name], options.runs, options.warmup)
                sample["repeat"] = repeat
                collected.sequential.setdefault(name, []).append(sample)
                if "error" in sample or not sample["check"]["ok"]:
                    problem = sample.get("error") or sample["check"]
                    collected.failures.append(f"{name} sequential repeat {repeat + 1}: {problem}")


def measure_concurrent(base_url: str, options: Options, rng: random.Random, collected: Collected) -> None:
    order = list(options.contenders)
    rng.shuffle(order)
    for name in order:
        log(f"{options.concurrent} concurrent runs: {name}")
        args = ["--contender", name, "--base-url", base_url, "--runs", str(options.concurrent), "--mode", "concurrent"]
        try:
            sample = worker(args)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            sample = {"error": str(error)}
        collected.concurrent[name] = sample
        if "error" in sample or sample["errors"] or not sample["check"]["ok"]:
            collected.failures.append(
                f"{name} concurrent: {sample.get('error') or sample.get('first_error') or sample['check']}"
            )


def measure_micro(options: Options) -> dict[str, Any] | None:
    log("scripted-caller microbenchmark")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.microbench", "--repeats", str(options.micro_repeats)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        log(f"microbenchmark failed: {done.stderr.strip()[-500:]}")
        return None
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def environment() -> dict[str, Any]:
    """Date, machine, interpreter, package versions and load, for the record."""
    versions = {}
    for name in VERSIONED:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {cpu}",
        "python": platform.python_version(),
        "versions": versions,
        "commit": commit.stdout.strip() or "unknown",
        "load_before": os.getloadavg(),
    }


def collect(options: Options) -> tuple[Collected, dict[str, Any]]:
    rng = random.Random(options.seed)
    collected = Collected()
    env = environment()
    started = time.perf_counter()
    if options.import_repeats:
        log(f"cold imports, {options.import_repeats} fresh interpreters each")
        collected.imports = measure_imports(import_targets(options.contenders), options.import_repeats, rng)
        collected.import_profile = import_profile()
    with serving() as (base_url, _):
        measure_sequential(base_url, options, rng, collected)
        if options.concurrent:
            measure_concurrent(base_url, options, rng, collected)
    if options.micro:
        collected.micro = measure_micro(options)
    env["load_after"] = os.getloadavg()
    env["seconds"] = time.perf_counter() - started
    return collected, env


def write(summary: dict[str, Any], out: Path, label: str = "") -> list[Path]:
    """Write the JSON and the markdown table, dated and as ``latest`` (with a ``label``: dated and labelled only)."""
    out.mkdir(parents=True, exist_ok=True)
    stamp = summary["environment"]["date"][:10]
    text = json.dumps(summary, indent=2, default=str)
    table = report.markdown(summary)
    if label:
        paths = [out / f"{stamp}-{label}.json", out / f"{stamp}-{label}.md"]
    else:
        paths = [out / f"{stamp}.json", out / f"{stamp}.md", out / "latest.json", out / "latest.md"]
    for path in paths:
        path.write_text(text if path.suffix == ".json" else table, encoding="utf-8")
    return paths


def parse(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--contenders", default="all", help="'all', 'core' (no peers) or a comma-separated list")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved sequential samples per contender")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per sequential sample")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs before each sequential sample")
    parser.add_argument("--concurrent", type=int, default=1000, help="runs started at once (0 to skip)")
    parser.add_argument("--import-repeats", type=int, default=7, help="fresh interpreters per import (0 to skip)")
    parser.add_argument("--micro-repeats", type=int, default=5, help="microbenchmark samples (0 to skip)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--label", default="", help="write <date>-LABEL.json/.md only, leaving latest.* as they are (a before or after)"
    )
    parser.add_argument("--profile", metavar="CONTENDER", help="only profile CONTENDER (cProfile, 300 runs) and exit")
    ns = parser.parse_args(argv)
    if ns.profile:
        return Options(contenders=(ns.profile,), out=ns.out, profile=True)
    available = [spec.name for spec in contenders.SPECS if spec.available()]
    if ns.contenders == "all":
        names = available
    elif ns.contenders == "core":
        names = [spec.name for spec in contenders.SPECS if not spec.peer and spec.name in available]
    else:
        names = [name.strip() for name in ns.contenders.split(",") if name.strip()]
        for name in names:
            if not contenders.spec(name).available():
                parser.error(f"contender {name!r} is not installed here; run bash benchmarks/setup.sh")
    for floor in (contenders.HTTP_FLOOR, contenders.FLOOR):
        if floor not in names and contenders.spec(floor).available():
            names.insert(0, floor)
    return Options(
        contenders=tuple(names),
        repeats=ns.repeats,
        runs=ns.runs,
        warmup=ns.warmup,
        concurrent=ns.concurrent,
        import_repeats=ns.import_repeats,
        micro=ns.micro_repeats > 0,
        micro_repeats=max(ns.micro_repeats, 1),
        out=ns.out,
        seed=ns.seed,
        label=ns.label,
        command=" ".join(["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]),
    )


def profile(name: str, out: Path, runs: int = 300) -> Path:
    """Profile ``runs`` sequential runs of one contender with cProfile; the report goes to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"profile-{name}.txt"
    with serving() as (base_url, _):
        worker(["--contender", name, "--base-url", base_url, "--runs", str(runs), "--profile", str(path)])
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, summarise, write; exit 1 when any sample failed its correctness check."""
    options = parse(argv)
    if options.profile:
        log(f"profile written to {profile(options.contenders[0], options.out)}")
        return 0
    missing = [spec.name for spec in contenders.SPECS if not spec.available()]
    if missing:
        log(f"not installed here, skipped: {', '.join(missing)} (bash benchmarks/setup.sh installs them)")
    collected, env = collect(options)
    summary = report.summarise(asdict(options), collected.sequential, collected.concurrent, collected.imports, env)
    summary["micro"] = collected.micro
    summary["import_profile"] = collected.import_profile
    summary["failures"] = collected.failures
    summary["targets"] = report.targets(summary)
    for path in write(summary, options.out, options.label):
        log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    print(report.markdown(summary))
    return 1 if collected.failures else 0
