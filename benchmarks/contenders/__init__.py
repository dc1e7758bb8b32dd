"""The contenders: one module each, every one running ``benchmarks.scenario`` its own way.

A contender module is imported only inside the worker process that measures it, so that the
harness never pays for (or is skewed by) a framework it is not measuring, and so that the peer
frameworks need to be installed only where they are measured (``benchmarks/.venv-peers``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Contender(Protocol):
    """One way of running the scenario; ``run`` raises when the run did less than the scenario asks."""

    async def run(self, run_id: str) -> None:
        """Run the scenario once for ``run_id`` and check its typed result."""
        ...

    async def aclose(self) -> None:
        """Release the HTTP client."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """Where a contender lives and what it needs."""

    name: str
    """The name in the results."""
    module: str
    """The module with its ``make(base_url, **options)``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``make``."""
    imports: str
    """The statement that imports what the contender needs (for the cold-import figure)."""
    needs: tuple[str, ...]
    """Top-level packages that must be importable for the contender to run."""
    peer: bool = False
    """A peer framework (installed only in benchmarks/.venv-peers)."""
    note: str = ""
    """One line on what the contender is."""

    def available(self) -> bool:
        """Every package the contender needs is importable in this interpreter."""
        return all(importlib.util.find_spec(name) is not None for name in self.needs)

    def make(self, base_url: str) -> Contender:
        """Build the contender (in the worker process)."""
        module = importlib.import_module(self.module)
        contender: Contender = module.make(base_url, **self.options)
        return contender


_AGENTKIT_IMPORTS = "import agentkit; import agentkit.providers.openai"
_INSTRUCTOR_IMPORTS = "import instructor; import openai"

SPECS: tuple[Spec, ...] = (
    Spec(
        name="raw-httpx",
        module="benchmarks.contenders.floor_httpx",
        imports="import httpx2",
        needs=("httpx2",),
        note="the bare-HTTP floor: httpx2 posts the same JSON, json.loads, pydantic parse, minimal loop",
    ),
    Spec(
        name="raw-openai",
        module="benchmarks.contenders.floor",
        imports="import openai",
        needs=("openai",),
        note="the floor: raw openai client, JSON-schema step, pydantic parse, minimal loop",
    ),
    Spec(
        name="raw-openai-tools",
        module="benchmarks.contenders.floor_tools",
        imports="import openai",
        needs=("openai",),
        note="raw openai client, tool calling with a growing message history (the peers' protocol)",
    ),
    *(
        Spec(
            name=f"agentkit-{mode}",
            module="benchmarks.contenders.agentkit_loop",
            options={"mode": mode},
            imports=_AGENTKIT_IMPORTS,
            needs=("agentkit", "openai"),
            note=f"run_tool_loop through OpenAICaller(mode=StructuredMode.{mode.upper()})",
        )
        for mode in ("json_schema", "tools", "json", "md_json")
    ),
    *(
        Spec(
            name=f"instructor-{mode}",
            module="benchmarks.contenders.instructor_loop",
            options={"mode": mode},
            imports=_INSTRUCTOR_IMPORTS,
            needs=("instructor", "openai"),
            note=f"hand-written step loop over instructor's patched create (Mode.{mode.upper()})",
        )
        for mode in ("json_schema", "tools")
    ),
    Spec(
        name="pydantic-ai",
        module="benchmarks.contenders.peer_pydantic_ai",
        imports="import pydantic_ai; import pydantic_ai.models.openai",
        needs=("pydantic_ai",),
        peer=True,
        note="pydantic-ai Agent, OpenAIChatModel, output_type=Answer (tool output)",
    ),
    Spec(
        name="openai-agents",
        module="benchmarks.contenders.peer_openai_agents",
        imports="import agents",
        needs=("agents",),
        peer=True,
        note="OpenAI Agents SDK Runner, chat-completions model, output_type=Answer, tracing off",
    ),
    Spec(
        name="langgraph",
        module="benchmarks.contenders.peer_langgraph",
        imports="import langgraph.graph; import langgraph.prebuilt; import langchain_openai",
        needs=("langgraph", "langchain_openai"),
        peer=True,
        note="LangGraph StateGraph: ChatOpenAI with bound tools, ToolNode, an Answer tool to finish",
    ),
)

FLOOR = "raw-openai"
"""The contender every ``x floor`` ratio is taken against."""
HTTP_FLOOR = "raw-httpx"
"""The bare-HTTP floor: every ``x httpx`` ratio is taken against it."""


def spec(name: str) -> Spec:
    """The spec named ``name``."""
    for candidate in SPECS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no contender {name!r}; choose from {[s.name for s in SPECS]}")
