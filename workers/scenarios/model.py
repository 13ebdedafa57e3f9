"""The vocabulary of a scenario: steps as plain, frozen data.

A scenario is a name, a one-line description and a list of steps. Steps name memories
by *labels* (``"pref"``, ``"deck"``), local to the scenario; the runner maps each label to
the memory id the ledger assigned. Every scenario runs on a fresh subject, so labels,
document ids and consent references need not be unique across scenarios or runs.

Time: the ledger stamps writes with the real clock. A scenario also keeps its own clock,
``now`` = real time + the sum of its :class:`Advance` steps (seconds); recall checks and
sweeps run at that ``now``. A :class:`Mark` names an instant of the real clock, between
two steps, that a recall check can ask about (``as_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

TECH = "technical_writing"
"""The purpose most scenarios write and recall for."""


@dataclass(frozen=True)
class Write:
    """Write a memory and name it ``label``.

    ``scope`` is ``"subject"``, ``"document:ID"`` or ``"workspace:ID"``;
    ``expires_in_s`` sets ``retention.expires_at`` that many seconds after the real clock
    (None: the class default of the retention policy); ``derived_from`` names labels.
    ``same_as``: this is a restatement of that label's memory, so the ledger must answer
    with that memory's id and create nothing new (otherwise a *duplicate* is counted).
    ``distinct_from``: the ledger must create a new memory, not answer with that label's
    id (for example when that memory is no longer live). ``turn``: the turn id the write
    names (default ``<scenario>/<label>``, a turn of its own). ``retry_of``: this is a
    client's retry of that label's write (same turn, same fields), so the ledger must
    answer with that memory's id and append nothing (otherwise a *duplicate* is counted).
    ``refused``: the ledger must refuse the write with an error naming this field, and
    append nothing.
    """

    label: str
    content: str
    kind: str = "preference"
    purpose: str = TECH
    scope: str = "subject"
    key: str | None = None
    sensitivity: str = "internal"
    basis: str = "indefinite"
    consent_ref: str | None = None
    source_ref: str | None = None
    veracity: str = "stated"
    confirmed: bool = False
    confidence: float | None = None
    expires_in_s: float | None = None
    derived_from: tuple[str, ...] = ()
    same_as: str | None = None
    distinct_from: str | None = None
    turn: str | None = None
    retry_of: str | None = None
    refused: str | None = None


@dataclass(frozen=True)
class Supersede:
    """Replace the memory labelled ``old`` explicitly (``Ledger.supersede``) with ``new``."""

    old: str
    new: Write


@dataclass(frozen=True)
class Confirm:
    """The subject confirms the memory labelled ``label`` (``Ledger.confirm``)."""

    label: str


@dataclass(frozen=True)
class Revoke:
    """The subject withdraws consent, by ``consent_ref`` or by ``purpose``."""

    consent_ref: str | None = None
    purpose: str | None = None


@dataclass(frozen=True)
class Erase:
    """Erase the memories labelled ``labels`` (and what was derived from them; with
    ``with_history``, every earlier version they superseded too)."""

    labels: tuple[str, ...]
    with_history: bool = False


@dataclass(frozen=True)
class Redact:
    """Replace the text of the memory labelled ``label`` with ``content`` (``Ledger.redact``)."""

    label: str
    content: str


@dataclass(frozen=True)
class Mark:
    """Name the current instant of the real (ledger) clock ``name``: what every step so
    far has recorded is before it, what every later step records is after it."""

    name: str


@dataclass(frozen=True)
class Advance:
    """Move the scenario clock ``seconds`` forward (recall and sweep ``now``; not the ledger's clock)."""

    seconds: float


@dataclass(frozen=True)
class Wait:
    """Let ``seconds`` of real time pass (the ledger's clock moves too)."""

    seconds: float


@dataclass(frozen=True)
class Sweep:
    """Enforce retention at the scenario's ``now`` (``Ledger.sweep``)."""


@dataclass(frozen=True)
class RecallCheck:
    """Catch the projections up, recall, and judge the result.

    ``relevant``: labels that must be in the result (top level, or grouped under a
    summary). ``flagged``: labels that must be in it *and* marked ``needs_confirmation``
    (relevant too). ``stale``: labels that must not be in it because they are no longer
    current (revoked, expired, superseded, unconfirmed, erased, in an open conflict).
    ``out_of_scope``: labels that must not be in it because they belong to another
    purpose or scope. ``expect_empty``: the result must have no item at all.
    ``min_confidence``: (label, value) pairs; the recalled item's confidence must be
    strictly above the value; ``max_confidence``: at most the value.
    ``min_sensitivity``: (label, class) pairs; the recalled item's sensitivity must be at
    least that class (``public`` < ``internal`` < ``personal`` < ``restricted``).
    ``as_of``: the name of a :class:`Mark`; recall what was current then (``stale`` then
    means: not current at that instant, expiry judged then). ``forbidden_text``: strings
    no recalled text may contain (text erased, revoked or redacted since).
    """

    what: str
    query: str
    purpose: str = TECH
    scopes: tuple[str, ...] = ()
    include_unconfirmed: bool = False
    relevant: tuple[str, ...] = ()
    flagged: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    out_of_scope: tuple[str, ...] = ()
    expect_empty: bool = False
    min_confidence: tuple[tuple[str, float], ...] = ()
    max_confidence: tuple[tuple[str, float], ...] = ()
    min_sensitivity: tuple[tuple[str, str], ...] = ()
    k: int = 10
    as_of: str | None = None
    forbidden_text: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConflictCheck:
    """Catch the projections up and read the conflict listing of the read side.

    ``open``: groups of labels; each group must be listed together in one unresolved
    conflict (a missing one counts as an *undetected conflict*). ``closed``: labels that
    must not be in any unresolved conflict any more.
    """

    what: str
    open: tuple[tuple[str, ...], ...] = ()
    closed: tuple[str, ...] = ()


Step = (
    Write | Supersede | Confirm | Revoke | Erase | Redact | Mark | Advance | Wait | Sweep | RecallCheck | ConflictCheck
)


@dataclass(frozen=True)
class Scenario:
    """A named, self-contained story; ``positive`` says whether it mainly shows that
    something is recalled (True) or that something is kept out (False)."""

    name: str
    description: str
    steps: tuple[Step, ...]
    positive: bool = True
