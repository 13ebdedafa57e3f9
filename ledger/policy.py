"""Write policy: retention per sensitivity class, and how repeated statements raise
confidence.

The retention policy is a TOML file (``ledger/retention.toml`` is the checked-in
default; ``MEMLEDGER_RETENTION_POLICY_FILE`` overrides it) with one table per class of
DESIGN.md's ``sensitivity``. Each class gives a maximum lifetime (days), what a write
of that class must carry (a ``consent_ref``, or a consent or contract basis), whether
recall results holding it may be cached, and how many days revoked content is kept
before its keys are destroyed.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts import MemoryWrite, describe_validation_error
from contracts.types import Sensitivity, with_article
from ledger.errors import InvalidCommandError, PolicyError

SENSITIVITY_ORDER: tuple[Sensitivity, ...] = ("public", "internal", "personal", "restricted")
"""Sensitivity classes from least to most sensitive."""


class ClassPolicy(BaseModel):
    """The retention rules of one sensitivity class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_lifetime_days: int | None = Field(default=None, ge=1, le=36_500)
    requires: Literal["consent_ref", "consent_ref_or_contract"] | None = None
    cacheable: bool = True
    consent_grace_days: int = Field(default=0, ge=0, le=36_500)

    @property
    def max_lifetime(self) -> timedelta | None:
        return None if self.max_lifetime_days is None else timedelta(days=self.max_lifetime_days)

    @property
    def consent_grace(self) -> timedelta:
        return timedelta(days=self.consent_grace_days)


class RetentionPolicy(BaseModel):
    """Rules for every sensitivity class (all four must be present)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    classes: dict[Sensitivity, ClassPolicy]

    @model_validator(mode="after")
    def _all_classes(self) -> RetentionPolicy:
        missing = [c for c in SENSITIVITY_ORDER if c not in self.classes]
        if missing:
            raise ValueError(f"classes: missing {', '.join(missing)} (every sensitivity class needs a policy)")
        return self

    def of(self, sensitivity: str) -> ClassPolicy:
        return self.classes[sensitivity]  # type: ignore[index]

    def uncacheable(self) -> frozenset[str]:
        """Sensitivity classes whose memories must never be cached."""
        return frozenset(c for c, p in self.classes.items() if not p.cacheable)

    def apply(self, cmd: MemoryWrite, now: datetime) -> MemoryWrite:
        """Check ``cmd`` against its class and return it with ``retention.expires_at``
        set to the class maximum when the write gave none.

        Raises:
            InvalidCommandError: ``retention.expires_at`` at or before ``now`` or beyond the
                class's maximum lifetime; a required ``provenance.consent_ref`` (or
                contract basis) missing. The message names the class and the rule.
        """
        rule = self.of(cmd.sensitivity)
        cls = cmd.sensitivity
        a_class = with_article(cls)
        expires_at = cmd.retention.expires_at
        if expires_at is not None and expires_at <= now:
            raise InvalidCommandError("retention.expires_at", "must be in the future (UTC)")
        if rule.requires == "consent_ref" and cmd.provenance.consent_ref is None:
            raise InvalidCommandError(
                "provenance.consent_ref", f"{a_class} memory requires a consent reference (retention policy: {cls})"
            )
        if (
            rule.requires == "consent_ref_or_contract"
            and cmd.provenance.consent_ref is None
            and cmd.retention.basis != "contract"
        ):
            raise InvalidCommandError(
                "provenance.consent_ref",
                f"{a_class} memory requires a consent reference or retention.basis 'contract'"
                f" (retention policy: {cls})",
            )
        limit = rule.max_lifetime
        if limit is None:
            return cmd
        latest = now + limit
        if expires_at is None:
            retention = cmd.retention.model_copy(update={"expires_at": latest})
            return cmd.model_copy(update={"retention": retention})
        if expires_at > latest:
            raise InvalidCommandError(
                "retention.expires_at",
                f"{a_class} memory may be kept at most {rule.max_lifetime_days} days, until {latest.isoformat()}"
                f" (retention policy: {cls}.max_lifetime_days)",
            )
        return cmd


def load_policy(path: Path | None = None) -> RetentionPolicy:
    """Read a retention policy file; ``None`` reads the checked-in default.

    Raises:
        PolicyError: the file is missing, not TOML, or breaks the schema (the message
            names the field).
    """
    return read_policy_file(RetentionPolicy, "retention.toml", "retention policy", path)


PolicyModel = TypeVar("PolicyModel", bound=BaseModel)


def read_policy_file(model: type[PolicyModel], default: str, what: str, path: Path | None) -> PolicyModel:
    """A TOML policy file validated as ``model``: ``path``, or, when ``None``, the
    checked-in file ``default`` of this package. ``what`` names it in errors.

    Raises:
        PolicyError: the file is missing, not TOML, or breaks the schema (the message
            names the field).
    """
    try:
        if path is None:
            text = resources.files("ledger").joinpath(default).read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        return model.model_validate(tomllib.loads(text))
    except OSError as exc:
        raise PolicyError(f"{what} {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PolicyError(f"{what} {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{what} {path}: not valid TOML ({exc})") from None
    except ValidationError as exc:
        raise PolicyError(f"{what} {path}: {describe_validation_error(exc)}") from None


def reinforce(confidence: float, evidence: float) -> float:
    """Confidence after the same claim is made again by a source of confidence
    ``evidence``: the noisy-OR of the two, ``1 - (1 - c)(1 - e)`` (Pearl, *Probabilistic
    Reasoning in Intelligent Systems*, 1988, section 4.3.2). It never falls, never
    exceeds 1, and rises less with each repetition. Both arguments in [0, 1]."""
    return round(min(1.0, 1.0 - (1.0 - confidence) * (1.0 - evidence)), 6)


_SPACE = re.compile(r"\s+")


def normalise_statement(text: str) -> str:
    """The form under which two statements count as the same: Unicode NFKC, case
    folded, white space collapsed, trailing punctuation dropped."""
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return folded.rstrip(".!?;, ")
