"""`agentkit inbox`: serve the web inbox over a journal until stopped.

    agentkit inbox --db URL [--host 127.0.0.1] [--port 8765] [--token NAME=TOKEN ...]

Every request needs a reviewer's token. Give one per reviewer with `--token NAME=TOKEN` (a
decision records NAME); without any, one token is made for the user running the command and its
URL is printed. The server listens on loopback unless `--host` says otherwise; it speaks plain
HTTP, so put it behind a TLS proxy before any other machine reaches it. Ctrl-C or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import ipaddress
import os
import signal
import socket
import sys
from typing import TextIO

from agentkit._cli import working_folder_importable
from agentkit._worker_cli import EXIT_INTERRUPTED
from agentkit.errors import AgentkitError

__all__ = ["DEFAULT_PORT", "parse_token", "register"]

DEFAULT_PORT = 8765


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `inbox` command."""
    inbox = subparsers.add_parser(
        "inbox", help="serve a web page to decide the journal's proposals (extra inbox)", description=__doc__
    )
    inbox.add_argument(
        "--db",
        default=os.environ.get("AGENTKIT_JOURNAL", "agentkit-journal.db"),
        metavar="URL",
        help="the journal: a SQLite path or a postgresql:// URL (default: $AGENTKIT_JOURNAL, else agentkit-journal.db)",
    )
    inbox.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: loopback)")
    inbox.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free)"
    )
    inbox.add_argument(
        "--token",
        action="append",
        type=parse_token,
        default=[],
        metavar="NAME=TOKEN",
        help="a reviewer and their token (at least 16 characters); repeat for each reviewer",
    )
    inbox.set_defaults(handler=_handle)


def parse_token(text: str) -> tuple[str, str]:
    """An `argparse` type: `NAME=TOKEN`."""
    name, sep, token = text.partition("=")
    if not sep or not name.strip() or not token:
        raise argparse.ArgumentTypeError(f"expected NAME=TOKEN (a reviewer's name and their token), got {text!r}")
    return name.strip(), token


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def _handle(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from agentkit._inbox_web._app import create_app
        from agentkit._inbox_web._security import Reviewers, new_token
    except ModuleNotFoundError as missing:
        print(
            f"agentkit: error: the inbox needs the 'inbox' extra ({missing.name} is missing): "
            "pip install 'agentkit[inbox]'",
            file=sys.stderr,
        )
        return 2
    from agentkit.journal import open_journal

    # An amendment is validated as the call's args type, imported by name: from the user's modules too.
    working_folder_importable()

    names = [name for name, _ in args.token]
    if len(set(names)) != len(names):
        print("agentkit: error: --token: a reviewer is named twice; give each one token", file=sys.stderr)
        return 2
    made = not args.token
    tokens = dict(args.token) if args.token else {getpass.getuser(): new_token()}
    try:
        reviewers = Reviewers(tokens)
    except AgentkitError as error:
        print(f"agentkit: error: --token: {error}", file=sys.stderr)
        return 2
    try:
        listening = socket.create_server((args.host, args.port))
    except OSError as error:
        print(f"agentkit: error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    try:
        journal = open_journal(args.db, create=False)
    except AgentkitError as error:
        listening.close()
        print(f"agentkit: error: {error}", file=sys.stderr)
        return 1

    async def serve() -> None:
        try:
            config = uvicorn.Config(create_app(journal, reviewers), log_level="warning", lifespan="off")
            await uvicorn.Server(config).serve(sockets=[listening])
        finally:
            await journal.close()

    _announce(sys.stdout, args.host, listening.getsockname()[1], tokens, made=made, where=journal.where)
    # uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again with these handlers back.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except _Terminated:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


class _Terminated(Exception):
    """SIGTERM, raised again by uvicorn once it shut down: a clean stop."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _announce(out: TextIO, host: str, port: int, tokens: dict[str, str], *, made: bool, where: str) -> None:
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}/"
    print(f"agentkit inbox over {where} at {base}", file=out)
    for name, token in tokens.items():
        # A token given on the command line is the operator's to hand out; only a made one is printed.
        shown_token = token if made else f"<{name}'s token>"
        print(f"  {name}: {base}?token={shown_token}", file=out)
    if not _loopback(host):
        print(
            f"warning: listening on {host}, beyond this machine, over plain HTTP: tokens travel in clear; "
            "put a TLS proxy in front",
            file=out,
        )
    out.flush()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
