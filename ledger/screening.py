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

The decision is pure (no I/O) and is recorded on the event (``contracts.Screening``):
which kinds were found, how often, and what was done. No value found is ever logged,
put in an error message or recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts import MemoryWrite, Screening
from contracts.types import Sensitivity
from ledger.errors import InvalidCommandError
from ledger.policy import RetentionPolicy, read_policy_file

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
    """Screen ``cmd``, then check it against its (possibly raised) class's retention
    policy (``RetentionPolicy.apply``). ``now`` is UTC. No I/O.

    Raises:
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
            f"holds personal data ({kinds}), which a {sensitivity} memory may not: a redaction cannot raise its class"
            f" to {screened.sensitivity} (supersede it with a {screened.sensitivity} memory instead)",
        )
    return screened.content, screened.screening
