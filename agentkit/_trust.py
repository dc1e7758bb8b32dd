"""Provenance declarations and records: `Trust`, egress, `ProvenancePolicy`, and what a run records of where
its content came from (see `agentkit._provenance` for how a run tracks it, and docs/provenance.md).

The matching helpers (`normalised`, `leaves`, `pieces`) are hand-written: a few lines of substring search
over normalised text, which no library offers as "the first source this text appeared in"."""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from agentkit._tiers import AutonomyRung, Tier, tier_choices
from agentkit.errors import UsageError

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
    "leaves",
    "normalised",
    "pieces",
    "texts_of",
    "word_key",
    "words",
]


class Trust(enum.StrEnum):
    """What a tool's results are: the user's own data, or text a third party can write."""

    TRUSTED = "trusted"
    """The user's own data (their files, their account's records): it cannot steer the run."""
    UNTRUSTED = "untrusted"
    """Anything a third party can write (a web page, an email, a message, a review, an MCP server's
    result): once it is in the model's context, `ProvenancePolicy` lowers the run's autonomy."""


def declared_trust(tool: object) -> Trust:
    """The trust a tool declares: its `trust` if it is a `Trust`; `TRUSTED` when it declares none (a
    `Tool` written before provenance); `UNTRUSTED` for anything else (a misspelt value fails closed)."""
    trust = getattr(tool, "trust", None)
    if trust is None:
        return Trust.TRUSTED
    return trust if isinstance(trust, Trust) else Trust.UNTRUSTED


def declared_egress(tool: object) -> bool:
    """Whether a tool sends data out: its `egress`; `False` when it declares none; anything but `False` is
    egress (a misspelt value fails closed)."""
    return getattr(tool, "egress", False) is not False


