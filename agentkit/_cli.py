"""The `agentkit` command line: each command group lives in the module that owns its concept.

A command module exposes `register(subparsers)`; it adds its sub-commands, each with a
`handler` default taking the parsed `argparse.Namespace` and returning an exit code.
Sub-parsers made through `subparsers.add_parser` are `CommandParser` instances, so their
help is plain text and an unknown flag is reported with the usage of the command it was given to.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NoReturn, cast

__all__ = [
    "MAX_COUNT",
    "CommandParser",
    "import_object",
    "main",
    "otel_observer",
    "plain_text",
    "positive_int",
    "working_folder_importable",
]

# Imported only when the command line runs, so `import agentkit` stays light.
COMMAND_MODULES = (
    "agentkit._demo.cli",
    "agentkit.journal.cli",
    "agentkit.journal._grant_cli",
    "agentkit._worker_cli",
    "agentkit._temporal_cli",
    "agentkit.evals._cli",
    "agentkit._inbox_web.cli",
)

_ROLE = re.compile(r":[a-z]+:`([^`]*)`")
_LITERAL = re.compile(r"``([^`]*)``|`([^`]*)`")


def plain_text(text: str) -> str:
    """`text` without its inline markup, for a terminal: docstrings double as help texts.

    A reStructuredText role (a name in backticks after `:func:`, say) becomes the bare name, and
    text in double or single backticks (reStructuredText and Markdown literals) the bare text.
    """
    text = _ROLE.sub(r"\1", text)
    return _LITERAL.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)


class _PlainFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps a description's own line breaks (docstrings are wrapped already) and drops markup."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))


class CommandParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose help is plain text, and which remembers itself on the namespace.

    Each parser sets `command_parser` to itself as a default; the innermost sub-command parsed
    sets it last, so `main` can report a stray argument with that sub-command's usage.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _PlainFormatter)
        super().__init__(*args, **kwargs)
        self.set_defaults(command_parser=self)


MAX_COUNT = 2**31 - 1
"""The largest count a command takes (`--limit`, `--max-uses`, ...): a database stores it as an integer."""


def positive_int(text: str) -> int:
    """An `argparse` type: a whole number from 1 to `MAX_COUNT`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {text}")
    return value


def otel_observer(args: argparse.Namespace) -> Any:
    """`--otel`: an `OTelObserver` over the global providers (`None` without the flag)."""
    if not getattr(args, "otel", False):
        return None
    from agentkit.otel import OTelObserver

    return OTelObserver()


def working_folder_importable() -> None:
    """Put the working folder first on the import path, as `python -m` does: every command that imports the
    user's code (tools, agents, datasets, an args type a proposal names) imports it the same way, whether
    started as the installed `agentkit` (whose import path holds its own folder, not the working one) or as
    `python -m agentkit`."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


def import_object(flag: str, path: str, example: str) -> object:
    """The object a `MODULE:ATTR` command-line value names, the working directory importable.

    Raises:
        UsageError: the value is not `MODULE:ATTR`, the module does not import, or it lacks the
            attribute; the message names `flag` and shows `example`.
    """
    from agentkit.errors import UsageError

    working_folder_importable()
    from agentkit._naming import resolve

    module_name, _, attr = path.partition(":")
    try:
        return resolve(path)
    except ValueError:
        raise UsageError(f"{flag} {path!r}: give MODULE:ATTR, e.g. {example}") from None
    except ImportError as missing:
        raise UsageError(f"{flag} {path!r}: cannot import {module_name!r}: {missing}") from missing
    except AttributeError:
        raise UsageError(f"{flag} {path!r}: module {module_name!r} has no {attr!r}") from None


def _version() -> str:
    try:
        return metadata.version("agentkit")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="agentkit", description="Typed agents in a bounded loop.")
    parser.add_argument("--version", action="version", version=f"agentkit {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="the command to run")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as missing:
            if missing.name is not None and name.startswith(missing.name):
                continue  # that command group is not part of this build
            raise
        module.register(subparsers)
    return parser


_skip_teardown = False
"""Set by a command that started native runtime threads which crash the interpreter's finalisation."""


def skip_teardown() -> None:
    """Have `run` end the process without the interpreter's finalisation.

    Temporal's client runs a Tokio runtime on threads of its own; when a short-lived process
    finalises while they are still alive, CPython can crash (SIGSEGV or SIGABRT, after the command
    has done its work and printed its result: temporalio/sdk-python#300). A command that used it
    calls this, and `run` flushes the output and leaves with `os._exit`.
    """
    global _skip_teardown
    _skip_teardown = True


_process_ends_after_command = False
"""Set by `run`: the command is the process's, which exits as soon as it returns."""


def process_ends_after_command() -> bool:
    """Whether the running command is the process's own (`run`), not `main()` called in a process that goes on:
    a command may then leave the process's signal handling as it ends, rather than restore it."""
    return _process_ends_after_command


def run() -> NoReturn:
    """The `agentkit` console script and `python -m agentkit`: `main()`, then exit with its code."""
    global _process_ends_after_command
    _process_ends_after_command = True
    try:
        code = main()
    finally:
        # A test (or an embedding program) that calls `run` and catches its exit goes on: `main()` called
        # later in the same process must find it a process that goes on, and restore what it changes.
        _process_ends_after_command = False
    if _skip_teardown:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})
"""The `OSError`s that mean output could not be written (`main` reports them in one line)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args, stray = build_parser().parse_known_args(argv)
    if stray:
        # argparse would report it with the top-level usage; the command's own usage is the useful one.
        command = cast("argparse.ArgumentParser", args.command_parser)
        command.error(f"unrecognized arguments: {' '.join(stray)}")
    handler = cast("Callable[[argparse.Namespace], int]", args.handler)
    try:
        code = handler(args)
        sys.stdout.flush()  # here, so a reader that left is met below rather than at exit
        return code
    except BrokenPipeError:
        # The reader went away (`agentkit journal runs | head`): not an error worth a traceback. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command its pipe closed
    except OSError as failed:
        if failed.errno not in _WRITE_FAILURES:
            raise
        # Output to a full disk (`> /dev/full`) or a failing device: one line, not a traceback.
        print(f"agentkit: error: could not write {failed.filename or 'the output'}: {failed.strerror}", file=sys.stderr)
        try:
            sys.stdout.flush()
        except OSError:
            # What stdout still holds cannot be written: drop it, so the interpreter's final flush does not raise.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
