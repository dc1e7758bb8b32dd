"""The ``agentkit`` command line as a whole: version, help texts, argument checks, Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import agentkit.providers.local
from agentkit._cli import build_parser, main, plain_text
from agentkit.providers.local import DEFAULT_MODEL, LARGER_MODEL


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A demo run here records into a default journal in a fresh working directory, not the checkout."""
    monkeypatch.delenv("AGENTKIT_JOURNAL", raising=False)
    monkeypatch.chdir(tmp_path)


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from all_parsers(child)


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``agentkit --version`` prints the installed distribution's version and exits 0."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentkit {metadata.version('agentkit')}"


def test_help_texts_carry_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command's --help is plain text: no reStructuredText or Markdown backticks leak from docstrings."""
    for parser in all_parsers(build_parser()):
        text = parser.format_help()
        assert "`" not in text, f"{parser.prog}:\n{text}"
    assert (
        plain_text("``agentkit demo`` uses :class:`LocalModel` and `--db`") == "agentkit demo uses LocalModel and --db"
    )


def test_every_option_of_every_command_has_help() -> None:
    """Every option of every command says what it does (``agentkit temporal``'s --address and --namespace did
    not), so ``--help`` never lists a bare flag."""
    bare = [
        f"{parser.prog} {action.option_strings[0]}"
        for parser in all_parsers(build_parser())
        for action in parser._actions
        if action.option_strings and not action.help
    ]
    assert bare == []


def test_every_positional_argument_has_help() -> None:
    """Every positional argument of every command, sub-command choices included, says what it is."""
    for parser in all_parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings:
                assert action.help, f"{parser.prog}: {action.metavar or action.dest} has no help"


@pytest.mark.parametrize(
    "argv",
    [("demo", "--bogus"), ("proposals", "show", "p-1", "--bogus"), ("journal", "runs", "--bogus")],
)
def test_unknown_flag_prints_the_subcommand_usage(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown flag on a sub-command is reported with that sub-command's usage, exit code 2."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    command = "agentkit " + " ".join(a for a in argv if not a.startswith("-") and a != "p-1")
    assert err.startswith(f"usage: {command} [-h]"), err
    assert f"{command}: error: unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("threads", ["0", "-1", "two"])
def test_demo_refuses_threads_below_one(threads: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``agentkit demo --threads 0`` is refused by the argument parser, before anything starts."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--threads", threads])
    assert exited.value.code == 2
    assert "argument --threads" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://host/v1", "http://", "http://host:99999/v1", "127.0.0.1"])