def check_declarations(trust: object, egress: object, where: str) -> None:
    """Refuse a trust that is not a `Trust`, or an egress that is not a bool.

    Raises:
        UsageError: naming `where` and the fix.
    """
    if not isinstance(trust, Trust):
        raise UsageError(f"{where}(trust=...) needs a Trust (Trust.TRUSTED or Trust.UNTRUSTED), got {trust!r}")
    if not isinstance(egress, bool):
        raise UsageError(f"{where}(egress=...) must be True or False, got {egress!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProvenancePolicy:
    """What a run may still do on its own once untrusted content has entered it (`LoopConfig.provenance`).

    Until a tool declared `Trust.UNTRUSTED` has returned something, the run is gated by its tiers alone,
    exactly as without a policy. From then on:

    * no call above `ceiling` runs live (default: only `READ_ONLY` calls do);
    * no egress call runs live at all, `READ_ONLY` or not (`egress`, default `AutonomyRung.ASK`);

    such calls become proposals, as calls above the tier ceiling are. The policy never raises what a
    tier allows: `ceiling` above `LoopConfig.autonomy` changes nothing. `LoopConfig(provenance=None)`
    turns it off (no taint, no marks: the run is gated by tiers alone).
    """

    ceiling: Tier = Tier.READ_ONLY
    """The highest tier that still runs live once untrusted content has entered the run."""
    egress: AutonomyRung = AutonomyRung.ASK
    """`ASK` (the default): an egress call never runs live once untrusted content has entered the run;
    `AUTO`: egress calls are gated by `ceiling` like any other."""
    min_match: int = 8
    """The fewest characters (whitespace left out) a value, or a word of it, must have to be matched
    anywhere in what the run read: shorter ones (an amount, a date, a yes) are too common to say where
    they came from, unless `short_values` matches them whole."""
    short_values: bool = False
    """Stricter: also match a value shorter than `min_match` (a file id `13`, a whole-number amount, a name), but
    only as a whole word or value of what the run read, never inside a longer one (`13` is not found in
    `2013`). It marks the short values an injection supplies, and as many that a listing the run needed
    holds (ids and names in an untrusted file list or channel list): more for a person to check."""
    steered: bool = False
    """Stricter: also mark a value that first appeared in a *trusted* result of a call made after untrusted
    content had entered the run (`ArgOrigin.steered`): that content may have chosen the call, and so the
    value (an injected "book the most expensive hotel" picks a name from a trusted hotel list). A value
    read before the untrusted content is not marked, nor one from a call chosen before it was read (a call of
    the same step, or one proposed earlier and approved after)."""

    def __post_init__(self) -> None:
        if not isinstance(self.ceiling, Tier):
            raise UsageError(f"ProvenancePolicy.ceiling must be a Tier ({tier_choices()}); got {self.ceiling!r}")
        if not isinstance(self.egress, AutonomyRung):
            raise UsageError(
                f"ProvenancePolicy.egress must be AutonomyRung.ASK or AutonomyRung.AUTO; got {self.egress!r}"
            )
        if isinstance(self.min_match, bool) or not isinstance(self.min_match, int) or self.min_match < 4:
            raise UsageError(f"ProvenancePolicy.min_match must be an int >= 4 (characters); got {self.min_match!r}")
        for name in ("short_values", "steered"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"ProvenancePolicy.{name} must be True or False; got {getattr(self, name)!r}")


def held_by_policy(tool: object, tier: Tier, policy: ProvenancePolicy | None, tainted: bool) -> bool:
    """Whether `policy` keeps a call of `tool` at `tier` from running live in a run that is (or is not)
    `tainted`: the one rule every path asks (the loop, on a journal, on Temporal)."""
    if policy is None or not tainted:
        return False
    if policy.egress is not AutonomyRung.AUTO and declared_egress(tool):
        return True
    return not (isinstance(tier, Tier) and tier <= policy.ceiling)


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Origin(BaseModel):
    """A call whose result was untrusted content: its round, tool and `call_digest`."""

    model_config = _FROZEN
    round: int
    tool_name: str
    digest: str


class ArgOrigin(BaseModel):
    """An argument value (or a word of it) whose first appearance in the run was in untrusted content."""

    model_config = _FROZEN
    path: str
    """The argument, dotted (`to`, `recipients.0`)."""
    value: str
    """The text that matched, as the argument has it (at most 200 characters)."""
    origin: Origin
    """The result it first appeared in: untrusted content, or (`steered`) a trusted result of a call made
    after untrusted content had entered the run."""
    steered: bool = Field(default=False, exclude_if=lambda steered: steered is False)
    """It first appeared in a trusted result, of a call the model chose after it had read untrusted content
    (`ProvenancePolicy.steered`): that content may have chosen which value was found. Written only when
    `True`, so a mark reads as it did before the field existed."""


class CallProvenance(BaseModel):
    """Where a proposed call stands with respect to untrusted content (`Evidence.provenance`)."""

    model_config = _FROZEN
    untrusted: tuple[Origin, ...] = ()
    """The calls whose untrusted results the run had read before this call, in order (empty: none)."""
    from_untrusted: tuple[ArgOrigin, ...] = ()
    """The argument values that first appeared in one of them, not in the task or a trusted result read
    before them; or in a trusted result read after them (`ArgOrigin.steered`)."""
    held: bool = False
    """The policy, not the tier, made the call a proposal: without untrusted content it would have run."""

    @property
    def tainted(self) -> bool:
        """Untrusted content had entered the run before the call."""
        return bool(self.untrusted)


class ItemOrigin(BaseModel):
    """Where one item of a run's result came from."""

    model_config = _FROZEN
    round: int
    tool_name: str
    trust: Trust


@dataclass(frozen=True, kw_only=True, slots=True)
class RunProvenance:
    """What a run read that a third party could write, and what it shaped (`TieredLoopResult.provenance`)."""

    untrusted: tuple[Origin, ...] = ()
    """The calls that brought untrusted content into the run, in order (empty: the run read none)."""
    items: tuple[ItemOrigin, ...] = ()
    """Where each of `result.items` came from, in the same order."""
    answer_after_untrusted: bool = False
    """The run's answer was given after untrusted content entered the model's context: it may have shaped
    the answer, which no policy on calls can prevent (check the answer before acting on it)."""
    answer_from_untrusted: tuple[ArgOrigin, ...] = ()
    """The answer's values that first appeared in untrusted content, or (`ArgOrigin.steered`) in a trusted
    result read after it (paths into the answer's JSON)."""

    @property
    def tainted(self) -> bool:
        """Untrusted content entered the run."""
        return bool(self.untrusted)


# --- matching ---------------------------------------------------------------------------------------

_PUNCTUATION = "\"'`.,;:!?()[]{}<>*"
_SPACE = re.compile(r"\s+")


def normalised(text: str) -> str:
    """Text as matching compares it: NFKC, case-folded, whitespace left out (an IBAN written in groups is
    the IBAN)."""
    return _SPACE.sub("", unicodedata.normalize("NFKC", text).casefold())


def texts_of(value: object) -> Iterator[str]:
    """Every string (and whole number) in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        yield str(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield str(key)
            yield from texts_of(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from texts_of(inner)


def leaves(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """`(dotted path, text)` of every string (and whole number) leaf of a JSON value."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        yield path, str(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield from leaves(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            yield from leaves(inner, f"{path}.{index}" if path else str(index))


def pieces(text: str, min_match: int) -> list[str]:
    """What of one argument value is matched: the whole value, and each word of it (punctuation around it
    left off), that has at least `min_match` characters once normalised; each once, the whole first."""
    found: list[str] = []
    for piece in (text, *(word.strip(_PUNCTUATION) for word in text.split())):
        if len(normalised(piece)) >= min_match and piece not in found:
            found.append(piece)
    return found


_WORD = re.compile(r"\w+")


def words(parts: Iterable[str]) -> frozenset[str]:
    """The whole words of `parts`, and each part whole, as matching compares them (`normalised`): each
    whitespace-separated word with the punctuation around it left off, and each run of letters and digits in
    it (`13` in `id=13` and `12,13`, `Bob` in `Bob's`): what a short value is matched against
    (`ProvenancePolicy.short_values`)."""
    found: set[str] = set()
    for part in parts:
        found.add(normalised(part))
        for word in part.split():
            found.add(word_key(word))
            found.update(normalised(run) for run in _WORD.findall(word))
    found.discard("")
    return frozenset(found)


def word_key(text: str) -> str:
    """`text` as a whole word is matched: the punctuation around it left off, `normalised`."""
    return normalised(text.strip(_PUNCTUATION))
