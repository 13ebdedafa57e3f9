"""The metrics' pure parts: the event type read from an encoded event, the event log and
dead-letter queue wrappers (on the in-memory adapters), and the HTTP middleware's labels
(route templates, bounded methods, refusal reasons) on a small application."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from prometheus_client import REGISTRY

from contracts import EVENT_TYPES, ErasureRequested, encode_event, utc_now
from ledger.eventlog import DeadLetter, InMemoryDeadLetterQueue, InMemoryEventLog
from workers.api.limits import BodyLimit
from workers.metrics import families
from workers.metrics.http import HttpMetrics
from workers.metrics.metered import MeteredDeadLetterQueue, MeteredEventLog


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def erasure(subject: str) -> ErasureRequested:
    return ErasureRequested.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "occurred_at": utc_now(),
            "subject_id": subject,
            "producer": "test",
            "correlation_id": str(uuid.uuid4()),
            "request_id": str(uuid.uuid4()),
            "request_kind": "memories",
            "affected": [],
            "requested_by": "cli",
            "reason": 'the subject asked: {"type":"MemoryWritten"}',
            "legal_basis": "consent_withdrawn",
        }
    )


def test_the_type_label_is_the_events_own_and_nothing_else_is_a_type() -> None:
    assert families.EVENT_TYPE_NAMES == {m.model_fields["type"].default for m in EVENT_TYPES}
    # a reason that quotes another type comes after the event's own "type"
    assert families.event_type(encode_event(erasure("alice"))) == "ErasureRequested"
    assert families.event_type(b'{"type":"alice-42"}') == "other"
    assert families.event_type(b"not json") == "other"


def test_the_event_log_counts_what_it_acknowledged_and_its_failures() -> None:
    log = MeteredEventLog(InMemoryEventLog(partitions=2))
    before = sample("memledger_events_appended_total", type="ErasureRequested")
    positions = log.append_batch([("alice", encode_event(erasure("alice"))), ("bob", encode_event(erasure("bob")))])
    assert len(positions) == 2 and sum(log.end_offsets().values()) == 2
    assert sample("memledger_events_appended_total", type="ErasureRequested") == before + 2
    failed = sample("memledger_event_append_failures_total")
    broken = MeteredEventLog(InMemoryEventLog())
    broken.inner.append_batch = None  # type: ignore[assignment,method-assign]
    with pytest.raises(TypeError):
        broken.append("alice", b"{}")
    assert sample("memledger_event_append_failures_total") == failed + 1


def test_the_dead_letter_queue_counts_letters_by_projection() -> None:
    dlq = MeteredDeadLetterQueue(InMemoryDeadLetterQueue())
    before = sample("memledger_dead_letters_total", projection="facts_v7")
    dlq.put(DeadLetter("facts_v7", 0, 12, "alice", b"???", "not valid UTF-8 JSON"))
    assert sample("memledger_dead_letters_total", projection="facts_v7") == before + 1
    assert [letter.offset for letter in dlq.list()] == [12]


class Client:
    """Requests to an ASGI application in this process (httpx's ASGI transport)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def request(self, method: str, path: str, content: bytes | None = None) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.request(method, path, content=content)

        return asyncio.run(call())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, content: bytes) -> httpx.Response:
        return self.request("POST", path, content)


@pytest.fixture
def client() -> Client:
    app = FastAPI()

    @app.get("/v1/subjects/{subject_id}/memories/{memory_id}")
    def memory(subject_id: str, memory_id: str) -> dict[str, str]:
        if subject_id == "mallory":
            raise HTTPException(403, "forbidden")
        return {"memory_id": memory_id}

    @app.post("/v1/subjects/{subject_id}/memories")
    def write(subject_id: str, body: dict[str, str]) -> dict[str, str]:
        return body

    app.add_middleware(BodyLimit, max_bytes=1024)
    app.add_middleware(HttpMetrics, routes=app)
    return Client(app)


def test_requests_are_labelled_by_route_template_never_by_their_ids(client: Client) -> None:
    route = "/v1/subjects/{subject_id}/memories/{memory_id}"
    before = sample("memledger_http_requests_total", method="GET", route=route, status="200")
    refused = sample("memledger_http_refusals_total", method="GET", route=route, reason="forbidden")
    assert client.get("/v1/subjects/alice-42/memories/m-1").status_code == 200
    assert client.get("/v1/subjects/mallory/memories/m-2").status_code == 403
    assert sample("memledger_http_requests_total", method="GET", route=route, status="200") == before + 1
    assert sample("memledger_http_refusals_total", method="GET", route=route, reason="forbidden") == refused + 1
    assert sample("memledger_http_request_duration_seconds_count", method="GET", route=route) >= 2
    exposed = "\n".join(
        f"{s.name}{s.labels}" for m in REGISTRY.collect() if m.name.startswith("memledger_http") for s in m.samples
    )
    assert "alice-42" not in exposed and "m-1" not in exposed and "mallory" not in exposed


def test_refusals_before_routing_and_unknown_routes_and_methods_stay_bounded(client: Client) -> None:
    write = "/v1/subjects/{subject_id}/memories"
    too_large = sample("memledger_http_refusals_total", method="POST", route=write, reason="too_large")
    assert client.post("/v1/subjects/alice/memories", content=b"x" * 2048).status_code == 413
    assert sample("memledger_http_refusals_total", method="POST", route=write, reason="too_large") == too_large + 1
    unmatched = sample("memledger_http_requests_total", method="GET", route="unmatched", status="404")
    assert client.get("/v2/anything/alice-42").status_code == 404
    assert sample("memledger_http_requests_total", method="GET", route="unmatched", status="404") == unmatched + 1
    other = sample("memledger_http_requests_total", method="other", route=write, status="405")
    assert client.request("BREW", "/v1/subjects/alice/memories").status_code == 405
    assert sample("memledger_http_requests_total", method="other", route=write, status="405") == other + 1