def test_demo_refuses_a_malformed_base_url_before_any_request(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A --base-url that is not an http(s) URL with a host and a valid port fails at parse time, exit code 2."""
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--base-url", url, "--model", "m"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --base-url" in err
    assert "Traceback" not in err


# --- the embedded model, on a stand-in runtime ---------------------------------------------------


class _StandIn(BaseHTTPRequestHandler):
    """llama.cpp's server as far as the demo sees it: healthy, and a chat request is met by Ctrl-C."""

    requests: list[str]

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.requests.append(self.path)
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C while the model thinks
        time.sleep(0.5)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """An ``xllamacpp`` whose server stops when dropped; returns the addresses it served at."""
    addresses: list[str] = []
    handler = type("Handler", (_StandIn,), {"requests": []})

    class Server:
        def __init__(self, params: Any) -> None:
            self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            self._http.daemon_threads = True
            threading.Thread(target=self._http.serve_forever, daemon=True).start()
            self.listening_address = f"http://127.0.0.1:{self._http.server_address[1]}"
            addresses.append(self.listening_address)

        def __del__(self) -> None:
            self._http.shutdown()
            self._http.server_close()

    module = ModuleType("xllamacpp")
    module.CommonParams = lambda: SimpleNamespace(  # type: ignore[attr-defined]  # a stand-in module built at run time
        model=SimpleNamespace(path=""), cpuparams=SimpleNamespace(), cpuparams_batch=SimpleNamespace()
    )
    module.Server = Server  # type: ignore[attr-defined]  # a stand-in module built at run time
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    monkeypatch.setattr(agentkit.providers.local, "ensure_model_file", lambda model, cache_dir=None: weights)
    monkeypatch.setattr(agentkit.providers.local, "locate_chunks", lambda model: [])  # as if the extra were installed
    monkeypatch.setenv("AGENTKIT_CACHE_DIR", str(tmp_path / "cache"))
    return addresses


def answers(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"{address}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_during_the_demo_stops_the_model_server_and_exits_130(
    stand_in: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the embedded model answers stops its server and exits 130 with one line, no traceback."""
    try:
        code = main(["demo", "--question", "How deep is Lake Baikal?"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the demo as a KeyboardInterrupt")
    assert code == 130
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["agentkit demo: interrupted (the model server is stopped)"]
    assert "Traceback" not in captured.out
    [address] = stand_in
    assert not answers(address)


def test_model_1_5b_starts_the_larger_embedded_model(stand_in: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``agentkit demo --model 1.5b`` serves the larger model: it is the one whose file is joined and named."""
    main(["demo", "--model", "1.5b", "--question", "How deep is Lake Baikal?"])
    out = capsys.readouterr().out
    assert f"the embedded model {LARGER_MODEL.name} (1117 MB" in out
    assert "joins the model's 22 chunks" in out


def test_first_run_note_appears_only_while_the_model_is_not_joined(
    stand_in: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The demo says it joins the model into the cache only when the joined file is not there yet."""
    main(["demo", "--question", "How deep is Lake Baikal?"])
    assert "first run joins the model" in capsys.readouterr().out
    joined = tmp_path / "cache" / f"{DEFAULT_MODEL.name}.gguf"
    joined.parent.mkdir(parents=True)
    with joined.open("wb") as sparse:
        sparse.truncate(DEFAULT_MODEL.size)
    main(["demo", "--question", "How deep is Lake Baikal?"])
    out = capsys.readouterr().out
    assert "Starting it ..." in out
    assert "joins" not in out


# --- a remote server, in a real process ----------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_in_a_real_process_exits_130_with_one_line() -> None:
    """SIGINT to ``python -m agentkit demo`` while a request is in flight: exit code 130, one line on stderr."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        demo = subprocess.Popen(
            [sys.executable, "-m", "agentkit", "demo", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            listener.settimeout(60)
            connection, _ = listener.accept()  # the first request is in flight, and never answered
            with connection:
                demo.send_signal(signal.SIGINT)
                out, err = demo.communicate(timeout=60)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.communicate()  # and close its pipes
    assert demo.returncode == 130, out + err
    assert err.splitlines() == ["agentkit demo: interrupted"]


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``agentkit journal runs | head -1``: the reader leaves early; no traceback, exit 141 (SIGPIPE)."""
    db = tmp_path / "runs.db"
    assert main(["demo", "--scripted", "--db", str(db)]) == 0
    reader = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "journal", "runs", "--db", str(db), "--limit", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None
    reader.stdout.close()  # the reader is gone before the first line
    _, err = reader.communicate(timeout=60)
    assert b"Traceback" not in err
    assert reader.returncode in (0, 141)


def test_a_command_that_asks_to_skip_teardown_exits_with_os_exit_after_flushing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` leaves through ``os._exit`` with main's code once a command called ``skip_teardown``."""
    import agentkit._cli as cli_module

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    def command(args: argparse.Namespace) -> int:
        print("done")
        cli_module.skip_teardown()
        return 3

    monkeypatch.setattr(cli_module, "_skip_teardown", False)
    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(cli_module, "main", lambda: command(argparse.Namespace()))
    with pytest.raises(SystemExit):
        cli_module.run()
    assert exits == [3]
    assert capsys.readouterr().out == "done\n"


def test_run_exits_normally_when_no_command_asked_to_skip_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``skip_teardown`` ``run`` is ``sys.exit(main())``: the interpreter finalises as usual."""
    import agentkit._cli as cli_module

    monkeypatch.setattr(cli_module, "_skip_teardown", False)
    monkeypatch.setattr(cli_module, "main", lambda: 0)
    with pytest.raises(SystemExit) as exit_:
        cli_module.run()
    assert exit_.value.code == 0
