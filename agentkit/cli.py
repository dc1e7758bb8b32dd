"""The ``agentkit`` command line: each command group lives in the module that owns its concept.

A command module exposes ``register(subparsers)``; it adds its sub-commands, each with a
``handler`` default taking the parsed ``argparse.Namespace`` and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import cast

__all__ = ["main"]

# Imported only when the command line runs, so `import agentkit` stays light.
COMMAND_MODULES = ("agentkit.demo.cli", "agentkit.journal.cli", "agentkit._worker_cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentkit", description="Typed agents in a bounded loop.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as missing:
            if missing.name is not None and name.startswith(missing.name):
                continue  # that command group is not part of this build
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    handler = cast("Callable[[argparse.Namespace], int]", args.handler)
    return handler(args)
