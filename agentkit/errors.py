"""Every exception agentkit raises or attaches to a result, in one tree.

The tree:

```text
AgentkitError                   root of every agentkit error; `usage` is what the model cost
├── UsageError                  wiring mistake; raised before any model call, with the fix
│   ├── ScriptExhausted         a ScriptedCaller ran out of scripted replies (tests)
│   ├── ReplayDiverged          a replayed run asked what its recording did not (tests); names the round
│   └── ResumeRefused           a run cannot resume from that checkpoint, tools and decisions; nothing ran
│       └── ToolSetChanged      the tools brought to a run are not the ones it recorded (tier, args, set)
├── TierParseError              a tier read from text was not recognised (fails closed)
├── Throttled                   HTTP 429: never retried, never failed over
├── ProviderError               the model server failed; `transient` ones are retried
├── StructuredOutputError       the reply never validated against the requested schema
│   └── Truncated               the reply (structured or prose) was cut off at max_tokens; carries the raw text
├── ToolError                   a tool failed while it ran; carries the tool's name
│   └── ToolTimeout             a tool ran past `LoopConfig.tool_timeout`
├── CallRefused                 a call was not admitted, so its tool never ran; carries the tool's name
│   ├── MissingTierError        the tool declares no reversibility tier (also a ToolError)
│   ├── TierChanged             the tool's tier is not the tier the call was proposed and approved at
│   ├── ApprovalError           the approval is spent, or the call is not exactly what was approved
│   └── DigestMismatch          the journal's stored call does not reproduce its digest (also a JournalError)
├── ExecutorError               the executor's render (or the same= comparator) raised; items are kept
├── VerifierError               a pair's verifier failed; the unverified draft is discarded
├── ProgramError                a program of calls was rejected as a whole; nothing ran
├── JournalError                a journal operation failed; a refused change wrote nothing
│   ├── JournalUnavailable      no journal there, cannot connect, or a schema this code cannot read
│   ├── UnknownId               no proposal (or run) with that id
│   ├── TransitionRefused       the proposal's state does not allow the change
│   ├── DigestMismatch
│   ├── NothingRan              the journal failed before a claim held: the tool was not called
│   ├── OutcomeNotRecorded      the tool ran, once; its outcome could not be recorded (never run it again)
│   └── RunClaimed              another live process holds the run (it runs, or resumes it); nothing ran
├── McpServerError              an MCP server failed, hung, or changed a tool after it was wired
├── RunEnded                    a durable run ended before the status waited for (`wait_for`)
└── ReportedError               an error read back from an event's JSON form: its class name and message

ToolRetry                       not an error: a tool's signal that the call was wrong (see below)
```

Expected endings of a run come back as results carrying one of these in `error`; only
`UsageError` (and cancellation) is raised out of the loops. `ToolRetry` is a control signal a
tool raises to tell the executor its call was wrong; it derives from `Exception`, not from
`AgentkitError`, so a tool's own `except AgentkitError:` cannot swallow it.

Every one is importable from here. The public modules that raise them re-export theirs
(`agentkit.journal.JournalError`, `agentkit.program.ProgramError`, `agentkit.mcp.McpServerError`,
`agentkit.testing.ScriptExhausted`, `agentkit.temporal.RunEnded`); they are the same classes. The top
level has the root, `UsageError` and `ToolRetry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit._usage import Usage
    from agentkit.program import ProgramIssue

__all__ = [
    "AgentkitError",
    "ApprovalError",
    "CallRefused",
    "DigestMismatch",
    "ExecutorError",
    "JournalError",
    "JournalUnavailable",
    "McpServerError",
    "MissingTierError",
    "NothingRan",
    "OutcomeNotRecorded",
    "ProgramError",
    "ProviderError",
    "ReplayDiverged",
    "ReportedError",
    "ResumeRefused",
    "RunClaimed",
    "RunEnded",
    "ScriptExhausted",
    "StructuredOutputError",
    "Throttled",
    "TierChanged",
    "TierParseError",
    "ToolError",
    "ToolRetry",
    "ToolSetChanged",
    "ToolTimeout",
    "TransitionRefused",
    "Truncated",
    "UnknownId",
    "UsageError",
    "VerifierError",
]


class AgentkitError(Exception):
    """Root of every agentkit exception."""

    def __init__(self, message: str = "", *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage
        """Model usage spent before the error, when the code that raised it knew it (model calls)."""


class UsageError(AgentkitError, ValueError):
    """The library was wired wrongly; the message names the fix."""


class ScriptExhausted(UsageError):
    """The script ran dry: the code under test made more model calls than were scripted."""


class ReplayDiverged(UsageError):
    """A replayed run (`agentkit.testing.ReplayCaller`) left its recording: a request's prompt or schema,
    or a tool call's args, is not the recorded one; a recorded call's tool has another tier, or the run
    gates a call otherwise than the recording did (proposes one it ran, runs one it proposed); or the
    cassette cannot be replayed."""

    def __init__(self, message: str, *, round: int, what: str) -> None:
        super().__init__(message)
        self.round = round
        """The round that diverged (0: not a round's: the cassette, or a request past its end)."""
        self.what = what
        """What differs, in words."""


class ResumeRefused(UsageError):
    """A run cannot resume: the checkpoint is altered, of another version or finished, the tool set
    differs from the checkpoint's, or the decisions do not match its pending proposals. Nothing ran."""


class ToolSetChanged(ResumeRefused):
    """The tools a path brings to a run are not the ones the run recorded: a tier changed, a tool now
    declares another trust or egress, a tool was added or removed, a tool's args take another schema, or
    the order differs. Nothing ran."""

    def __init__(self, message: str, *, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)
        """Each difference, in words (`"tool 'send' is missing"`)."""


class TierParseError(AgentkitError, ValueError):
    """A tier read from text was not one of the four; the caller got `Tier.IRREVERSIBLE`."""


class Throttled(AgentkitError):
    """The provider answered HTTP 429.

    It is never retried and never failed over to the fallback model: it surfaces at once so that
    a queue consumer can release the work and let the queue be the backoff.
    """

    def __init__(
        self, message: str = "throttled", *, retry_after: float | None = None, usage: Usage | None = None
    ) -> None:
        super().__init__(message, usage=usage)
        self.retry_after = retry_after
        """Seconds the server asked to wait (its `Retry-After` header), when it sent one."""


class ProviderError(AgentkitError):
    """The model server failed.

    Only `transient=True` errors (5xx, timeouts, dropped connections) are retried and failed
    over; anything else (400, 401, 403, 404) ends the call at once.
    """

    def __init__(
        self, message: str, *, transient: bool = False, status: int | None = None, usage: Usage | None = None
    ) -> None:
        super().__init__(message, usage=usage)
        self.transient = transient
        """Whether retrying the same request may succeed."""
        self.status = status
        """The HTTP status, when there was a response."""


class StructuredOutputError(AgentkitError):
    """The model's reply did not validate against the requested schema, re-asks included."""

    def __init__(
        self, message: str, *, schema_name: str = "", raw: str | None = None, usage: Usage | None = None
    ) -> None:
        super().__init__(message, usage=usage)
        self.schema_name = schema_name
        """The name of the schema the reply had to match."""
        self.raw = raw
        """The last raw reply, when there was one."""


class Truncated(StructuredOutputError):
    """The reply stopped at the token limit (`finish_reason == "length"`), structured or prose.

    Its text may be cut anywhere, so it is never parsed and never returned as an answer; `raw`
    holds it as far as it came. The same request would be cut again, so it is not retried on the same
    model: it fails over to the fallback model only when that model's limit differs
    (`RoleSpec.fallback_max_tokens`), and a run it ends stops with `StopReason.MAX_TOKENS`.
    It is a `StructuredOutputError` (the reply is not the one asked for; the server did not
    fail), with `schema_name` empty for a prose reply.
    """

    def __init__(
        self,
        message: str,
        *,
        raw: str,
        max_tokens: int | None,
        schema_name: str = "",
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message, schema_name=schema_name, raw=raw, usage=usage)
        self.max_tokens = max_tokens
        """The limit the request carried (`None`: the server's own)."""


class ToolError(AgentkitError):
    """A tool failed while it ran; a loop run ends `Outcome.ERROR` with it."""

    def __init__(self, message: str, *, tool_name: str) -> None:
        # Not super(): MissingTierError is both a CallRefused and a ToolError, and each sets the name.
        AgentkitError.__init__(self, message)
        self.tool_name = tool_name
        """The name of the tool that failed."""


class ToolTimeout(ToolError):
    """A tool call ran past the per-tool timeout."""


class CallRefused(AgentkitError):
    """A call was not admitted, so its tool never ran: nothing happened.

    Raised (or attached to a result) by every path that runs a tool: the loops, `apply_plan`,
    `execute_approved` and the journal's `execute`, for the same conditions with the same type.
    Passing a path a tool other than the one the call names is a wiring mistake, a `UsageError`,
    not a `CallRefused`.
    """

    def __init__(self, message: str, *, tool_name: str) -> None:
        # Not super(): MissingTierError is both a CallRefused and a ToolError, and each sets the name.
        AgentkitError.__init__(self, message)
        self.tool_name = tool_name
        """The name of the tool whose call was refused."""


class MissingTierError(CallRefused, ToolError):
    """A tool declares no reversibility tier, so it is never called."""


class TierChanged(CallRefused):
    """The tool now declares a tier other than the one its call was proposed and approved at."""


class ApprovalError(CallRefused):
    """An approval was refused, or an approved call is not exactly what was approved; the tool was not called."""


class ExecutorError(AgentkitError):
    """The executor's own code failed mid-run: its `render` raised, or the repeat comparator did.

    The run ends `ERROR` with `StopReason.EXECUTOR_ERROR`; the exception is the `__cause__`
    and the items gathered before it are kept.
    """


class VerifierError(AgentkitError):
    """A pair's verifier raised; the draft it was reviewing is discarded, never returned as approved."""


class ProgramError(AgentkitError):
    """A program was rejected as a whole; `issues` lists every problem found."""

    def __init__(self, message: str, *, issues: Sequence[ProgramIssue] = ()) -> None:
        super().__init__(message)
        self.issues = tuple(issues)
        """Every problem, one per offending call."""


class JournalError(AgentkitError):
    """A journal operation failed; when it was a change, nothing was written."""


class JournalUnavailable(JournalError):
    """The journal could not be opened: missing database, unreachable server, or unknown schema."""


class UnknownId(JournalError, LookupError):
    """No proposal or run has that id."""

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
        """The id that was looked up."""


class TransitionRefused(JournalError):
    """The proposal's current state does not allow the change asked for; the journal is unchanged."""

    def __init__(self, message: str, *, id: str, state: str) -> None:
        super().__init__(message)
        self.id = id
        """The proposal."""
        self.state = state
        """Its state when the change was refused."""


class DigestMismatch(JournalError, CallRefused):
    """The stored call does not reproduce the digest that was proposed and approved; it was not run."""

    def __init__(self, message: str, *, id: str, tool_name: str = "") -> None:
        CallRefused.__init__(self, message, tool_name=tool_name)
        self.id = id
        """The proposal."""


class NothingRan(JournalError):
    """The journal failed (connection lost, server down) before a claim held: the tool was not called.

    The proposal is still `approved` and another attempt may run it. When the failure hit the
    claim's commit, the worker hands the claim back if it can; if it cannot reach the database, the
    claim's lease runs out and `stuck()` lists the proposal, whose tool never ran.
    """

    def __init__(self, message: str, *, id: str) -> None:
        super().__init__(message)
        self.id = id
        """The proposal, or `""` when the claim of the next approved proposal failed."""


class OutcomeNotRecorded(JournalError):
    """The tool ran, exactly once, but its outcome could not be written after every retry.

    The proposal stays `executing`, claimed by this worker; once the heartbeat stops, its lease
    runs out and `stuck()` lists it. Never run it again: a human records what happened with
    `resolve`, using `outcome` and `error` below.
    """

    def __init__(self, message: str, *, id: str, outcome: str, error: str | None) -> None:
        super().__init__(message)
        self.id = id
        """The proposal."""
        self.outcome = outcome
        """What the worker meant to record: `executed` or `failed`."""
        self.error = error
        """The tool's error when it failed, else `None`."""


class McpServerError(AgentkitError):
    """An MCP server failed: it could not be started or reached, it crashed, exited, hung, sent a
    protocol error, listed tools inconsistently, or changed a tool's input schema after wiring."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server
        """The server's name, as the connection calls it."""


class ToolRetry(Exception):
    """Raised by a tool when the call itself was wrong (unknown id, empty query).

    The message becomes that call's observation in the next round and the loop goes on; the
    round still counts toward the ceiling. Any other exception from a tool ends the run. Where no
    next round follows (an approved call run by `execute_approved` or a journal worker), it ends
    that call as a `ToolError` whose message carries the tool's.

    It is not an `AgentkitError`: a tool catching `AgentkitError` around its own calls into
    agentkit must not swallow it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        """What the model is told about its call."""


class RunClaimed(JournalError):
    """Another live process holds the run (it is still running, or another process resumes it); nothing ran."""

    def __init__(self, message: str, *, id: str, holder: str) -> None:
        super().__init__(message)
        self.id = id
        """The run."""
        self.holder = holder
        """Who holds it (`host:pid`), as recorded."""


class RunEnded(AgentkitError):
    """A durable run ended, failed or was refused before it reached the status waited for
    (`RunHandle.wait_for`): it will not reach it now."""

    def __init__(self, message: str, *, run_id: str, status: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        """The run (its workflow id)."""
        self.status = status
        """Where it stands: a `RunStatus` value (`finished`, `failed`, `refused`), or Temporal's own
        status of a run closed otherwise (`timed_out`, `terminated`, `canceled`)."""


class ReportedError(AgentkitError):
    """An error read back from an event's JSON form (`agentkit.events.parse_event`): the class name and
    message the run's process wrote; the exception itself stays in that process."""

    def __init__(self, message: str, *, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        """The class name of the error as raised (`ToolError`, `CancelledError`, ...)."""
