"""Screening of memory text at the write boundary: secrets and personal data.

Before a write is admitted its text is screened under the screening policy, a TOML file
(``ledger/screening.toml`` is the checked-in default; ``MEMLEDGER_SCREENING_POLICY_FILE``
overrides it):

- secrets (cloud keys, API tokens, private keys, passwords in assignments and connection
  strings) are found with detect-secrets' plugins (Yelp, https://github.com/Yelp/detect-secrets),
  called directly: no detect-secrets settings, filters, logging or verification requests
  are involved. A secret is refused (``SecretFoundError``, naming its kind) or, where the
  policy says ``replace``, stored as ``[secret: <kind>]``;
- personal data raises the memory's sensitivity to at least the policy's ``raise_to``, so
  that class's retention, consent and caching rules (``ledger.policy``) apply: email
  addresses (candidates checked with email-validator), phone numbers (phonenumbers,
  Google's libphonenumber, at its ``VALID`` leniency), payment card numbers (13 to 19
  digits whose first digit is an ISO/IEC 7812 major industry identifier of card issuers,
  2 to 6, passing the Luhn check of python-stdnum) and IBANs (python-stdnum, ISO 13616
  with its mod-97 check);
- every detector reads each form of the text (``ledger.textviews``): as given,
  unescaped (double-quoted strings with backslash escapes decoded, as JSON writes them)
  and normalised (NFKC, format characters such as U+200B removed), so neither JSON's
  escapes nor an invisible or fullwidth character hide what it looks for. A secret
  replaced inside a string of JSON is replaced in the decoded string, encoded again:
  the text stays JSON; one that cannot be replaced so is refused.

Labels, the free-text fields of a command other than a memory's text (``Label``), are
screened with the same detectors at the boundary of every command: a label is an
identifier, not a place for data (``label_refusal``: a secret in any label is refused,
personal data in one kept in clear or in the key).

The decision is pure (no I/O). For a text it is recorded on the event
(``contracts.Screening``): which kinds were found, how often, and what was done; a label
is admitted only when nothing refusable is found, and its refusal names the field and
the kinds found. No value found is ever logged, put in an error message or recorded.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts import EraseMemories, MemoryWrite, RedactMemory, RevokeConsent, Screening
from contracts.types import Sensitivity, with_article
from ledger.errors import InvalidCommandError
from ledger.policy import RetentionPolicy, read_policy_file
from ledger.textviews import is_undrawn

if TYPE_CHECKING:
    from ledger.detectors import Screener

PersonalKind = Literal["email_address", "phone_number", "payment_card_number", "iban"]
SecretAction = Literal["refuse", "replace"]


class SecretRules(BaseModel):
    """``[secrets]``: the detect-secrets plugins to run and what to do with a finding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    detectors: tuple[str, ...] = Field(min_length=1)
    """Plugin class names (checked against detect-secrets when a ``Screener`` is built)."""
    action: SecretAction = "refuse"
    actions: dict[str, SecretAction] = Field(default_factory=dict)


class PersonalRules(BaseModel):
    """``[personal]``: the personal data detectors and the class they raise a memory to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    detectors: tuple[PersonalKind, ...] = ()
    raise_to: Literal["personal", "restricted"] = "personal"
    phone_regions: tuple[Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")], ...] = ()
    """ISO 3166-1 alpha-2 codes (checked against libphonenumber's regions when a
    ``Screener`` is built)."""


class ScreeningPolicy(BaseModel):
    """The whole screening policy file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    secrets: SecretRules
    personal: PersonalRules


def load_screening_policy(path: Path | None = None) -> ScreeningPolicy:
    """Read a screening policy file; ``None`` reads the checked-in default. The names of
    detectors and regions are checked when a ``ledger.detectors.Screener`` is built from
    it (that imports the detector libraries, which commands that write nothing skip).

    Raises:
        PolicyError: the file is missing, not TOML, or breaks the schema (the message
            names the field).
    """
    return read_policy_file(ScreeningPolicy, "screening.toml", "screening policy", path)


class SecretFoundError(InvalidCommandError):
    """The text holds secrets the screening policy refuses, or would replace but cannot
    without breaking the text (``replaceable`` false). ``kinds`` names them (snake case,
    as ``ScreeningFinding.kind``); the values are never carried."""

    def __init__(
        self, field: str, kinds: tuple[str, ...], names: tuple[str, ...], policy: str, *, replaceable: bool = True
    ) -> None:
        if replaceable:
            rule = (
                f"holds a secret ({', '.join(names)}): memories must not store credentials; remove it, or have the"
                f" screening policy {policy!r} replace it (secrets.action = 'replace')"
            )
        else:
            rule = (
                f"holds a secret ({', '.join(names)}) that the screening policy {policy!r} cannot replace without"
                " breaking the text (it would no longer be JSON, or still hold a secret): remove it"
            )
        super().__init__(field, rule)
        self.kinds = kinds


LabelStorage = Literal["clear", "key", "reference"]


