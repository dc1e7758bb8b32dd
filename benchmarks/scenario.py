"""The one scenario every contender runs, and the wire rules the benchmark server follows.

A retrieval agent answers a question: it searches three times (each search returns five small
items), then finishes with a typed final answer. That is four model round trips per run.

The server plays the model. It needs no per-run state to decide what to answer: the run id is in
the question, and the number of searches already done is the number of distinct item ids the
request carries (an agent that does not show the model its results would search forever and fail
the correctness check). Two wire protocols are understood:

* the **tool protocol** (a ``search`` tool is offered; pydantic-ai, the Agents SDK, LangGraph and
  the raw tool-calling floor): three ``search`` calls, then the final answer as a call of the
  other offered tool, or as JSON content when only ``search`` is offered;
* the **step protocol** (no ``search`` tool; agentkit, the raw JSON-schema floor and instructor):
  each reply is one step ``{"rationale", "done", "call"}``, as JSON content, as the arguments of
  the single offered tool (tools mode), or in a fenced block (markdown-JSON mode).
"""

from __future__ import annotations

import re
import secrets

from pydantic import BaseModel, Field

SEARCHES = 3
"""Searches per run before the final answer."""
ITEMS_PER_SEARCH = 5
"""Items one search returns."""
ROUNDS = SEARCHES + 1
"""Model round trips per run."""
MODEL = "bench-model"
SYSTEM = (
    "You are a retrieval agent. Search the corpus for what the question needs, a few times if "
    "useful, then finish with a short answer and how many items you found."
)
RUN_ID = re.compile(rb"run-([0-9a-f]{16})")
ITEM_ID = re.compile(rb"it-([0-9a-f]{16})-(\d+)-(\d+)")


class SearchArgs(BaseModel):
    """Arguments of the search tool."""

    query: str = Field(description="What to search for.")


class Item(BaseModel):
    """One search hit."""

    id: str
    title: str
    score: float


class Step(BaseModel):
    """The step-protocol reply of the hand-written contenders (same fields as agentkit's ``ToolStep``)."""

    rationale: str = Field(default="", description="Why this step: what is known, what is missing.")
    done: bool = Field(description="true when the gathered results are enough (or nothing is needed).")
    call: SearchArgs | None = Field(default=None, description="The tool call to make when done is false.")


class Answer(BaseModel):
    """The typed final answer of the tool-protocol contenders."""

    answer: str = Field(description="The answer to the question.")
    item_count: int = Field(description="How many items the searches returned.")


def new_run_id() -> str:
    """A fresh run id; the server reads it back from the question."""
    return secrets.token_hex(8)


def question(run_id: str) -> str:
    """The question of one run (it carries the run id to the server)."""
    return f"Which documents describe run-{run_id}?"


def search_items(query: str) -> list[Item]:
    """The corpus: five small items per query, with ids the server can count."""
    return [Item(id=f"it-{query}-{k}", title=f"Document {k} about {query}", score=1.0 - k / 10) for k in range(5)]


def render_items(items: list[Item]) -> str:
    """Items as the prompt shows them: one short line each."""
    return "\n".join(f"- {item.id}: {item.title} ({item.score:.1f})" for item in items)


def step_prompt(run_question: str, items: list[Item], round: int, max_rounds: int) -> str:
    """The user text of a step-protocol round: the question, what was found, the round budget."""
    found = render_items(items) if items else "(nothing yet)"
    return f"Question: {run_question}\nFound so far:\n{found}\nRound {round} of {max_rounds}."


def items_json(items: list[Item]) -> str:
    """Items as a tool result message carries them."""
    return "[" + ",".join(item.model_dump_json() for item in items) + "]"


def searches_seen(body: bytes, run_id: bytes) -> int:
    """How many searches of ``run_id`` the request shows results of (distinct item ids / 5)."""
    ids = {(m.group(2), m.group(3)) for m in ITEM_ID.finditer(body) if m.group(1) == run_id}
    return len(ids) // ITEMS_PER_SEARCH


def next_query(run_id: bytes, done: int) -> str:
    """The query the server asks for after ``done`` searches."""
    return f"{run_id.decode()}-{done + 1}"


def final_answer(done: int) -> Answer:
    """The final answer the server gives after ``done`` searches."""
    return Answer(answer=f"Found {done * ITEMS_PER_SEARCH} items across {done} searches.", item_count=done * 5)


class WrongResult(AssertionError):
    """A contender finished a run without the work the scenario asks for."""


def check_answer(answer: Answer) -> None:
    """The client-side check of a tool-protocol run: the typed answer counts every item."""
    if answer.item_count != SEARCHES * ITEMS_PER_SEARCH:
        raise WrongResult(f"final answer counts {answer.item_count} items, expected {SEARCHES * ITEMS_PER_SEARCH}")


def check_items(count: int) -> None:
    """The client-side check of a step-protocol run: every searched item was gathered."""
    if count != SEARCHES * ITEMS_PER_SEARCH:
        raise WrongResult(f"run gathered {count} items, expected {SEARCHES * ITEMS_PER_SEARCH}")
