"""The error tree of the ledger (write side). Every error carries the data needed to act."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error raised by :mod:`ledger`."""


class InvalidCommandError(LedgerError):
    """A command broke a rule. ``field`` names the field, ``rule`` says what was wrong."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class NotAuthorisedError(LedgerError):
    """The principal holds no grant for ``action`` on ``subject_id`` (deny by default)."""

    def __init__(self, principal_id: str, action: str, subject_id: str) -> None:
        super().__init__(f"principal {principal_id!r} may not {action} memories of subject {subject_id!r}")
        self.principal_id = principal_id
        self.action = action
        self.subject_id = subject_id


class UnknownMemoryError(InvalidCommandError):
    """The command names a memory the ledger has no record of (for this subject)."""

    def __init__(self, memory_id: str, field: str = "memory_id") -> None:
        super().__init__(field, f"no memory {memory_id!r} of this subject is known to the ledger")
        self.memory_id = memory_id


class EventLogError(LedgerError):
    """The event log could not append or read. ``retriable`` says whether to try again."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class CorruptContentError(LedgerError):
    """Sealed text that its own data key does not open: the event was forged or damaged."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"sealed content under key {key_id!r} fails authentication (forged or damaged)")
        self.key_id = key_id


class KeyStoreError(LedgerError):
    """The key store is misconfigured (for example a master key of the wrong length)."""


class PolicyError(LedgerError):
    """The retention policy file cannot be used (missing, not TOML, or off its schema)."""