@dataclass(frozen=True)
class Label:
    """A free-text field of a command other than a memory's text: ``field`` (its name, as
    errors name it), ``value``, and how the ledger keeps it, ``storage``:

    - ``clear``: in clear in the log and the ledger's tables, kept after the memory is
      erased (``purpose``, ``provenance.agent``, an erasure's ``reason`` and
      ``legal_basis``, a redaction's ``fields``);
    - ``key``: the attribute ``key``, sealed with the memory, but the unit of supersession,
      listed and shown wherever the memory is, never screened for the memory's class;
    - ``reference``: sealed with the memory and destroyed with it, a reference to the
      subject's own material (``provenance.turn_id``, ``tool_call_id``, ``consent_ref``,
      ``source_ref``, a document or workspace ``scope.id``).
    """

    field: str
    value: str
    storage: LabelStorage


class LabelRefusedError(InvalidCommandError):
    """A label holds a secret, or personal data where the ledger would keep it in clear or
    as a key (``label_refusal``). ``category`` (``secret`` or ``personal``) and ``kinds``
    (snake case, as ``ScreeningFinding.kind``) say what was found; never the value."""

    def __init__(self, field: str, category: str, kinds: tuple[str, ...], rule: str) -> None:
        super().__init__(field, rule)
        self.category = category
        self.kinds = kinds


_WHERE_PERSONAL_BELONGS = "put personal data in the content, where it is sealed and erasable"
_PERSONAL_HINT: dict[str, str] = {
    "reason": "describe the request without it (a ticket or case id, say)",
    "legal_basis": "name the basis without it (gdpr-art-17, say)",
}


def label_refusal(label: Label, secrets: tuple[str, ...], personal: tuple[str, ...]) -> LabelRefusedError | None:
    """The rule of labels: a label is an identifier, not a place for data. ``secrets``
    are the detect-secrets names of the secrets found in the label (``"AWS Access Key"``),
    ``personal`` the kinds of personal data (``email_address``, ...). Returns the error to
    raise, or ``None``:

    - a secret in any label is refused (also under ``secrets.action = "replace"``: a
      label with a part replaced would name another thing);
    - personal data in a label kept in clear is refused: it would outlive an erasure of
      the memory; in the ``key`` too, though sealed: it is listed and shown wherever the
      memory is, and is not screened for the memory's class (the content is);
    - personal data in a reference is allowed: it is sealed and erased with the memory,
      and references often look like personal data without being it (an email's
      Message-ID is address-shaped).
    """
    if secrets:
        kinds = tuple(sorted({kind_of(name) for name in secrets}))
        return LabelRefusedError(
            label.field,
            "secret",
            kinds,
            f"holds a secret ({', '.join(sorted(set(secrets)))}): a label is an identifier, not a place for data,"
            " and memories must not store credentials; remove it",
        )
    if personal and label.storage != "reference":
        kinds = tuple(sorted(set(personal)))
        where = (
            "a key names an attribute, it is listed and shown wherever the memory is"
            if label.storage == "key"
            else f"{label.field} is kept in clear and outlives an erasure of the memory"
        )
        hint = (
            "put personal data in the content, where screening raises the memory's class"
            if label.storage == "key"
            else _PERSONAL_HINT.get(label.field, _WHERE_PERSONAL_BELONGS)
        )
        return LabelRefusedError(
            label.field,
            "personal",
            kinds,
            f"holds personal data ({', '.join(k.replace('_', ' ') for k in kinds)}): {where}; {hint}",
        )
    return None


def invisible_refusal(field: str, value: str) -> InvalidCommandError | None:
    """The rule of a new memory's identifiers (its subject, purpose, key and agent label):
    no character a terminal draws as nothing or as a line break, which would make an
    identifier that reads as another (``user-1`` and ``user-1`` followed by U+200B are two
    subjects): a format character (general category ``Cf``: U+200B ZERO WIDTH SPACE, the
    joiners, U+00AD SOFT HYPHEN, the bidirectional controls, U+FEFF), a C1 control (``Cc``:
    U+0085; the C0 controls are refused for every identifier already), a line or paragraph
    separator (``Zl``, ``Zp``), or another Default_Ignorable_Code_Point
    (``ledger.textviews.is_undrawn``: U+034F COMBINING GRAPHEME JOINER, the variation
    selectors, the Hangul fillers). Checked only where a new identifier enters (a write),
    not where the log is read: identifiers already in the log stay readable, erasable and
    listable. Returns the error to raise, naming the character and its position, or
    ``None``."""
    if value.isascii():
        return None
    for i, c in enumerate(value):
        if is_undrawn(c):
            name = unicodedata.name(c, "a control character")
            return InvalidCommandError(
                field,
                f"must not contain invisible or control characters (U+{ord(c):04X} {name} at position {i}):"
                " it would read as another identifier",
            )
    return None


