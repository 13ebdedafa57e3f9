"""The error tree of the ledger (write side). Every error carries the data needed to act."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class LedgerError(Exception):
    """Base of every error raised by :mod:`ledger`."""


class InvalidCommandError(LedgerError):
    """A command broke a rule. ``field`` names the field, ``rule`` says what was wrong;
    ``index`` is the position of the command that broke it in a batch
    (``Ledger.write_many``: 0 for the first), ``None`` outside one."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule
        self.index: int | None = None


@contextmanager
def in_batch(index: int) -> Iterator[None]:
    """Within the block, an ``InvalidCommandError`` is raised with ``index`` set (unless
    set already): the rules of command ``index`` of a batch are checked there."""
    try:
        yield
    except InvalidCommandError as exc:
        if exc.index is None:
            exc.index = index
        raise


class NotAuthorisedError(LedgerError):
    """The principal holds no grant for ``action`` on ``subject_id`` (deny by default).
    As every refusal it names its ``field`` (``subject_id``: the grants decide on the
    subject) and its ``rule``."""

    field = "subject_id"

    def __init__(self, principal_id: str, action: str, subject_id: str) -> None:
        self.rule = f"principal {principal_id!r} may not {action} memories of subject {subject_id!r}"
        super().__init__(f"{self.field}: {self.rule}")
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


class TopicMisconfiguredError(EventLogError):
    """A Kafka topic the ledger needs is missing or has a setting its guarantees cannot
    live with: ``topic``, ``setting`` (a topic config such as ``cleanup.policy``, or
    ``partitions``, or ``exists``), the ``required`` value and the one ``found``."""

    def __init__(self, topic: str, setting: str, required: str, found: str) -> None:
        if setting == "exists":
            message = f"topic {topic}: missing (create it with `memledger topics create`)"
        else:
            message = f"topic {topic}: {setting}: must be {required}, is {found}"
        super().__init__(message, retriable=False)
        self.topic = topic
        self.setting = setting
        self.required = required
        self.found = found


class CorruptContentError(LedgerError):
    """Sealed text that its own data key does not open: the event was forged or damaged."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"sealed content under key {key_id!r} fails authentication (forged or damaged)")
        self.key_id = key_id


class KeyStoreError(LedgerError):
    """The key store is misconfigured (for example a master key of the wrong length)."""


class PolicyError(LedgerError):
    """The retention policy file cannot be used (missing, not TOML, or off its schema)."""


class NotWrittenError(LedgerError):
    """A command failed before its transaction committed (the connection was lost, the
    database refused a statement, the process was interrupted): nothing of it was
    recorded anywhere, neither in the ledger's PostgreSQL nor in the log, so running it
    again is safe. ``command`` names it, ``reason`` says what failed."""

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"{command}: not written ({reason}); nothing was recorded, it is safe to run it again")
        self.command = command
        self.reason = reason


class AcknowledgementLostError(LedgerError):
    """A command committed (its events are recorded in the ledger's PostgreSQL outbox and
    its state changed) but the log's acknowledgement did not come: the relay publishes the
    events to the log once it accepts them, in order (another process's relay may already
    have), and every store then follows. Do not
    run the command again (it would be recorded twice); ``event_ids`` are its events (and
    ``event_types`` their types, in the same order), and ``memory_id`` / ``request_id``,
    ``affected``, ``reinstated``, ``earlier_versions`` and ``rivals_reinstated`` what it
    produced (as ``CommandResult`` would have)."""

    def __init__(
        self,
        command: str,
        reason: str,
        event_ids: tuple[str, ...],
        memory_id: str | None = None,
        request_id: str | None = None,
        event_types: tuple[str, ...] = (),
        affected: tuple[str, ...] = (),
        reinstated: tuple[str, ...] = (),
        earlier_versions: tuple[str, ...] = (),
        rivals_reinstated: tuple[str, ...] = (),
    ) -> None:
        produced = f"; request {request_id}" if request_id else f"; memory {memory_id}" if memory_id else ""
        super().__init__(
            f"{command}: written, acknowledgement lost ({reason}){produced}; {len(event_ids)} event(s) are in the"
            " outbox, or already in the log (another process's relay may have published them first), and the"
            " relay publishes what remains: do not run it again"
        )
        self.command = command
        self.reason = reason
        self.event_ids = event_ids
        self.event_types = event_types
        self.memory_id = memory_id
        self.request_id = request_id
        self.affected = affected
        self.reinstated = reinstated
        self.earlier_versions = earlier_versions
        self.rivals_reinstated = rivals_reinstated


class OutcomeUnknownError(LedgerError):
    """The connection was lost while the command's transaction was committing, and the
    ledger's PostgreSQL could not be asked afterwards whether the commit took place.
    ``command_id`` names the command's commit marker (``ledger_commits``): it exists if
    and only if the command was recorded; ``event_ids`` are the events it would have."""

    def __init__(self, command: str, reason: str, command_id: str, event_ids: tuple[str, ...]) -> None:
        super().__init__(
            f"{command}: outcome unknown ({reason}): the commit may or may not have taken place; check for command"
            f" {command_id} in ledger_commits before running it again"
        )
        self.command = command
        self.reason = reason
        self.command_id = command_id
        self.event_ids = event_ids
