"""Static consumer group membership (KIP-345) for the faust workers.

A consumer that restarts with the ``group.instance.id`` it had before takes its old
place in the group at once: the coordinator hands it the partitions it held, with no
wait for the dead member's session to expire (``session.timeout.ms``) and no rebalance
of the other members. Without it a worker killed with SIGKILL and restarted waits out
the dead member's session before it gets partitions again.

The ids must be unique among the live members of a group (two live consumers with one
id fence each other) and should be the same across a restart. Each worker therefore
claims the lowest free *slot* ``k`` of its consumer group with a PostgreSQL
session-level advisory lock, held on a connection of its own for as long as the
process lives, and uses ``<group>#<k>`` as its instance id. A process that dies, however
it dies, loses its connection and so its lock: the worker restarted in its place finds
slot ``k`` free again. Slots are shared by every host that uses the same PostgreSQL, so
no host name or configuration is needed to keep them apart. Should a live worker lose
that connection (PostgreSQL restarted), another may claim its slot; the broker then
fences one of the two (KIP-345's ``FENCED_INSTANCE_ID``) rather than let two members
share an id: restart that worker, and it claims a free slot.

A static member does not leave its group when it stops: its partitions go to the others
only after its session timeout (``MEMLEDGER_CONSUMER_SESSION_TIMEOUT_S``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

log = logging.getLogger(__name__)

MAX_SLOTS = 1024
"""More workers than this per consumer group are refused (far more than partitions)."""


class MembershipError(Exception):
    """No instance slot of ``group`` is free (every one of ``MAX_SLOTS`` is held)."""

    def __init__(self, group: str) -> None:
        super().__init__(f"consumer group {group}: all {MAX_SLOTS} instance slots are held by live workers")
        self.group = group


class InstanceSlot:
    """The slot this process holds in consumer group ``group``; ``instance_id`` is its
    ``group.instance.id``. ``release`` (or the process's exit) frees it."""

    def __init__(self, conn: psycopg.Connection, group: str, slot: int) -> None:
        self._conn = conn
        self.group = group
        self.slot = slot

    @property
    def instance_id(self) -> str:
        return f"{self.group}#{self.slot}"

    @classmethod
    def claim(cls, dsn: str, group: str, connect_timeout_s: int = 10) -> InstanceSlot:
        """Claim the lowest free slot of ``group`` (advisory lock keys: ``hashtext(group)``
        and the slot number) on a new connection to ``dsn``.

        Raises:
            MembershipError: every slot is held.
            psycopg.OperationalError: PostgreSQL cannot be reached.
        """
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s)
        try:
            for slot in range(MAX_SLOTS):  # one lock at a time: a held slot is never locked twice
                row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s), %s)", (group, slot)).fetchone()
                if row is not None and row[0]:
                    return cls(conn, group, slot)
        except BaseException:
            conn.close()
            raise
        conn.close()
        raise MembershipError(group)

    def release(self) -> None:
        """Free the slot (closing the connection releases the lock)."""
        self._conn.close()


@dataclass(frozen=True)
class Member:
    """One live member of a consumer group: its ``member_id`` (new at every join), its
    static ``instance_id`` (``None`` for a dynamic member) and the partitions assigned to
    it (empty while the group rebalances)."""

    member_id: str
    instance_id: str | None
    partitions: tuple[int, ...]


def members(bootstrap: str, group: str, topic: str) -> tuple[str, list[Member]]:
    """The state (``Stable``, ``PreparingRebalance``, ``Empty``, ...) and the live members
    of consumer group ``group``, with their partitions of ``topic``, from the broker's
    coordinator (one DescribeGroups request; ``describe`` with an admin client of your own
    to ask repeatedly).

    Raises:
        kafka.errors.KafkaError: the broker cannot be reached or refuses.
    """
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="memledger-admin")
    try:
        return describe(admin, group, topic)
    finally:
        admin.close()


def describe(admin: Any, group: str, topic: str) -> tuple[str, list[Member]]:
    """``members``, through ``admin`` (a ``kafka.KafkaAdminClient``)."""
    described = admin.describe_groups([group])[group]
    out = []
    for m in described.get("members", []):
        partitions = [p for name, numbers in _assigned(m.get("member_assignment")) if name == topic for p in numbers]
        out.append(Member(str(m["member_id"]), m.get("group_instance_id"), tuple(sorted(partitions))))
    return str(described.get("group_state", "")), sorted(out, key=lambda m: m.partitions)


def _assigned(assignment: Any) -> list[tuple[str, list[int]]]:
    """(topic, partitions) of a decoded ``ConsumerProtocolAssignment`` or of its dict form."""
    items = getattr(assignment, "assigned_partitions", None)
    if items is None and isinstance(assignment, dict):
        items = assignment.get("assigned_partitions", [])
    out = []
    for tp in items or []:
        if isinstance(tp, dict):
            out.append((str(tp.get("topic")), list(tp.get("partitions") or [])))
        else:
            out.append((str(getattr(tp, "topic", "")), list(getattr(tp, "partitions", []) or [])))
    return out
