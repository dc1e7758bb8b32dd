"""``agentkit.providers.local``: chunk discovery, assembly and checksum, server lifecycle, the missing extra.

Chunks are small files in fake installed distributions (real ``.dist-info`` folders on
``sys.path``, found by ``importlib.metadata`` as the real chunk packages are). The lifecycle runs
against a stand-in runtime module whose ``Server`` serves ``/health`` over real loopback HTTP;
the real runtime is exercised by ``tests/demo/test_local_model_real.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
import tomllib
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from agentkit.errors import ProviderError, UsageError
from agentkit.providers.local import (
    DEFAULT_MODEL,
    INSTALL_HINT,
    LARGER_MODEL,
    MODELS,
    Chunk,
    ChunkedModel,
    LocalModel,
    check_installed,
    default_cache_dir,
    ensure_model_file,
    locate_chunks,
)

ROOT = Path(__file__).resolve().parents[2]
PARTS = [b"GGUF" + bytes(range(256)) * 3, b"middle piece " * 50, b"the end"]


def install_chunks(
    site: Path, parts: list[bytes], *, prefix: str = "fakechunk", version: str = "1.0.0"
) -> ChunkedModel:
    """Install ``parts`` as distributions ``<prefix>-partN`` under ``site`` and describe them."""
    chunks = []
    for number, data in enumerate(parts, 1):
        dist = f"{prefix}-part{number}"
        package = dist.replace("-", "_")
        info = site / f"{package}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        relative = f"{package}/data/part{number:02d}.bin"
        (site / relative).parent.mkdir(parents=True)
        (site / relative).write_bytes(data)
        (info / "RECORD").write_text(f"{relative},,\n")
        chunks.append(Chunk(distribution=dist, version=version, path=relative))
    whole = b"".join(parts)
    return ChunkedModel(
        name=f"{prefix}-model", sha256=hashlib.sha256(whole).hexdigest(), size=len(whole), chunks=tuple(chunks)
    )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def model(site: Path) -> ChunkedModel:
    return install_chunks(site, PARTS)


def test_assembled_file_is_the_chunks_joined_in_order(model: ChunkedModel, tmp_path: Path) -> None:
    """The model file is the chunks' bytes concatenated in order, named after the model."""
    path = ensure_model_file(model, cache_dir=tmp_path / "cache")
    assert path == tmp_path / "cache" / "fakechunk-model.gguf"
    assert path.read_bytes() == b"".join(PARTS)


def test_intact_file_is_reused_not_rebuilt(model: ChunkedModel, tmp_path: Path) -> None:
    """A cached file that matches the checksum is served as it is."""
    first = ensure_model_file(model, cache_dir=tmp_path)
    stamp = first.stat().st_mtime_ns, first.stat().st_ino
    second = ensure_model_file(model, cache_dir=tmp_path)
    assert (second.stat().st_mtime_ns, second.stat().st_ino) == stamp


def test_corrupt_file_is_detected_and_rebuilt(model: ChunkedModel, tmp_path: Path) -> None:
    """A cached file of the right size with one byte changed is rebuilt from the chunks."""
    path = ensure_model_file(model, cache_dir=tmp_path)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    assert ensure_model_file(model, cache_dir=tmp_path).read_bytes() == b"".join(PARTS)


def test_partial_file_is_detected_and_rebuilt(model: ChunkedModel, tmp_path: Path) -> None:
    """A truncated cached file (an interrupted copy) is rebuilt."""
    path = ensure_model_file(model, cache_dir=tmp_path)
    path.write_bytes(path.read_bytes()[:100])
    assert ensure_model_file(model, cache_dir=tmp_path).read_bytes() == b"".join(PARTS)


