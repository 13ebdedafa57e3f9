"""Edges of the gateway (the application layer of ``memledger serve``) on the test
services, as an HTTP or MCP caller meets them: a supersession sent twice, what a listing
shows a principal that may erase but not read, and the field names its refusals use."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import psycopg
import pytest
from fastapi.testclient import TestClient

from ledger.pgschema import wait_for_older_snapshots
from tests.integration.conftest import caller, one
from workers import wire
from workers.api import create_app
from workers.bootstrap import Services
from workers.gateway import ForbiddenError, Gateway, InvalidRequestError

pytestmark = pytest.mark.integration

PURPOSE = "support"


def log_end(svc: Services) -> int:
    return int(one(svc, "SELECT count(*) FROM memory_events"))


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


def test_a_listing_without_a_read_grant_hides_the_key_as_it_hides_the_text(gateway: Gateway, svc: Services) -> None:
    rita = caller(gateway, "rita")
    written = gateway.write(
        rita, "rita", wire.WriteMemory(content="Rita's passport is X1234567", purpose=PURPOSE, key="passport")
    )
    svc.catch_up()  # the listing reads the facts projection
    eraser = caller(gateway, "rita", ("erase",))
    [listed] = gateway.memories(eraser, "rita", include_all=True).memories
    assert listed.memory_id == written.memory_id and listed.status == "active"
    assert listed.content is None and listed.key is None and listed.scope["id"] is None
    one = gateway.memory(eraser, "rita", str(written.memory_id)).memory
    assert one.key is None and one.content is None
    assert gateway.memories(rita, "rita").memories[0].key == "passport"  # a read grant shows it
    for narrowed in ({"key": "passport"}, {"key_prefix": "pass"}):  # nor can it be found by probing
        with pytest.raises(ForbiddenError) as refused:
            gateway.memories(eraser, "rita", **narrowed)  # type: ignore[arg-type]
        assert refused.value.field == next(iter(narrowed)) and "read" in refused.value.rule


def test_refusals_name_the_fields_of_the_http_body(gateway: Gateway, svc: Services) -> None:
    rita = caller(gateway, "rita")
    end = log_end(svc)
    with pytest.raises(InvalidRequestError) as screened:  # screening raises it to personal
        gateway.write(rita, "rita", wire.WriteMemory(content="Rita's card is 4111 1111 1111 1111", purpose=PURPOSE))
    assert screened.value.field == "consent_ref"
    assert screened.value.rule.startswith("the content holds personal data (payment card number)")
    assert "consent reference or basis 'contract'" in screened.value.rule and "retention." not in screened.value.rule
    with pytest.raises(InvalidRequestError) as unmatched:
        gateway.revoke_consent(rita, "rita", wire.RevokeConsent(purpose="marketting"))
    assert unmatched.value.field == "purpose"
    assert "give allow_unmatched to withdraw consent" in unmatched.value.rule and "--" not in unmatched.value.rule
    assert log_end(svc) == end


def test_a_request_under_an_idempotency_key_holds_no_snapshot_while_it_runs(gateway: Gateway, svc: Services) -> None:
    """An erasure's rewrite of the key store waits for every snapshot and transaction
    older than the erase; the request's own idempotency record must not be one (it was a
    transaction open around the command: every erase sent with the header waited out the
    15 s and left the destroyed key's row versions in the file)."""
    kim = caller(gateway, "kim")
    ack = gateway.write(kim, "kim", wire.WriteMemory(content="Kim's locker code is 4411", purpose=PURPOSE))
    assert ack.memory_id is not None
    older: list[int] = []

    def erase() -> wire.CommandAck:
        with psycopg.connect(svc.pool.conninfo, autocommit=True) as probe:
            older.append(wait_for_older_snapshots(probe, 10.0))
        return gateway.erase(kim, "kim", wire.Erase(memory_ids=[str(ack.memory_id)]))

    first = gateway.idempotent(kim, "erase-kim-1", "print-1", erase, wire.CommandAck)
    assert older == [0]
    end = log_end(svc)
    assert gateway.idempotent(kim, "erase-kim-1", "print-1", erase, wire.CommandAck) == first
    assert older == [0] and log_end(svc) == end  # the retry ran nothing
    with pytest.raises(InvalidRequestError) as reused:
        gateway.idempotent(kim, "erase-kim-1", "print-2", erase, wire.CommandAck)
    assert reused.value.field == "Idempotency-Key"


def test_a_concurrent_request_with_the_same_key_gets_the_first_result(gateway: Gateway) -> None:
    lea = caller(gateway, "lea")
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def write() -> wire.CommandAck:
        runs.append(threading.current_thread().name)
        started.set()
        release.wait(10)
        return gateway.write(lea, "lea", wire.WriteMemory(content="Lea rides a bike", purpose=PURPOSE))

    results: dict[str, wire.CommandAck] = {}

    def request(name: str) -> None:
        results[name] = gateway.idempotent(lea, "write-lea-1", "print", write, wire.CommandAck)

    first = threading.Thread(target=request, args=("first",), name="first")
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=request, args=("second",), name="second")
    second.start()
    time.sleep(0.2)  # the second is waiting for the first's lock, not running
    release.set()
    first.join(10)
    second.join(10)
    assert runs == ["first"] and results["first"] == results["second"]


