"""What screening at the write boundary decided about a memory's text, as events record it.

Before a write is admitted the ledger screens its text (``ledger.screening``): secrets
(cloud keys, API tokens, private keys, passwords in connection strings) are refused, or
replaced where the screening policy says so; personal data (email addresses, phone
numbers, payment card numbers, IBANs) raises the memory's sensitivity to at least the
policy's class. The event that records the memory carries the decision: which kinds were
found, how often, and what was done, never a value or where in the text it was.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contracts.base import Frozen
from contracts.types import NonEmptyStr, Sensitivity

FindingCategory = Literal["secret", "personal"]
FindingAction = Literal["replaced", "raised", "kept"]


class ScreeningFinding(Frozen):
    """One kind of secret or personal data found in a memory's text.

    Attributes:
        kind: what was found, in snake case: a secret kind named after its
            detect-secrets plugin's secret type (``aws_access_key``, ``github_token``,
            ``private_key``, ``basic_auth_credentials``, ...) or a personal data kind
            (``email_address``, ``phone_number``, ``payment_card_number``, ``iban``).
        category: ``secret`` or ``personal``.
        action: ``replaced`` (a secret stored as ``[secret: <kind>]``), ``raised`` (the
            memory's class was raised because of it) or ``kept`` (personal data in a
            memory whose class already was at least the policy's).
        count: how many occurrences (at least 1).
    """

    kind: NonEmptyStr
    category: FindingCategory
    action: FindingAction
    count: int = Field(ge=1)


class Screening(Frozen):
    """The screening decision for one memory's text.

    Attributes:
        policy: the name of the screening policy that decided (its file's ``name``).
        findings: what was found, one entry per kind (empty: nothing was found).
        raised_from: the class the write gave, when screening raised it (the memory's
            ``sensitivity`` is the raised one); ``None`` when it was not raised.
    """

    policy: NonEmptyStr
    findings: tuple[ScreeningFinding, ...] = ()
    raised_from: Sensitivity | None = None

    def kinds(self, category: FindingCategory | None = None) -> tuple[str, ...]:
        """The kinds found (of ``category`` only, when given), in the order recorded."""
        return tuple(f.kind for f in self.findings if category is None or f.category == category)
