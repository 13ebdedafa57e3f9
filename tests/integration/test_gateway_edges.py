"""Edges of the gateway (the application layer of ``memledger serve``) on the test
services, as an HTTP or MCP caller meets them: a supersession sent twice, what a listing
shows a principal that may erase but not read, and the field names its refusals use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workers import wire
from workers.bootstrap import Services
from workers.gateway import Caller, Gateway

pytestmark = pytest.mark.integration

PURPOSE = "support"


@pytest.fixture
def gateway(svc: Services) -> Iterator[Gateway]:
    gw = Gateway(svc)
    yield gw
    gw.close()


def caller(gateway: Gateway, subject: str, scopes: tuple[str, ...] = ("read", "write", "erase")) -> Caller:
    _, token = gateway.keys.create(f"agent-{'-'.join(scopes)}", scopes, [subject])
    return gateway.authenticate(token, "test")


def log_end(svc: Services) -> int:
    with svc.pool.connection() as conn:
        row = conn.execute("SELECT count(*) FROM memory_events").fetchone()
    assert row is not None
    return int(row[0])


def test_a_supersession_sent_twice_is_answered_as_a_retry(gateway: Gateway, svc: Services) -> None:
    vic = caller(gateway, "vic")
    old = gateway.write(vic, "vic", wire.WriteMemory(content="Vic lives in Oslo", purpose=PURPOSE, key="city"))
    assert old.memory_id is not None
    body = wire.Supersede(content="Vic lives in Bergen", turn_id="t-55")  # no `confirmed`, no Idempotency-Key
    first = gateway.supersede(vic, "vic", old.memory_id, body)
    end = log_end(svc)
    again = gateway.supersede(vic, "vic", old.memory_id, body)
    assert again.memory_id == first.memory_id and again.events == [] and again.positions == []
    assert again.first_event_ids == [e.event_id for e in first.events]
    assert again.repeat is not None and again.repeat.startswith("a retry of a supersession recorded at")
    assert log_end(svc) == end
