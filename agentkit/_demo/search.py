"""The demo's corpus and its search tool: a small BM25 index in pure Python.

BM25 (Robertson and Sparck Jones) scores a passage for a query by summing, over the query's
terms, the term's inverse document frequency times a saturating function of how often the term
occurs in the passage, normalised by the passage's length. Terms are lower-cased words with stop
words removed and a light suffix stemming, so "launched" meets "launch".
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from agentkit._tiers import Tier
from agentkit._tools import FunctionTool, tool
from agentkit.errors import ToolRetry, UsageError

__all__ = ["BM25Index", "Hit", "Passage", "SearchArgs", "keywords", "load_corpus", "search_tool", "terms"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    {
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    }
)
_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def keywords(text: str) -> list[str]:
    """The content words of `text`, lower-cased, stop words removed, in order."""
    return [word for word in _WORD.findall(text.lower()) if word not in _STOP_WORDS]


def terms(text: str) -> list[str]:
    """The index terms of `text`: its keywords, lightly stemmed."""
    return [_stem(word) for word in keywords(text)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Passage:
    """One short factual passage of the corpus."""

    id: str
    """Stable identifier, e.g. `space-01`."""
    title: str
    """A few words naming the subject."""
    text: str
    """One to three sentences."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    """A passage found by a search, with its BM25 score."""

    passage: Passage
    """The passage."""
    score: float
    """Its BM25 score for the query (higher is better)."""

    @property
    def id(self) -> str:
        """The passage's id."""
        return self.passage.id


class BM25Index:
    """An in-memory BM25 index over passages (title and text).

    Args:
        passages: The passages; their ids must be unique.
        k1: Term-frequency saturation (1.2 to 2.0 is usual).
        b: Length normalisation, from 0 (none) to 1 (full).
    """

    def __init__(self, passages: Iterable[Passage], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._build(tuple(passages))

    def _build(self, passages: tuple[Passage, ...]) -> None:
        ids = [p.id for p in passages]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise UsageError(f"passage ids must be unique; repeated: {duplicates}")
        self.passages = passages
        self._counts = [Counter(terms(f"{p.title} {p.text}")) for p in passages]
        self._lengths = [sum(c.values()) for c in self._counts]
        self._average = sum(self._lengths) / len(self._lengths) if self._lengths else 0.0
        frequency: Counter[str] = Counter()
        for counts in self._counts:
            frequency.update(counts.keys())
        total = len(passages)
        self._idf = {term: math.log(1 + (total - n + 0.5) / (n + 0.5)) for term, n in frequency.items()}

    def score(self, query: str, index: int) -> float:
        """The BM25 score of the passage at `index` for `query`."""
        counts, length = self._counts[index], self._lengths[index]
        total = 0.0
        for term in set(terms(query)):
            tf = counts.get(term, 0)
            if tf:
                norm = self.k1 * (1 - self.b + self.b * length / self._average)
                total += self._idf[term] * tf * (self.k1 + 1) / (tf + norm)
        return total

    def search(self, query: str, *, k: int = 3) -> list[Hit]:
        """The `k` best passages for `query` with a positive score, best first (ties by id)."""
        scored = [(self.score(query, i), p) for i, p in enumerate(self.passages)]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1].id))
        return [Hit(passage=p, score=round(s, 3)) for s, p in ranked[:k]]

    def get(self, passage_id: str) -> Passage | None:
        """The passage with this id, if there is one."""
        return next((p for p in self.passages if p.id == passage_id), None)

    def remove(self, passage_id: str) -> Passage:
        """Remove a passage and re-index the rest.

        Raises:
            KeyError: no passage has this id.
        """
        passage = self.get(passage_id)
        if passage is None:
            raise KeyError(passage_id)
        self._build(tuple(p for p in self.passages if p.id != passage_id))
        return passage


@functools.cache
def load_corpus() -> tuple[Passage, ...]:
    """The corpus bundled with agentkit: a few dozen short factual passages."""
    raw = json.loads(resources.files("agentkit._demo").joinpath("corpus.json").read_text(encoding="utf-8"))
    return tuple(Passage(id=row["id"], title=row["title"], text=row["text"]) for row in raw)


class SearchArgs(BaseModel):
    """Arguments of the corpus search."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=120, description="A few keywords to look up in the passages.")


def search_tool(index: BM25Index, *, k: int = 3) -> FunctionTool[SearchArgs, Hit]:
    """The read-only `search_corpus` tool over `index`, returning at most `k` hits a call."""

    @tool(tier=Tier.READ_ONLY)
    def search_corpus(args: SearchArgs) -> Sequence[Hit]:
        """Search the passages by keywords; returns the best matching passages with their ids."""
        if not terms(args.query):
            raise ToolRetry(f"the query {args.query!r} has no searchable words; use a few content keywords")
        return index.search(args.query, k=k)

    return search_corpus
