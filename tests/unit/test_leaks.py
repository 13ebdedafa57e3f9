"""The test suite's leak hook: an open socket to the Kafka broker (kafka-python's own
leak) is counted and closed; any other unraisable exception reaches pytest's hook."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.leaks import KafkaSocketLeaks, is_kafka_socket_leak, kafka_peers


@pytest.fixture
def connected() -> Iterator[tuple[socket.socket, tuple[str, int]]]:
    """A client socket connected to a listening one on loopback, and the listener's address."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname()[:2])
        accepted, _ = server.accept()
        try:
            yield client, ("127.0.0.1", server.getsockname()[1])
        finally:
            client.close()
            accepted.close()


def _unraisable(obj: object, exc: BaseException) -> Any:
    return SimpleNamespace(object=obj, exc_value=exc, exc_type=type(exc), exc_traceback=None, err_msg=None)


def test_kafka_peers_parses_a_bootstrap_list() -> None:
    assert kafka_peers("127.0.0.1:19092, broker-2:9092,[::1]:9093,nohost") == {
        ("127.0.0.1", 19092),
        ("broker-2", 9092),
        ("::1", 9093),
    }
    assert kafka_peers(None) == set()


def test_an_open_socket_to_the_broker_is_counted_closed_and_not_passed_on(
    connected: tuple[socket.socket, tuple[str, int]],
) -> None:
    client, peer = connected
    passed: list[Any] = []
    hook = KafkaSocketLeaks(passed.append, {peer})
    hook(_unraisable(client, ResourceWarning(f"unclosed {client!r}")))
    assert hook.count == 1 and passed == []
    assert client.fileno() == -1  # closed by the hook


def test_other_sockets_and_other_exceptions_still_reach_pytest(
    connected: tuple[socket.socket, tuple[str, int]],
) -> None:
    client, (host, port) = connected
    passed: list[Any] = []
    hook = KafkaSocketLeaks(passed.append, {(host, port + 1)})
    other_socket = _unraisable(client, ResourceWarning("unclosed"))
    not_a_warning = _unraisable(client, ValueError("boom"))
    not_a_socket = _unraisable(object(), ResourceWarning("unclosed file"))
    for u in (other_socket, not_a_warning, not_a_socket):
        hook(u)
    assert passed == [other_socket, not_a_warning, not_a_socket] and hook.count == 0
    assert not is_kafka_socket_leak(not_a_warning, {(host, port)})
    assert client.fileno() != -1
