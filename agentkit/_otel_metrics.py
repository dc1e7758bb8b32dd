"""The GenAI metrics `OTelObserver` records, through the OpenTelemetry metrics API (the `otel` extra).

The two client metrics of the GenAI semantic conventions, with their attributes and bucket boundaries,
one data point per logical model call (the `chat` span's), plus agentkit's own counters of
proposals (by tier) and of the decisions resumed runs settle (by kind). Their attributes are names
(models, tools, tiers, error types), never content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import Meter, MeterProvider, get_meter_provider

from agentkit._events import Decided
from agentkit._proposals import ProposedAction
from agentkit._usage import Usage

__all__ = [
    "DECISIONS",
    "DURATION_BUCKETS",
    "OPERATION_DURATION",
    "PROPOSALS",
    "TOKEN_BUCKETS",
    "TOKEN_DETAILS",
    "TOKEN_USAGE",
    "Metrics",
]

OPERATION_DURATION = "gen_ai.client.operation.duration"
TOKEN_USAGE = "gen_ai.client.token.usage"
TOKEN_DETAILS = "agentkit.client.token.usage.details"
"""Parts of `gen_ai.client.token.usage`'s counts, by `gen_ai.token.type` (`cache_read`, `cache_creation`,
`reasoning`): a histogram of agentkit's own, since the conventions' token types are `input` and `output`
only, and a data point of another type there would be counted twice by a sum over types."""
PROPOSALS = "agentkit.proposals"
DECISIONS = "agentkit.decisions"

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""The conventions' boundaries for `gen_ai.client.operation.duration`, in seconds."""
TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""The conventions' boundaries for `gen_ai.client.token.usage`."""

_TOKEN_TYPE = "gen_ai.token.type"
_DETAILS = (
    ("cached_input_tokens", "cache_read"),
    ("cache_write_tokens", "cache_creation"),
    ("reasoning_tokens", "reasoning"),
)

Attributes = Mapping[str, str | int]


class Metrics:
    """The instruments of one observer, made once from its meter provider."""

    __slots__ = ("decisions", "duration", "proposals", "token_details", "tokens")

    def __init__(self, provider: MeterProvider | None) -> None:
        meter: Meter = (provider or get_meter_provider()).get_meter("agentkit")
        self.duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.token_details = meter.create_histogram(
            TOKEN_DETAILS,
            unit="{token}",
            description="Of the input and output tokens, those read from and written to the prompt cache, and those "
            "spent reasoning.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.proposals = meter.create_counter(
            PROPOSALS, unit="{proposal}", description="Calls above the autonomy ceiling that became proposals."
        )
        self.decisions = meter.create_counter(
            DECISIONS, unit="{decision}", description="Decisions on proposals, settled by the runs they resumed."
        )

    def chat(self, seconds: float, attributes: Attributes, usage: Usage | None) -> None:
        """One logical model call: its duration, and its tokens when it reported usage."""
        self.duration.record(seconds, attributes)
        if usage is not None and usage.requests:
            self.tokens.record(usage.input_tokens, {**attributes, _TOKEN_TYPE: "input"})
            self.tokens.record(usage.output_tokens, {**attributes, _TOKEN_TYPE: "output"})
            for name, kind in _DETAILS:
                count = getattr(usage, name)
                if count:
                    self.token_details.record(count, {**attributes, _TOKEN_TYPE: kind})

    def proposal(self, proposal: ProposedAction[Any]) -> None:
        self.proposals.add(1, {"gen_ai.tool.name": proposal.tool_name, "agentkit.tier": proposal.tier.name})

    def decision(self, decision: Decided) -> None:
        tier = decision.tier.name if decision.tier is not None else "none"
        kind = "approved" if decision.approved else "rejected"
        self.decisions.add(
            1, {"agentkit.decision": kind, "gen_ai.tool.name": decision.tool_name, "agentkit.tier": tier}
        )
