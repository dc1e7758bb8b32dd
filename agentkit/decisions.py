"""Decisions beyond yes and no: an approval that amends the call it approves, and standing grants.

`approve(proposal, approved_by=..., args=...)` approves the call with the args an approver
changed; the `Approval` then carries an `Amendment`: the call as it was proposed, who changed
it and which fields. The amended call has its own digest and runs exactly once, wherever an
approved call runs; the original never runs.

A `Grant` approves, ahead of time, calls of one tool whose args meet its constraints (`Equals`,
`OneOf`, `Prefix`, `PathPrefix`, `Range`), up to `max_uses` and until `expires_at`. `Grants` holds
grants in process (`run_tool_loop_tiered(..., grants=...)`); `journal.grant` keeps them in a
journal, counted in the database. `Prefix` compares text; a path is constrained with `PathPrefix`,
which compares segments and refuses `..`.

Each `ProposedAction` carries its `Evidence`: the rounds and calls the executor had seen when
it proposed the call (`CallSeen`: each call by its digest, with its items' ids), as references
rather than copies; the journal keeps it and `agentkit proposals show` prints it.
"""

from agentkit._approval import Amendment
from agentkit._grants import Constraint, Equals, Grant, Grants, OneOf, PathPrefix, Prefix, Range
from agentkit._proposals import CallSeen, Evidence

__all__ = [
    "Amendment",
    "CallSeen",
    "Constraint",
    "Equals",
    "Evidence",
    "Grant",
    "Grants",
    "OneOf",
    "PathPrefix",
    "Prefix",
    "Range",
]
