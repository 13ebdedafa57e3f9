"""``memledger serve`` as agents use it: every route through the Python client, the
cross-subject suite, idempotency, errors and rate limits; in the embedded default and in
the distributed mode (Kafka, PostgreSQL and Redis of the test services, with
``memledger worker``). One serve process per mode for the whole module."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.e2e import serving
from tests.e2e.conftest import Cli, wait_until
from workers import wire
from workers.client import (
    AsyncLedgerClient,
    Conflict,
    Forbidden,
    InvalidRequest,
    LedgerClient,
    NotFound,
    RetryPolicy,
    Unauthenticated,
)
from workers.settings import Settings

pytestmark = [pytest.mark.e2e]

PURPOSE = "technical_writing"
RATE_ENV = {"MEMLEDGER_API_WRITE_RATE_PER_S": "20", "MEMLEDGER_API_WRITE_BURST": "40"}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.embedded(tmp_path_factory.mktemp("serve-embedded"), RATE_ENV) as served:
        yield served


@pytest.fixture(scope="module")
def distributed(
    tmp_path_factory: pytest.TempPathFactory, pg_dsn: str, kafka_bootstrap: str, redis_url: str
) -> Iterator[serving.Served]:
    root = tmp_path_factory.mktemp("serve-distributed")
    with serving.distributed(root, pg_dsn, kafka_bootstrap, redis_url, RATE_ENV) as served:
        yield served


@pytest.fixture(scope="module", params=["embedded", "distributed"])
def served(request: pytest.FixtureRequest) -> serving.Served:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


class Tenant:
    """A subject and a key granted for it alone."""

    def __init__(self, served: serving.Served, name: str) -> None:
        self.subject = f"{name}-{uuid.uuid4().hex[:8]}"
        self.token = served.key(f"agent-{self.subject}", [self.subject])
        self.client = LedgerClient(served.url, self.token, retry=RetryPolicy(attempts=6, max_s=5))


@pytest.fixture(scope="module")
def admin(served: serving.Served) -> Iterator[LedgerClient]:
    token = served.key("ops", ["*"], ("read", "erase", "admin"))
    with LedgerClient(served.url, token) as client:
        yield client


@pytest.fixture
def tenant(served: serving.Served) -> Iterator[Callable[[str], Tenant]]:
    """Makes tenants of ``served``; their clients are closed afterwards."""
    made: list[Tenant] = []

    def make(name: str) -> Tenant:
        made.append(Tenant(served, name))
        return made[-1]

    yield make
    for t in made:
        t.client.close()


def test_every_route_through_the_client(
    served: serving.Served, tenant: Callable[[str], Tenant], admin: LedgerClient
) -> None:
    t = tenant("alice")
    c, s = t.client, t.subject
    assert c.healthz().status == "ok" and c.readyz().ready
    first = c.write(s, "Alice prefers short answers", PURPOSE, key="answer_length", kind="preference", agent="planner")
    assert first.events[0].type == "MemoryWritten" and first.positions
    # read your own write: the memory is recalled at once, waiting for its positions
    recalled = c.recall(s, "how long should answers be", PURPOSE, after=first)
    assert [i.memory_id for i in recalled.items] == [first.memory_id]
    assert recalled.items[0].provenance["writer"] == f"agent-{s}" and recalled.items[0].provenance["agent"] == "planner"
    assert recalled.tokens == recalled.items[0].tokens > 0 and recalled.as_of is None
    # a budget below the memory's length leaves it out; before it was written it was not known
    assert c.recall(s, "how long should answers be", PURPOSE, max_tokens=recalled.tokens - 1).items == []
    before = datetime.now(UTC) - timedelta(hours=1)
    past = c.recall(s, "how long should answers be", PURPOSE, as_of=before)
    assert past.items == [] and past.as_of is not None
    batch = c.write_batch(
        s,
        [
            wire.WriteMemory(content="Alice uses Python 3.12", purpose=PURPOSE, key="python", turn_id="turn-7"),
            wire.WriteMemory(content="Alice lives in Lyon", purpose=PURPOSE, key="city", source_ref="crm"),
        ],
    )
    python_id, city_id = (r.memory_id for r in batch.results)
    newer = c.supersede(s, first.memory_id, "Alice prefers detailed answers")
    detail = c.memory(s, first.memory_id, after=newer)
    assert detail.memory.status == "superseded" and detail.memory.superseded_by == newer.memory_id
    assert [h.event_type for h in detail.history] == ["MemoryWritten", "MemorySuperseded"]
    page = c.memories(s, after=newer)
    assert {m.memory_id for m in page.memories} == {newer.memory_id, python_id, city_id}
    replacing = next(m for m in page.memories if m.memory_id == newer.memory_id)
    assert replacing.supersedes == [first.memory_id] and replacing.content == "Alice prefers detailed answers"
    assert len(c.memories(s, include_all=True, after=newer).memories) == 4
    # an inference, confirmed; a redaction; a conflict between two sources
    inferred = c.write(s, "Alice writes Python daily", PURPOSE, kind="inference", derived_from=[python_id])
    assert c.confirm(s, inferred.memory_id).events[0].type == "MemoryConfirmed"
    assert c.redact(s, city_id, "Alice lives in [redacted]").memory_id == city_id
    c.write(s, "Alice's editor is vim", PURPOSE, key="editor", source_ref="doc-a", veracity="imported")
    clash = c.write(s, "Alice's editor is emacs", PURPOSE, key="editor", source_ref="doc-b", veracity="imported")
    assert any(e.type == "ConflictDetected" for e in clash.events)
    c.wait(clash)
    assert len(c.conflicts(s)) == 1
    revoked = c.revoke_consent(s, purpose="marketing", allow_unmatched=True)
    assert revoked.events[0].type == "ConsentRevoked"
    # erasure by id, by source, whole subject; trace, report, audit
    by_id = c.erase(s, [python_id])
    assert set(by_id.affected) == {python_id, inferred.memory_id}  # the inference derived from it goes too
    by_source = c.erase(s, source="doc-b")
    assert by_source.request_id
    whole = c.erase(s, whole_subject=True)
    wait_until(lambda: admin.trace(whole.request_id).verdict == "complete", 90, "the erasure's trace to complete")
    trace = c.trace(by_id.request_id)
    assert trace.subject_id == s and {st.store for st in trace.stores} >= {"facts", "vectors", "cache", "log"}
    assert "<html" in c.trace_html(by_id.request_id).lower()
    report = admin.erasure_report(datetime.now(UTC) - timedelta(hours=1))
    assert {by_id.request_id, by_source.request_id, whole.request_id} <= {r.request_id for r in report.requests}
    assert c.recall(s, "Alice", PURPOSE, after=whole).items == []
    assert {v.name for v in admin.versions()} == {"facts", "vectors", "cache", "summaries"}
    assert admin.lag().end_offsets
    entries = admin.audit(subject_id=s).entries
    assert {"ok"} <= {e.outcome for e in entries} and any(e.reason.startswith("erasure ") for e in entries)
    assert all("Alice" not in e.reason for e in entries)  # no content in the audit log


def test_the_async_client_writes_and_recalls(served: serving.Served, tenant: Callable[[str], Tenant]) -> None:
    t = tenant("async")

    async def run() -> list[str]:
        async with AsyncLedgerClient(served.url, t.token) as c:
            ack = await c.write(t.subject, "Bo likes tea", PURPOSE)
            result = await c.recall(t.subject, "tea", PURPOSE, after=ack)
            return [i.content for i in result.items]

    assert asyncio.run(run()) == ["Bo likes tea"]


def test_a_subject_id_with_a_slash_or_a_percent_sign_reaches_its_routes(
    served: serving.Served, admin: LedgerClient
) -> None:
    """The ledger's identifiers may hold '/' (the CLI and MCP take one): the client encodes
    it in the path segment and the server routes on the raw path, so every subject route
    finds it, and its memories are that subject's, not another's."""
    team = f"team-{uuid.uuid4().hex[:8]}"
    token = served.key(f"agent-{team}", [f"{team}/*"])
    with LedgerClient(served.url, token) as c:
        for s in (f"{team}/alpha", f"{team}/50%25/x", f"{team}/caf\u00e9%2Fz"):
            ack = c.write(s, f"{s} prefers tabs", PURPOSE, key="indent")
            assert [i.memory_id for i in c.recall(s, "tabs", PURPOSE, after=ack).items] == [ack.memory_id]
            assert [m.memory_id for m in c.memories(s, after=ack).memories] == [ack.memory_id]
            assert c.memory(s, ack.memory_id, after=ack).memory.subject_id == s
            erased = c.erase(s, [ack.memory_id])
            assert c.trace(erased.request_id).subject_id == s
        with pytest.raises(Forbidden):  # the grant is team/*: the slash is no way out of it
            c.write(team, "x", PURPOSE)
    assert served.cli.json("memories", f"{team}/alpha", "--all")["memories"][0]["status"] == "erased"
    audited = [e for e in admin.audit(limit=1000).entries if (e.subject_id or "").startswith(team)]
    assert {f"{team}/alpha", team} <= {e.subject_id for e in audited}
    assert all(":segment" not in e.route for e in audited)  # the route's template, as the OpenAPI document has it


def test_a_key_for_s2_gets_nothing_of_s1_and_every_attempt_is_audited(
    served: serving.Served, tenant: Callable[[str], Tenant], admin: LedgerClient
) -> None:
    s1, s2 = tenant("s1"), tenant("s2")
    secret = "S1 secret: the launch code is 0000"
    mem = s1.client.write(s1.subject, secret, PURPOSE, key="code", turn_id="turn-s1")
    erased = s1.client.write(s1.subject, "S1 erasable", PURPOSE)
    request = s1.client.erase(s1.subject, [erased.memory_id]).request_id
    assert request is not None
    s1.client.wait(mem)
    mid, a, b = mem.memory_id, s1.subject, s2.subject
    attempts = [
        ("POST", f"/v1/subjects/{a}/memories", {"content": "x", "purpose": PURPOSE}),
        ("POST", f"/v1/subjects/{a}/memories/batch", {"memories": [{"content": "x", "purpose": PURPOSE}]}),
        ("GET", f"/v1/subjects/{a}/memories", None),
        ("GET", f"/v1/subjects/{a}/memories/{mid}", None),
        ("GET", f"/v1/subjects/{b}/memories/{mid}", None),  # S1's memory under S2's own subject
        ("POST", f"/v1/subjects/{a}/memories/{mid}/supersede", {"content": "x"}),
        ("POST", f"/v1/subjects/{b}/memories/{mid}/supersede", {"content": "x"}),
        ("POST", f"/v1/subjects/{a}/memories/{mid}/confirm", None),
        ("POST", f"/v1/subjects/{b}/memories/{mid}/confirm", None),
        ("POST", f"/v1/subjects/{a}/memories/{mid}/redact", {"replacement": "x"}),
        ("POST", f"/v1/subjects/{b}/memories/{mid}/redact", {"replacement": "x"}),
        ("POST", f"/v1/subjects/{a}/consent/revoke", {"purpose": PURPOSE}),
        ("POST", f"/v1/subjects/{a}/erasures", {"whole_subject": True}),
        ("POST", f"/v1/subjects/{b}/erasures", {"memory_ids": [mid]}),
        ("POST", f"/v1/subjects/{a}/recall", {"query": "launch code", "purpose": PURPOSE}),
        ("GET", f"/v1/subjects/{a}/conflicts", None),
        ("GET", f"/v1/erasures/{request}", None),
        ("GET", f"/v1/erasures/{request}/report.html", None),
        ("GET", "/v1/lag", None),
        ("GET", "/v1/versions", None),
        ("GET", "/v1/audit", None),
    ]
    before = {e.id for e in admin.audit(limit=1000).entries}
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {s2.token}"}) as http:
        for method, path, body in attempts:
            r = http.request(method, path, json=body)
            assert r.status_code in (403, 404), (method, path, r.status_code, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            for leaked in (secret, "launch code", "turn-s1", erased.memory_id):
                assert leaked not in r.text, (method, path, r.text)
            if f"/{b}/" in path:
                assert r.status_code == 404  # another subject's memory is not revealed
    refused = [e for e in admin.audit(limit=1000).entries if e.id not in before and e.outcome == "refused"]
    assert len(refused) >= len(attempts)
    assert {e.principal for e in refused} == {f"agent-{b}"}
    assert all(secret not in e.reason for e in refused)
    # no credential, a bad one and a revoked one: 401 with WWW-Authenticate
    for headers in ({}, {"Authorization": "Bearer mlk_0000000000000000_" + "A" * 43}, {"Authorization": "Basic eDp5"}):
        r = httpx.post(f"{served.url}/v1/subjects/{a}/recall", json={"query": "x", "purpose": PURPOSE}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
    key_id = s2.token.split("_")[1]
    assert served.cli.json("keys", "revoke", key_id)["revoked_at"] is not None
    with pytest.raises(Unauthenticated):
        s2.client.recall(b, "x", PURPOSE)


def test_a_retry_with_the_same_idempotency_key_changes_nothing(
    served: serving.Served, tenant: Callable[[str], Tenant], admin: LedgerClient
) -> None:
    t = tenant("idem")
    headers = {"Authorization": f"Bearer {t.token}", "Idempotency-Key": f"k-{uuid.uuid4()}"}
    body = {"content": "Cy drinks coffee", "purpose": PURPOSE}
    url = f"{served.url}/v1/subjects/{t.subject}/memories"
    first = httpx.post(url, json=body, headers=headers)
    ends = admin.lag().end_offsets
    again = httpx.post(url, json=body, headers=headers)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert admin.lag().end_offsets == ends  # nothing appended the second time
    other = httpx.post(url, json=body | {"content": "Cy drinks tea"}, headers=headers)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    assert [
        m.content for m in t.client.memories(t.subject, after=wire.CommandAck.model_validate(first.json())).memories
    ] == ["Cy drinks coffee"]


def test_bad_requests_get_problem_documents_naming_the_field(
    served: serving.Served, tenant: Callable[[str], Tenant]
) -> None:
    t = tenant("bad")
    auth = {"Authorization": f"Bearer {t.token}"}
    url = f"{served.url}/v1/subjects/{t.subject}"
    cases = [
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "kind": "rumour"}, 422, "kind"),
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "scope": "planet:mars"}, 422, "scope"),
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "confidence": 2}, 422, "confidence"),
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "subject_id": "other"}, 422, "subject_id"),
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "writer": "someone-else"}, 422, "writer"),
        (f"{url}/erasures", {}, 422, "memory_ids"),
        (
            f"{url}/recall",
            {"query": "x", "purpose": PURPOSE, "wait_for": [{"partition": 0, "offset": 10**9}]},
            422,
            "wait_for",
        ),
    ]
    for target, body, status, field in cases:
        r = httpx.post(target, json=body, headers=auth)
        assert r.status_code == status and r.json()["field"] == field, (body, r.text)
        assert r.headers["content-type"] == "application/problem+json" and "Traceback" not in r.text
    r = httpx.post(f"{url}/memories", content=b"{not json", headers=auth | {"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body"
    far = "0001-01-01T00:30:00+01:00"  # no UTC time in Python's range
    for target, body, field in (
        (f"{url}/recall", {"query": "x", "purpose": PURPOSE, "as_of": far}, "as_of"),
        (f"{url}/memories", {"content": "x", "purpose": PURPOSE, "expires_at": far}, "expires_at"),
        (f"{url}/erasures", {"whole_subject": "yes"}, "whole_subject"),  # a flag is a JSON boolean
    ):
        r = httpx.post(target, json=body, headers=auth)
        assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)
    r = httpx.get(f"{served.url}/v1/erasure-report", params={"since": far}, headers=auth)
    assert r.status_code == 422 and r.json()["field"] == "since", r.text
    big = {"content": "x" * 60_000, "purpose": PURPOSE}
    r = httpx.post(f"{url}/memories/batch", json={"memories": [big] * 40}, headers=auth)
    assert r.status_code == 413 and r.json()["field"] == "body"
    ack = t.client.write(t.subject, "Di is active", PURPOSE)
    t.client.erase(t.subject, [str(ack.memory_id)])
    with pytest.raises(Conflict) as conflict:  # an erased memory cannot be confirmed
        t.client.confirm(t.subject, str(ack.memory_id))
    assert conflict.value.field == "memory_id"
    with pytest.raises(NotFound):
        t.client.supersede(t.subject, str(uuid.uuid4()), "x")
    with pytest.raises(InvalidRequest) as invalid:
        t.client.recall(t.subject, "x", PURPOSE, scope=["planet:mars"])
    assert invalid.value.field == "scope"
    with pytest.raises(Forbidden):
        t.client.lag()  # no admin scope


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def test_the_write_boundary_screens_every_way_in_and_a_retry_changes_nothing(
    served: serving.Served, tenant: Callable[[str], Tenant], admin: LedgerClient
) -> None:
    """Screening, retries and an erasure's earlier versions through the HTTP API: a
    secret is refused with a problem document naming the field, by a write, a batch, a
    supersession and the memory tool, and nothing is appended; personal data raises the
    class; the same write again in the same turn is a no-op returning the first result."""
    t = tenant("boundary")
    c, s = t.client, t.subject
    auth = {"Authorization": f"Bearer {t.token}"}
    url = f"{served.url}/v1/subjects/{s}"
    secret = f"the deploy key is {AWS_KEY}"
    ends = admin.lag().end_offsets
    refusals = [
        httpx.post(f"{url}/memories", json={"content": secret, "purpose": PURPOSE}, headers=auth),
        httpx.post(
            f"{url}/memories/batch",
            json={
                "memories": [{"content": "Eve likes tea", "purpose": PURPOSE}, {"content": secret, "purpose": PURPOSE}]
            },
            headers=auth,
        ),
        httpx.post(
            f"{url}/memory-tool",
            json={"command": "create", "path": "/memories/ops.md", "file_text": secret, "purpose": PURPOSE},
            headers=auth,
        ),
    ]
    for r, field in zip(refusals, ("content", "memories.1.content", "content"), strict=True):  # a batch names its item
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
        problem = r.json()
        assert problem["field"] == field and "AWS Access Key" in problem["rule"], problem
        assert AWS_KEY not in r.text and "Traceback" not in r.text
    assert admin.lag().end_offsets == ends  # nothing refused was appended
    kept = c.write(s, "Eve prefers short answers", PURPOSE, key="answer_length", turn_id="turn-1")
    with pytest.raises(InvalidRequest) as refused:
        c.supersede(s, kept.memory_id, secret)
    assert refused.value.field == "content" and AWS_KEY not in str(refused.value)
    # a client's retry of the same write in the same turn: the first result, nothing appended
    ends = admin.lag().end_offsets
    again = c.write(s, "Eve prefers short answers", PURPOSE, key="answer_length", turn_id="turn-1")
    assert again.memory_id == kept.memory_id and again.events == [] and again.repeat
    assert again.first_event_ids == [e.event_id for e in kept.events]
    assert admin.lag().end_offsets == ends
    # personal data raises a public memory to the personal class, whose consent rule applies
    reach = c.write(s, "Reach Eve at eve@example.com", PURPOSE, sensitivity="public", consent_ref="consent-1")
    assert reach.screening is not None and reach.screening.raised_from == "public"
    assert [(f.kind, f.action) for f in reach.screening.findings] == [("email_address", "raised")]
    listed = {m.memory_id: m for m in c.memories(s, after=reach).memories}
    assert listed[reach.memory_id].sensitivity == "personal"
    # an erasure of the replacement: the earlier version awaits confirmation; with its history, none is left
    newer = c.supersede(s, kept.memory_id, "Eve prefers detailed answers")
    erased = c.erase(s, [newer.memory_id])
    assert erased.reinstated == [kept.memory_id] and erased.earlier_versions == [kept.memory_id]
    assert c.memory(s, kept.memory_id, after=erased).memory.status == "needs_confirmation"
    traced = c.trace(erased.request_id)
    assert [(v.memory_id, v.reinstated) for v in traced.earlier_versions] == [(kept.memory_id, True)]
    assert traced.disk is not None and traced.disk.store == "disk"
    newest = c.supersede(s, kept.memory_id, "Eve prefers answers in French")
    gone = c.erase(s, [newest.memory_id], with_history=True)
    assert set(gone.affected) == {newest.memory_id, kept.memory_id} and gone.earlier_versions == []
    assert c.trace(gone.request_id).with_history


def test_writes_over_the_keys_rate_get_429_and_the_client_retries(
    served: serving.Served, tenant: Callable[[str], Tenant]
) -> None:
    t = tenant("rate")
    auth = {"Authorization": f"Bearer {t.token}"}
    batch = {"memories": [{"content": f"fact {n}", "purpose": PURPOSE} for n in range(40)]}
    url = f"{served.url}/v1/subjects/{t.subject}/memories/batch"
    assert httpx.post(url, json=batch, headers=auth).status_code == 200  # the whole burst
    r = httpx.post(url, json=batch, headers=auth)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and r.json()["field"] == "rate"
    ack = t.client.write(t.subject, "after the wait", PURPOSE)  # retried after Retry-After
    assert ack.memory_id


def test_openapi_documents_every_route(served: serving.Served, tenant: Callable[[str], Tenant]) -> None:
    doc = httpx.get(served.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = set(doc["paths"])
    assert "/v1/subjects/{subject_id}/recall" in paths and "/v1/erasures/{request_id}" in paths
    assert not any("operator" in p for p in paths)
    assert httpx.get(served.url + "/docs").status_code == 200


def test_the_cli_goes_through_serve_with_the_same_output(embedded: serving.Served, tmp_path: Path) -> None:
    cli = embedded.cli
    out = cli.run("write", "zed", "Zed prefers tabs", "--purpose", PURPOSE, "--agent", "shell").stdout
    assert re.fullmatch(r"wrote memory [0-9a-f-]{36} \(revision 1\) at partition 0 offset \d+\n", out), out
    recalled = cli.json("recall", "zed", "tabs", "--purpose", PURPOSE)
    assert recalled["items"][0]["provenance"]["writer"] == "cli"  # applied before the command returned
    assert "by cli (agent shell) at" in cli.run("recall", "zed", "tabs", "--purpose", PURPOSE).stdout
    listed = cli.run("memories", "zed").stdout
    assert listed.startswith("1 memory of zed:") and "Zed prefers tabs" in listed
    for args, words in (
        (("worker",), "worker: memledger serve (pid"),
        (("serve",), "serve: memledger serve (pid"),
        (("rotate-master-key", "--new-key-file", "k"), "rotate-master-key: memledger serve (pid"),
        (("write", "zed", "x", "--purpose", PURPOSE, "--writer", "someone"), "provenance.writer"),
        (("--principal", "stranger", "recall", "zed", "x", "--purpose", PURPOSE), "may not read"),
        # not UTF-8 (a Latin-1 terminal's "café"): the line the CLI prints without serve
        (("write", "zed", "caf\udce9", "--purpose", PURPOSE), "error: content: Input should be a valid string"),
        (("write", "zed", "x", "--purpose", "caf\udce9"), "error: purpose: Input should be a valid string"),
    ):
        proc = cli.run(*args, check=False)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    erased = cli.json("erase", "zed", "--all")
    html = tmp_path / "trace.html"
    cli.run("trace", erased["request_id"], "--html", str(html))
    assert html.read_text().lstrip().lower().startswith("<!doctype html")
    data_dir = Path(cli.env["MEMLEDGER_DATA_DIR"])
    assert (data_dir / "serve.json").stat().st_mode & 0o077 == 0  # the operator's credential: owner only
    assert json.loads((data_dir / "serve.json").read_text())["url"] == embedded.url


def test_a_setting_of_the_cli_that_serve_would_not_use_is_refused(embedded: serving.Served, tmp_path: Path) -> None:
    policy = tmp_path / "screening.toml"
    policy.write_text("")
    env = dict(embedded.cli.env)
    other = Cli({**env, "MEMLEDGER_SCREENING_POLICY_FILE": str(policy), "MEMLEDGER_RECALL_RRF_K": "7"})
    proc = other.run("write", "yan", "Yan prefers tea", "--purpose", PURPOSE, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: MEMLEDGER_RECALL_RRF_K, MEMLEDGER_SCREENING_POLICY_FILE: memledger serve")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Yan" not in embedded.cli.run("memories", "yan").stdout  # nothing written
    # serve's own values, and the settings of serve's process alone, go through
    same = Cli(
        {
            **env,
            "MEMLEDGER_RECALL_RRF_K": str(Settings.model_fields["recall_rrf_k"].default),
            "MEMLEDGER_API_WRITE_BURST": "5",
        }
    )
    assert "wrote memory" in same.run("write", "yan", "Yan prefers tea", "--purpose", PURPOSE).stdout


def test_schemathesis_finds_no_5xx_and_no_response_outside_the_schema(embedded: serving.Served) -> None:
    """Every operation with generated good and bad inputs (bounded: 5 examples an
    operation and phase), by a key granted every subject so that inputs reach the ledger."""
    token = embedded.key("fuzzer", ["*"], ("read", "write", "erase", "admin"))
    checks = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{embedded.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            checks,
            "--max-examples",
            "5",
            "--phases",
            "examples,coverage,fuzzing",
            "--workers",
            "1",
            "--seed",
            "1",
            "--request-timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "failed" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:]


def test_several_serve_processes_share_keys_and_data_in_the_distributed_mode(
    distributed: serving.Served, tmp_path: Path
) -> None:
    other = serving.start(distributed.cli.env, tmp_path)
    try:
        subject = f"shared-{uuid.uuid4().hex[:8]}"
        token = distributed.key(f"agent-{subject}", [subject])
        with LedgerClient(distributed.url, token) as a, LedgerClient(other.url, token) as b:
            ack = a.write(subject, "Eve reads the changelog first", PURPOSE)
            assert [i.memory_id for i in b.recall(subject, "changelog", PURPOSE, after=ack).items] == [ack.memory_id]
            distributed.cli.run("keys", "revoke", token.split("_")[1])
            for client in (a, b):  # revoked at once in every process
                with pytest.raises(Unauthenticated):
                    client.memories(subject)
    finally:
        assert serving.stop(other) == 0


def scraped(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The samples of a Prometheus text exposition, by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def label_values(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {v for (_, ls) in samples for _, v in ls}


def test_metrics_count_requests_refusals_and_recalls_for_an_admin_key_only(
    served: serving.Served, tenant: Callable[[str], Tenant]
) -> None:
    t, other = tenant("metrics"), tenant("metrics-other")
    ack = t.client.write(t.subject, "Dana reads the release notes first", PURPOSE)
    t.client.recall(t.subject, "release notes", PURPOSE, after=ack)
    with pytest.raises(Forbidden):
        t.client.recall(other.subject, "release notes", PURPOSE)
    assert httpx.get(served.url + "/metrics", timeout=30).status_code == 401
    bearer = {"Authorization": f"Bearer {t.token}"}
    assert httpx.get(served.url + "/metrics", headers=bearer, timeout=30).status_code == 403  # no admin scope
    scraper = served.key("prometheus", [], ("admin",))
    response = httpx.get(served.url + "/metrics", headers={"Authorization": f"Bearer {scraper}"}, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = scraped(response.text)
    recall = "/v1/subjects/{subject_id}/recall"
    assert value(samples, "memledger_events_appended_total", type="MemoryWritten") >= 1
    assert value(samples, "memledger_recall_duration_seconds_count") >= 1
    assert value(samples, "memledger_http_requests_total", method="POST", route=recall, status="200") >= 1
    assert value(samples, "memledger_http_request_duration_seconds_count", route=recall) >= 2
    assert value(samples, "memledger_http_refusals_total", route=recall, reason="forbidden") >= 1
    assert value(samples, "memledger_http_refusals_total", route="/metrics", reason="unauthenticated") >= 1
    assert value(samples, "memledger_http_refusals_total", route="/metrics", reason="forbidden") >= 1
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "memledger_heap_frozen_objects") > 0  # start-up settled (workers.serve.runtime)
    # the ledger's state, in both modes (in the distributed mode the workers apply, serve shows it too)
    position = ack.positions[0]
    applied = ("memledger_projection_applied_offset", frozenset({("projection", "facts_v1"), ("partition", "0")}))
    wanted = frozenset({("projection", "facts_v1"), ("partition", str(position.partition))})
    assert applied in samples and ("memledger_projection_lag_records", wanted) in samples
    assert ("memledger_outbox_records", frozenset()) in samples
    assert value(samples, "memledger_metrics_source_up", source="postgres") == 1
    secrets = {t.subject, other.subject, ack.memory_id, t.token, scraper, *(e.event_id for e in ack.events)}
    assert not any(s and s in v for v in label_values(samples) for s in secrets)


def test_the_worker_supervisor_serves_its_childrens_metrics_and_the_erasures(distributed: serving.Served) -> None:
    t = Tenant(distributed, "worker-metrics")
    with t.client:
        kept = t.client.write(t.subject, "Finn prefers tea", PURPOSE)
        gone = t.client.write(t.subject, "Finn's door code is 2468", PURPOSE, key="door")
        erased = t.client.erase(t.subject, [gone.memory_id or ""], reason="the subject asked")
        assert erased.request_id is not None
        request_id = erased.request_id
        wait_until(lambda: t.client.trace(request_id).verdict == "complete", 120, "the erasure to complete")
    logs = "".join(p.read_text() for p in Path(distributed.cli.env["MEMLEDGER_DATA_DIR"]).glob("worker-*.log"))
    found = re.search(r"worker: metrics at (http://\S+)", logs)
    assert found is not None, logs[-3000:]
    samples = scraped(httpx.get(found.group(1), timeout=30).text)  # loopback, no credential
    for name in ("facts", "vectors", "cache", "summaries"):
        assert value(samples, "memledger_projection_records_applied_total", projection=f"{name}_v1") >= 3  # children
        assert value(samples, "memledger_projection_batch_duration_seconds_count", projection=f"{name}_v1") >= 1
        assert value(samples, "memledger_projection_info", projection=f"{name}_v1", state="serving") == 1
        for partition in ("0", "1"):
            labels = frozenset({("projection", f"{name}_v1"), ("partition", partition)})
            assert ("memledger_projection_applied_offset", labels) in samples
            assert samples[("memledger_projection_lag_records", labels)] >= 0
            assert ("memledger_projection_lag_seconds", labels) in samples
    assert value(samples, "memledger_log_end_offset") >= 3
    assert value(samples, "memledger_erasures_complete_total") >= 1
    assert value(samples, "memledger_erasure_propagation_seconds_count") >= 1
    assert value(samples, "memledger_metrics_source_up", source="log") == 1
    assert value(samples, "memledger_metrics_source_up", source="postgres") == 1
    assert value(samples, "process_resident_memory_bytes") > 0  # the supervisor's own
    secrets = {t.subject, kept.memory_id, gone.memory_id, request_id}
    assert not any(s and s in v for v in label_values(samples) for s in secrets)