def write_labels(cmd: MemoryWrite) -> list[Label]:
    """The labels of a write (``MemoryWrite``). Not among them: ``subject_id`` (named by
    the principal's grant, the subject's identifier by design), ``provenance.writer``
    (the authenticated principal), ``derived_from`` (memory ids, checked against the
    ledger) and a subject scope's id (the subject's own)."""
    p = cmd.provenance
    found = [Label("purpose", cmd.purpose, "clear")]
    if cmd.key is not None:
        found.append(Label("key", cmd.key, "key"))
    if p.agent is not None:
        found.append(Label("provenance.agent", p.agent, "clear"))
    if cmd.scope.type != "subject":
        found.append(Label("scope.id", cmd.scope.id, "reference"))
    refs = {
        "turn_id": p.turn_id,
        "tool_call_id": p.tool_call_id,
        "consent_ref": p.consent_ref,
        "source_ref": p.source_ref,
    }
    found += [Label(f"provenance.{n}", v, "reference") for n, v in refs.items() if v]
    return found


def erasure_labels(cmd: EraseMemories) -> list[Label]:
    """The labels an erasure records in clear: ``reason`` and ``legal_basis``. Its
    ``source_ref`` is not one: it names what to erase (matched against the memories'
    sources, which were screened when written), and an erasure is never refused for it."""
    return [Label("reason", cmd.reason, "clear"), Label("legal_basis", cmd.legal_basis, "clear")]


def revocation_labels(cmd: RevokeConsent) -> list[Label]:
    """The labels of a withdrawal of consent: ``purpose`` (recorded in clear) and
    ``consent_ref`` (a reference)."""
    found = [] if cmd.purpose is None else [Label("purpose", cmd.purpose, "clear")]
    return found + ([] if cmd.consent_ref is None else [Label("consent_ref", cmd.consent_ref, "reference")])


def redaction_labels(cmd: RedactMemory) -> list[Label]:
    """The labels of a redaction: the names in ``fields``, recorded in clear."""
    return [Label(f"fields[{i}]", name, "clear") for i, name in enumerate(cmd.fields)]


def kind_of(secret_type: str) -> str:
    """The snake-case kind of a detect-secrets secret type: ``"AWS Access Key"`` ->
    ``"aws_access_key"``."""
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


@dataclass(frozen=True)
class Screened:
    """A text after screening: ``content`` (secrets replaced where the policy says so),
    ``sensitivity`` (raised for personal data) and the decision to record."""

    content: str
    sensitivity: Sensitivity
    screening: Screening


@dataclass(frozen=True)
class AdmittedWrite:
    """A write that passed screening and the retention policy: ``original`` as given
    (what a retry repeats), ``cmd`` as it is recorded, and the screening decision."""

    original: MemoryWrite
    cmd: MemoryWrite
    screening: Screening


def admit_write(policy: RetentionPolicy, screener: Screener, cmd: MemoryWrite, now: datetime) -> AdmittedWrite:
    """Screen ``cmd`` (its labels, ``write_labels``, and its text), then check it against
    its (possibly raised) class's retention policy (``RetentionPolicy.apply``). ``now``
    is UTC. No I/O.

    Raises:
        LabelRefusedError: a label holds a secret, or personal data where the ledger
            would keep it in clear or as a key (``label_refusal``; the field named).
        SecretFoundError: a secret the screening policy refuses (field ``content``).
        InvalidCommandError: the retention policy refuses the write; when screening
            raised its class, the message says what was found that made it so.
    """
    screened, screening = screener.screen(cmd)
    try:
        return AdmittedWrite(cmd, policy.apply(screened, now), screening)
    except InvalidCommandError as exc:
        if screening.raised_from is None:
            raise
        kinds = ", ".join(k.replace("_", " ") for k in screening.kinds("personal"))
        raise InvalidCommandError(
            exc.field,
            f"the content holds personal data ({kinds}), so the memory is {screened.sensitivity}, not"
            f" {screening.raised_from} (screening policy {screener.policy.name!r}): {exc.rule}",
        ) from None


def screen_redaction(screener: Screener, replacement: str, sensitivity: str) -> tuple[str, Screening]:
    """Screen the replacement text of a redaction of a memory of class ``sensitivity``.
    A redaction cannot change the memory's class, so personal data that would raise it
    is refused. No I/O.

    Raises:
        SecretFoundError: a secret the screening policy refuses (field ``replacement``).
        InvalidCommandError: field ``replacement``, personal data above the memory's class.
    """
    screened = screener.screen_text(replacement, cast(Sensitivity, sensitivity), "replacement")
    if screened.screening.raised_from is not None:
        kinds = ", ".join(k.replace("_", " ") for k in screened.screening.kinds("personal"))
        raise InvalidCommandError(
            "replacement",
            f"holds personal data ({kinds}), which {with_article(sensitivity)} memory may not: a redaction cannot"
            " raise its class"
            f" to {screened.sensitivity} (supersede it with a {screened.sensitivity} memory instead)",
        )
    return screened.content, screened.screening
