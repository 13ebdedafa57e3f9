"""The application layer's pure parts: token buckets, keys, fingerprints, the error
translation, the CLI's forwarding rules, the problem documents and the client's
retries (on an httpx mock transport)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from contracts import EraseMemories, utc_now
from ledger.crypto import Keyring, new_master_key, parse_master_key
from ledger.errors import InvalidCommandError, NotAuthorisedError, UnknownMemoryError
from tests.builders import memory_write
from tests.imports import server_dependencies_imported
from workers.api import parse_positions
from workers.api.problems import problem
from workers.client import LedgerClient, RateLimited, RetryPolicy
from workers.gateway import ConflictError, ForbiddenError, InvalidRequestError, NotFoundError, fingerprint, translate
from workers.gateway.keys import _TOKEN, ApiKey, new_token, token_hash
from workers.gateway.ratelimit import Rate, TokenBuckets
from workers.serve.files import ServeFile
from workers.serve.forward import absolute_paths, refusal, runs_locally, split_command
from workers.serve.runtime import is_loopback


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock)
    rate = Rate(rate_per_s=2.0, burst=4)
    assert [buckets.take("k", rate) for _ in range(4)] == [0.0] * 4
    assert buckets.take("k", rate) == pytest.approx(0.5)  # one token takes 1/2 s to come back
    clock.now += 0.5
    assert buckets.take("k", rate) == 0.0
    assert buckets.take("other", rate) == 0.0  # buckets are per name
    assert buckets.take("k", Rate(rate_per_s=0, burst=1), 1000) == 0.0  # rate 0: no limit


def test_a_request_larger_than_the_burst_waits_for_a_full_bucket() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock)
    rate = Rate(rate_per_s=10.0, burst=5)
    assert buckets.take("k", rate, 3) == 0.0
    assert buckets.take("k", rate, 50) == pytest.approx(0.3)  # 2 left, 5 needed at most


def test_tokens_carry_256_bits_and_only_their_hash_is_kept() -> None:
    key_id, token = new_token()
    match = _TOKEN.match(token)
    assert match is not None and match.group(1) == key_id
    assert len(match.group(2)) == 43  # 32 bytes in URL-safe base64 without padding
    assert len(token_hash(token)) == 32 and token_hash(token) != token_hash(new_token()[1])


def test_a_key_grants_its_scopes_on_its_subjects_only() -> None:
    from contracts import utc_now

    key = ApiKey("k", "agent", ("read", "admin"), ("user-*",), None, False, utc_now(), None)
    p = key.as_principal()
    assert p.may("read", "user-1") and not p.may("write", "user-1") and not p.may("read", "other")
    nobody = ApiKey("k", "agent", ("read",), (), None, False, utc_now(), None).as_principal()
    assert not nobody.may("read", "user-1")  # deny by default


def test_the_fingerprint_covers_method_path_and_body_under_the_keyring_key() -> None:
    keyring = Keyring(parse_master_key(new_master_key()))
    a = fingerprint("POST", "/v1/x", {"b": 1, "a": [1, 2]}, keyring.fingerprint)
    assert a == fingerprint("post", "/v1/x", {"a": [1, 2], "b": 1}, keyring.fingerprint)
    assert a != fingerprint("POST", "/v1/y", {"b": 1, "a": [1, 2]}, keyring.fingerprint)
    assert a != fingerprint("POST", "/v1/x", {"b": 2, "a": [1, 2]}, keyring.fingerprint)
    other = Keyring(parse_master_key(new_master_key()))  # without the key, no guess of a body is confirmed
    assert a != fingerprint("POST", "/v1/x", {"b": 1, "a": [1, 2]}, other.fingerprint)


def test_ledger_errors_become_gateway_errors_with_their_field() -> None:
    forbidden = translate(NotAuthorisedError("p", "read", "s"))
    assert isinstance(forbidden, ForbiddenError) and forbidden.field == "subject_id"
    assert forbidden.rule == "principal 'p' may not read memories of subject 's'"
    missing = translate(UnknownMemoryError("m-1", "memory_ids"))
    assert isinstance(missing, NotFoundError) and missing.field == "memory_ids"
    assert isinstance(translate(InvalidCommandError("memory_id", "memory 'm' is erased")), ConflictError)
    invalid = translate(InvalidCommandError("retention.expires_at", "must be in the future"))
    assert isinstance(invalid, InvalidRequestError) and invalid.field == "expires_at"  # the body's field
    basis = translate(InvalidCommandError("provenance.consent_ref", "needs provenance.consent_ref or retention.basis"))
    assert (basis.field, basis.rule) == ("consent_ref", "needs consent_ref or basis")
    with pytest.raises(ValidationError) as nested:
        memory_write(provenance={"writer": "cli", "written_at": utc_now(), "consent_ref": ""})
    empty = translate(nested.value)
    assert empty.field == "consent_ref" and "provenance" not in empty.rule
    with pytest.raises(ValidationError) as caught:
        EraseMemories(subject_id="s", reason="r")
    whole = translate(caught.value)
    assert whole.field == "memory_ids" and whole.rule.startswith("give exactly one")


def test_forwarding_knows_which_commands_go_through_serve() -> None:
    info = ServeFile("http://127.0.0.1:1", 42, "t")
    assert split_command(["--data-dir", "d", "-v", "--principal=p", "recall", "x"]) == ("recall", ["x"])
    assert runs_locally(["--help"]) and runs_locally(["demo"]) and runs_locally(["eval", "scenarios"])
    assert not runs_locally(["eval", "scenarios", "--in-place"]) and not runs_locally(["write", "a", "b"])
    assert (
        refusal(["worker"], info)
        == "worker: memledger serve (pid 42) already runs the projections of this data directory"
    )
    assert refusal(["recall", "a", "b"], info) is None
    assert absolute_paths(["trace", "er-1", "--html", "r.html"], Path("/w")) == ["trace", "er-1", "--html", "/w/r.html"]
    assert absolute_paths(["--html=r.html"], Path("/w")) == ["--html=/w/r.html"]
    assert absolute_paths(["ingest-locomo", "--limit", "1", "l.json"], Path("/w"))[-1] == "/w/l.json"


def test_problem_documents_carry_retry_after_and_www_authenticate() -> None:
    limited = problem(429, "rate", "over", retry_after_s=0.2)
    assert limited.headers["retry-after"] == "1" and limited.media_type == "application/problem+json"
    body = json.loads(bytes(limited.body))
    assert body["status"] == 429 and body["detail"] == "rate: over" and body["field"] == "rate"
    assert problem(401, "authorization", "unknown API key").headers["www-authenticate"].startswith("Bearer")


def test_wait_for_positions_are_partition_colon_offset() -> None:
    assert [(p.partition, p.offset) for p in parse_positions(["0:12", "3:0"])] == [(0, 12), (3, 0)]
    for bad in ("12", "a:1", "-1:2", "1:"):
        with pytest.raises(InvalidRequestError, match="wait_for"):
            parse_positions([bad])


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.9.9.9") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.org")


def test_the_client_retries_503_and_429_with_the_same_idempotency_key() -> None:
    seen: list[str | None] = []
    answers = iter(
        [
            httpx.Response(
                503, json={"title": "t", "status": 503, "detail": "store: down"}, headers={"Retry-After": "0"}
            ),
            httpx.Response(
                429, json={"title": "t", "status": 429, "detail": "rate: over"}, headers={"Retry-After": "0"}
            ),
            httpx.Response(200, json={"memory_id": "m", "events": [], "positions": [{"partition": 0, "offset": 3}]}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        assert request.headers["Authorization"] == "Bearer tok"
        return next(answers)

    with LedgerClient("http://ledger", "tok", transport=httpx.MockTransport(handler)) as client:
        ack = client.write("alice", "text", "purpose", key="k")
    assert ack.positions[0].offset == 3
    assert len(seen) == 3 and seen[0] is not None and len(set(seen)) == 1


def test_the_client_gives_up_with_the_servers_problem() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"title": "t", "status": 429, "detail": "rate: over", "field": "rate"})

    policy = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0)
    with LedgerClient("http://ledger", "tok", retry=policy, transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(RateLimited) as caught:
            client.recall("alice", "q", "p")
    assert caught.value.field == "rate" and caught.value.status == 429


def test_the_client_imports_no_server_dependency() -> None:
    out = server_dependencies_imported("import workers.client, workers.wire")
    assert out == "[]"
