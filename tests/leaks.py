"""Leaked resources, attributed to the test that leaked them.

``pyproject.toml`` turns every warning into an error, so a socket that is garbage
collected while still open fails the test during which the collector happened to run,
often a later, unrelated one. :func:`collect_garbage` runs the collector after every
test, so the test that dropped the object is the one that fails.

One leak is not ours and is tolerated, counted and reported instead: kafka-python 3.0
(``kafka/net``) can drop a connection attempt to a broker without closing its socket,
when the attempt is cancelled or times out while the client is busy or being closed
(``KafkaNetSocket.connect`` has no ``finally`` that closes the socket). Such sockets are
recognised by their peer: the test Kafka broker (``MEMLEDGER_TEST_KAFKA_BOOTSTRAP``).
Every other unclosed socket, or any other unraisable exception, still fails the test.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

UnraisableHook = Callable[[Any], object]


def kafka_peers(bootstrap: str | None) -> set[tuple[str, int]]:
    """The ``(host, port)`` pairs of a bootstrap list such as ``"127.0.0.1:19092,b:9092"``
    (entries without a port are left out)."""
    peers: set[tuple[str, int]] = set()
    for entry in (bootstrap or "").split(","):
        host, sep, port = entry.strip().rpartition(":")
        if sep and host and port.isdigit():
            peers.add((host.strip("[]"), int(port)))
    return peers


def is_kafka_socket_leak(unraisable: Any, peers: set[tuple[str, int]]) -> bool:
    """True when ``unraisable`` (a ``sys.UnraisableHookArgs``) is the ``ResourceWarning``
    of an open socket connected to one of ``peers``."""
    obj = unraisable.object
    if not isinstance(obj, socket.socket) or not isinstance(unraisable.exc_value, ResourceWarning):
        return False
    try:
        peer = obj.getpeername()
    except OSError:
        return False
    return (str(peer[0]), int(peer[1])) in peers


class KafkaSocketLeaks:
    """An unraisable hook that counts kafka-python's leaked broker sockets (see the
    module docstring) and passes everything else on to ``inner`` (pytest's own hook)."""

    def __init__(self, inner: UnraisableHook, peers: set[tuple[str, int]]) -> None:
        self.inner = inner
        self.peers = peers
        self.count = 0

    def __call__(self, unraisable: Any) -> None:
        if is_kafka_socket_leak(unraisable, self.peers):
            self.count += 1
            try:
                unraisable.object.close()
            except OSError:
                pass
            return
        self.inner(unraisable)


def install() -> KafkaSocketLeaks:
    """Wrap the current ``sys.unraisablehook`` (pytest's, once it is configured)."""
    hook = KafkaSocketLeaks(sys.unraisablehook, kafka_peers(os.environ.get("MEMLEDGER_TEST_KAFKA_BOOTSTRAP")))
    sys.unraisablehook = hook
    return hook


def collect_garbage() -> None:
    """Run the cyclic garbage collector, so that objects the test dropped are finalised
    (and their leaks reported) while the test is still the current one."""
    gc.collect()