def test_a_request_that_failed_under_a_key_runs_afresh_on_a_retry(gateway: Gateway) -> None:
    max_ = caller(gateway, "max")

    def failing() -> wire.CommandAck:
        raise InvalidRequestError("content", "refused for the test")

    with pytest.raises(InvalidRequestError):
        gateway.idempotent(max_, "write-max-1", "print", failing, wire.CommandAck)
    ack = gateway.idempotent(
        max_,
        "write-max-1",
        "print",
        lambda: gateway.write(max_, "max", wire.WriteMemory(content="Max plays chess", purpose=PURPOSE)),
        wire.CommandAck,
    )
    assert ack.memory_id is not None


def test_an_idempotency_record_of_the_memory_tool_keeps_no_text_of_the_files(gateway: Gateway, svc: Services) -> None:
    """A record answers a retry; it is no copy of what an erasure must remove: the memory
    tool's output and file names (its text) are not kept, and the body's fingerprint is
    keyed (HMAC), so that it confirms no guess of the text."""
    _, token = gateway.keys.create("agent-nia", ("read", "write", "erase"), ["nia"])
    auth = {"Authorization": f"Bearer {token}"}
    url = "/v1/subjects/nia/memory-tool"
    text = "The ferret is named Wobbegongzilla"
    create = {"command": "create", "path": "/memories/ferret.md", "file_text": text, "purpose": PURPOSE}
    with TestClient(create_app(gateway)) as http:
        first = http.post(url, json=create, headers=auth | {"Idempotency-Key": "nia-create-1"})
        again = http.post(url, json=create, headers=auth | {"Idempotency-Key": "nia-create-1"})
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        assert again.json()["events"] == first.json()["events"] and again.json()["path"] == "/memories/ferret.md"
        assert again.json()["output"].startswith("A retry of an earlier create of /memories/ferret.md")
        view = {"command": "view", "path": "/memories/ferret.md", "purpose": PURPOSE}
        seen = http.post(url, json=view, headers=auth | {"Idempotency-Key": "nia-view-1"})
        assert seen.status_code == 200 and "Wobbegongzilla" in seen.json()["output"]
        delete = {"command": "delete", "path": "/memories/ferret.md", "purpose": PURPOSE}
        gone = http.post(url, json=delete, headers=auth | {"Idempotency-Key": "nia-delete-1"})
        assert gone.status_code == 200 and gone.json()["request_id"], gone.text
        retried = http.post(url, json=delete, headers=auth | {"Idempotency-Key": "nia-delete-1"})
        assert (
            retried.json()["request_id"] == gone.json()["request_id"]
            and retried.json()["events"] == gone.json()["events"]
        )
    with svc.pool.connection() as conn:
        rows = conn.execute(
            "SELECT idem_key, fingerprint, response::text FROM idempotency_keys WHERE principal = 'agent-nia'"
        ).fetchall()
    assert sorted(r[0] for r in rows) == ["nia-create-1", "nia-delete-1"]  # a view is a read: no record
    for _, print_, response in rows:
        assert "Wobbegongzilla" not in response and "ferret" not in response, response
        assert print_ not in {
            hashlib.sha256(
                f"POST\n{url}\n{json.dumps(body, sort_keys=True, separators=(',', ':'))}".encode()
            ).hexdigest()
            for body in (create, delete)
        }


def test_one_memory_of_a_subject_may_be_a_summary(gateway: Gateway, svc: Services) -> None:
    ora = caller(gateway, "ora")
    fact = gateway.write(ora, "ora", wire.WriteMemory(content="Ora likes rowing", purpose=PURPOSE)).memory_id
    assert fact is not None
    summary = gateway.write(
        ora, "ora", wire.WriteMemory(content="Ora rows", purpose=PURPOSE, kind="summary", derived_from=[fact])
    ).memory_id
    assert summary is not None
    svc.catch_up()
    found = gateway.memory(ora, "ora", summary).memory
    assert found.kind == "summary" and found.status == "active" and found.content == "Ora rows"


def test_a_listing_pages_by_memory_id_and_refuses_an_after_that_is_not_one(gateway: Gateway, svc: Services) -> None:
    pia = caller(gateway, "pia")
    ids = [
        gateway.write(pia, "pia", wire.WriteMemory(content=f"Pia fact {i}", purpose=PURPOSE)).memory_id
        for i in range(3)
    ]
    svc.catch_up()
    first = gateway.memories(pia, "pia", limit=2)
    assert [m.memory_id for m in first.memories] == ids[:2] and first.next_after == ids[1]
    rest = gateway.memories(pia, "pia", limit=2, after=str(first.next_after).upper())  # an id in any case
    assert [m.memory_id for m in rest.memories] == ids[2:] and rest.next_after is None
    with pytest.raises(InvalidRequestError) as refused:  # "garbage" sorts after every id: an empty page, silently
        gateway.memories(pia, "pia", after="garbage")
    assert (refused.value.field, refused.value.rule) == (
        "after",
        "must be a memory id (a UUID: the next_after of the page before)",
    )
