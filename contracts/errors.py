"""The error tree of the contracts package."""

from __future__ import annotations


class ContractError(Exception):
    """Base of every error raised by :mod:`contracts`."""


class UnknownEventError(ContractError):
    """Raised when bytes read from the log are not a known event.

    Attributes:
        reason: a one-line human-readable explanation (what field, what rule).
        event_type: the ``type`` the record claims, when it is a JSON object with a
            string ``type`` (a reader must not dead-letter an erasure it cannot read).
    """

    def __init__(self, reason: str, event_type: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.event_type = event_type


class UpcastError(ContractError):
    """Raised when an event's ``schema_version`` has no upcaster path to the current one."""