def test_chunks_that_join_to_a_wrong_checksum_are_refused(site: Path, tmp_path: Path) -> None:
    """Damaged chunks never become the model file; the error says how to reinstall."""
    good = install_chunks(site, PARTS, prefix="damaged")
    (site / good.chunks[1].path).write_bytes(b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(UsageError, match="--force-reinstall") as raised:
        ensure_model_file(good, cache_dir=cache)
    assert good.sha256 in str(raised.value)
    assert list(cache.iterdir()) == []


def test_missing_chunk_package_names_the_install_command(model: ChunkedModel, tmp_path: Path) -> None:
    """A chunk package that is not installed is named, with the command that installs it."""
    missing = ChunkedModel(
        name=model.name,
        sha256=model.sha256,
        size=model.size,
        chunks=(*model.chunks, Chunk(distribution="fakechunk-part99", version="1.0.0", path="x/part99.bin")),
    )
    with pytest.raises(UsageError) as raised:
        ensure_model_file(missing, cache_dir=tmp_path)
    message = str(raised.value)
    assert "fakechunk-part99 is not installed" in message
    assert INSTALL_HINT in message
    assert "fakechunk-part99==1.0.0" in message


def test_chunk_package_of_another_version_is_refused(site: Path) -> None:
    """A chunk package installed at a version other than the pinned one is refused by name."""
    installed = install_chunks(site, PARTS[:1], prefix="oldchunk", version="0.1.0")
    pinned = ChunkedModel(
        name="old",
        sha256=installed.sha256,
        size=installed.size,
        chunks=(Chunk(distribution="oldchunk-part1", version="0.2.0", path=installed.chunks[0].path),),
    )
    with pytest.raises(UsageError, match=r"oldchunk-part1 is 0\.1\.0, not the pinned 0\.2\.0"):
        locate_chunks(pinned)


def test_chunks_are_located_in_order(model: ChunkedModel, site: Path) -> None:
    """Chunks are found through package metadata, in the model's order."""
    assert locate_chunks(model) == [site / chunk.path for chunk in model.chunks]


def test_cache_dir_follows_override_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``AGENTKIT_CACHE_DIR`` wins, then ``$XDG_CACHE_HOME/agentkit``, then ``~/.cache/agentkit``."""
    monkeypatch.setenv("AGENTKIT_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("AGENTKIT_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "agentkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "agentkit"


def test_local_extra_pins_the_default_model_chunks() -> None:
    """The ``local`` extra in pyproject pins exactly the chunk packages the default model reads."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["local"]
    for chunk in DEFAULT_MODEL.chunks:
        assert f"{chunk.distribution}=={chunk.version}" in extra
    assert any(requirement.startswith("xllamacpp==") for requirement in extra)


def test_the_larger_model_is_pinned_by_its_own_extra_and_by_wheel_hashes() -> None:
    """``local-1.5b`` pins the runtime (through ``local``) and exactly the 1.5B model's 22 chunks, and
    ``.ci/local-model-1.5b.txt`` pins each of those wheels by its sha256."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["local-1.5b"]
    pinned = [f"{chunk.distribution}=={chunk.version}" for chunk in LARGER_MODEL.chunks]
    assert sorted(extra) == sorted(["agentkit[local]", *pinned])
    hashed = [line.split(" --hash=sha256:") for line in (ROOT / ".ci/local-model-1.5b.txt").read_text().splitlines()]
    hashed = [pair for pair in hashed if len(pair) == 2]
    assert [name for name, _ in hashed] == pinned
    assert all(len(digest) == 64 for _, digest in hashed)
    assert (LARGER_MODEL.size, len(LARGER_MODEL.chunks), LARGER_MODEL.extra) == (1_117_320_768, 22, "local-1.5b")
    assert MODELS == {"0.5b": DEFAULT_MODEL, "1.5b": LARGER_MODEL}


def absent(model: ChunkedModel) -> ChunkedModel:
    """`model` with chunk packages that are installed nowhere."""
    return dataclasses.replace(
        model, chunks=tuple(dataclasses.replace(c, distribution=f"absent-{c.distribution}") for c in model.chunks)
    )


def test_a_missing_larger_model_names_its_own_extra_in_one_short_line() -> None:
    """None of the 22 chunks installed: one short line naming the ``local-1.5b`` extra and its install command,
    not each of the 22 packages and their pins (it was a line of 1,900 characters)."""
    with pytest.raises(UsageError) as raised:
        locate_chunks(absent(LARGER_MODEL))
    message = str(raised.value)
    assert "install the 'local-1.5b' extra: pip install 'agentkit[local-1.5b]'" in message
    assert "pip install -e '.[local-1.5b]'" in message
    assert "\n" not in message
    assert len(message) < 250, message


def test_many_chunk_problems_are_counted_past_the_first_few(site: Path) -> None:
    """Chunks of the wrong version are named up to three, the rest counted, so the line stays short."""
    installed = install_chunks(site, [b"a", b"b", b"c", b"d", b"e"], prefix="oldchunks", version="0.1.0")
    pinned = dataclasses.replace(
        installed, chunks=tuple(dataclasses.replace(chunk, version="0.2.0") for chunk in installed.chunks)
    )
    with pytest.raises(UsageError) as raised:
        locate_chunks(pinned)
    message = str(raised.value)
    assert "oldchunks-part3 is 0.1.0, not the pinned 0.2.0; and 2 more" in message
    assert "oldchunks-part4" not in message
    assert INSTALL_HINT in message


def test_check_installed_names_the_models_extra_when_the_runtime_is_missing(
    model: ChunkedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks installed but no runtime: the check says which extra installs it, and writes nothing."""
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # makes the runtime absent
    larger = dataclasses.replace(model, extra="local-1.5b")
    with pytest.raises(UsageError, match=r"the 'local-1\.5b' extra installs: .*pip install -e '\.\[local-1\.5b\]'"):
        check_installed(larger, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_check_installed_accepts_a_joined_model_without_its_chunks(
    model: ChunkedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model already joined in the cache starts without its chunk packages, so the check does not ask for them."""
    monkeypatch.setitem(sys.modules, "xllamacpp", ModuleType("xllamacpp"))  # a runtime, already imported
    ensure_model_file(model, cache_dir=tmp_path / "cache")
    check_installed(absent(model), cache_dir=tmp_path / "cache")
    with pytest.raises(UsageError, match="none of its 3 chunk packages is"):
        check_installed(absent(model), cache_dir=tmp_path / "elsewhere")


def test_missing_extra_raises_with_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the runtime installed, starting says which command installs the ``local`` extra."""
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # makes `import xllamacpp` fail
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    with pytest.raises(UsageError, match=r"pip install -e '\.\[local\]'"):
        LocalModel(model_path=weights).start()


def test_importing_the_module_does_not_import_the_runtime() -> None:
    """``import agentkit.providers.local`` leaves ``xllamacpp`` unimported (it loads only when a server starts)."""
    code = "import sys, agentkit, agentkit.providers.local; assert 'xllamacpp' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- lifecycle, against a stand-in runtime serving real HTTP ------------------------------------


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok" if self.status == 200 else "loading model"}).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def fake_runtime(*, status: int = 200, fail: bool = False) -> tuple[ModuleType, list[Any]]:
    """A module shaped like ``xllamacpp``: ``CommonParams`` and a ``Server`` that stops when dropped."""
    seen: list[Any] = []
    handler = type("Handler", (_Health,), {"status": status})

    class Server:
        def __init__(self, params: Any) -> None:
            seen.append(params)
            if fail:
                raise RuntimeError("Failed to init server, please check the input params.")
            self._http = ThreadingHTTPServer((params.hostnames[0], params.port), handler)
            self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
            self._thread.start()
            self.listening_address = f"http://127.0.0.1:{self._http.server_address[1]}"

        def __del__(self) -> None:
            http = getattr(self, "_http", None)  # absent when __init__ raised
            if http is not None:
                http.shutdown()
                http.server_close()

    def params() -> SimpleNamespace:
        return SimpleNamespace(
            model=SimpleNamespace(path=""), cpuparams=SimpleNamespace(), cpuparams_batch=SimpleNamespace()
        )

    module = ModuleType("xllamacpp")
    module.CommonParams = params  # type: ignore[attr-defined]  # a stand-in module built at run time
    module.Server = Server  # type: ignore[attr-defined]  # a stand-in module built at run time
    return module, seen


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    module, seen = fake_runtime()
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    return seen


def answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_server_starts_on_loopback_with_a_free_port_and_one_thread(runtime: list[Any], weights: Path) -> None:
    """The server binds 127.0.0.1, lets the OS choose the port, and generates on one thread by default."""
    with LocalModel(model_path=weights) as local:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", local.base_url)
        assert answers(local.base_url)
    params = runtime[0]
    assert params.hostnames == ["127.0.0.1"]
    assert params.port == 0
    assert (params.cpuparams.n_threads, params.cpuparams_batch.n_threads) == (1, 1)
    assert params.model.path == str(weights)


def test_context_manager_stops_the_server_on_exit(runtime: list[Any], weights: Path) -> None:
    """Leaving the ``with`` block stops the server: it no longer answers and base_url is refused."""
    with LocalModel(model_path=weights) as local:
        url = local.base_url
        assert local.running
    assert not local.running
    assert not answers(url)
    with pytest.raises(UsageError, match="not running"):
        _ = local.base_url


async def test_async_context_manager_starts_and_stops(runtime: list[Any], weights: Path) -> None:
    """``async with`` starts the server off the event loop and stops it on exit."""
    async with LocalModel(model_path=weights, threads=2) as local:
        url = local.base_url
        assert answers(url)
    assert not answers(url)
    assert runtime[0].cpuparams.n_threads == 2


def test_server_stops_when_the_block_raises(runtime: list[Any], weights: Path) -> None:
    """An exception inside the block still stops the server."""
    local = LocalModel(model_path=weights)
    urls: list[str] = []

    def use() -> None:
        with local:
            urls.append(local.base_url)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        use()
    assert urls
    assert not answers(urls[0])


def test_starting_twice_is_refused_and_stop_is_idempotent(runtime: list[Any], weights: Path) -> None:
    """A second start without a stop is a wiring mistake; stopping twice is harmless."""
    local = LocalModel(model_path=weights)
    local.start()
    try:
        with pytest.raises(UsageError, match="already running"):
            local.start()
    finally:
        local.stop()
    local.stop()
    assert len(runtime) == 1


def test_server_that_fails_to_load_raises_provider_error(monkeypatch: pytest.MonkeyPatch, weights: Path) -> None:
    """A runtime that cannot load the model raises ``ProviderError`` naming the file."""
    module, _ = fake_runtime(fail=True)
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    local = LocalModel(model_path=weights)
    with pytest.raises(ProviderError, match=r"failed to start on .*tiny\.gguf"):
        local.start()
    assert not local.running


def test_server_that_never_gets_ready_times_out_and_is_stopped(monkeypatch: pytest.MonkeyPatch, weights: Path) -> None:
    """A server that keeps answering 503 is given up after ``ready_timeout`` and really stopped: its
    port is closed while the raised error (and its traceback) is still alive."""
    module, _ = fake_runtime(status=503)
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    local = LocalModel(model_path=weights, ready_timeout=0.3)
    with pytest.raises(ProviderError, match=r"not ready after 0\.3s \(HTTP 503\)") as raised:
        local.start()
    assert not local.running
    address = re.search(r"http://127\.0\.0\.1:(\d+)", str(raised.value))
    assert address is not None
    assert raised.value.__traceback__ is not None
    assert not accepts_connections(int(address.group(1)))


def test_missing_model_path_is_a_usage_error(runtime: list[Any], tmp_path: Path) -> None:
    """A ``model_path`` that is not a file is refused before the runtime is asked."""
    with pytest.raises(UsageError, match="is not a file"):
        LocalModel(model_path=tmp_path / "absent.gguf").start()
    assert runtime == []


@pytest.mark.parametrize(
    ("options", "message"),
    [({"threads": 0}, "threads"), ({"context_size": 10}, "context_size"), ({"ready_timeout": 0}, "ready_timeout")],
)
def test_bad_settings_are_refused_at_construction(options: dict[str, Any], message: str) -> None:
    """Nonsense settings raise ``UsageError`` when the model is built, not when it starts."""
    with pytest.raises(UsageError, match=message):
        LocalModel(**options)


@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="needs the 'local' extra")
def test_real_runtime_refuses_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    """The real runtime, given bytes that are not a GGUF model, fails as ``ProviderError``."""
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(4096))
    with pytest.raises(ProviderError, match="failed to start"):
        LocalModel(model_path=garbage).start()


async def test_cancelled_start_leaves_no_server_running(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling ``async with`` while the server loads (Ctrl-C) waits for the start, then stops the server."""
    module, _ = fake_runtime()
    server = module.Server
    entered, release = threading.Event(), threading.Event()
    started: list[Any] = []

    def slow_server(params: Any) -> Any:
        entered.set()
        release.wait(10)
        started.append(made := server(params))
        return made

    module.Server = slow_server  # type: ignore[attr-defined]  # a stand-in module built at run time
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    local = LocalModel(model_path=weights)

    async def enter() -> None:
        async with local:
            raise AssertionError("entered a cancelled start")

    task = asyncio.create_task(enter())
    await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    release.set()
    try:
        with pytest.raises(asyncio.CancelledError):
            await task
        assert started, "the cancelled enter returned before the start ended"
        url = started[0].listening_address
        started.clear()  # the test's own reference would keep the stand-in server alive
        assert not local.running
        assert not answers(url + "/v1")
    finally:
        started.clear()
        local.stop()  # a stand-in server left running would hang the interpreter's exit
