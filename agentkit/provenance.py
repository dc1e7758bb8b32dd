"""Provenance: what a tool's results are, the policy once untrusted content has entered a run, and the records.

- `Trust`: a tool's declaration of its results (`@tool(trust=Trust.UNTRUSTED, egress=True)`);
- `ProvenancePolicy`: `LoopConfig.provenance`, what still runs live once untrusted content is in the run;
- `CallProvenance` (a proposal's `evidence.provenance`), `RunProvenance` (a result's `provenance`),
  `Origin`, `ArgOrigin`, `ItemOrigin`: what a run records of where its content came from.

See docs/provenance.md for the threat model: what the policy guarantees, and what it does not.
"""

from agentkit._trust import (
    ArgOrigin,
    CallProvenance,
    ItemOrigin,
    Origin,
    ProvenancePolicy,
    RunProvenance,
    Trust,
    declared_egress,
    declared_trust,
    held_by_policy,
)

__all__ = [
    "ArgOrigin",
    "CallProvenance",
    "ItemOrigin",
    "Origin",
    "ProvenancePolicy",
    "RunProvenance",
    "Trust",
    "declared_egress",
    "declared_trust",
    "held_by_policy",
]
