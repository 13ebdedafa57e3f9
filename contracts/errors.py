"""The error tree of the contracts package."""

from __future__ import annotations


class ContractError(Exception):
    """Base of every error raised by :mod:`contracts`."""


class UnknownEventError(ContractError):
    """Raised when bytes read from the log are not a known event.

    Attributes:
        reason: a one-line human-readable explanation (what field, what rule).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpcastError(ContractError):
    """Raised when an event's ``schema_version`` has no upcaster path to the current one."""
