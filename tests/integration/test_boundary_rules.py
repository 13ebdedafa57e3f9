"""The rules of issue 13 on the real stores, with the embedded mode's Postgres event log
and through Kafka, and again after a replay of every projection: an earlier version
whose replacement is erased awaits confirmation; an erasure with its history leaves no
version readable; a retried write, confirmation, withdrawal or supersession changes
nothing; secrets are refused (or replaced) and personal data raises a memory's class."""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, MemoryReinstated, MemoryWritten, RevokeConsent, utc_now
from ledger.detectors import Screener
from ledger.errors import InvalidCommandError
from ledger.screening import LabelRefusedError, SecretFoundError, load_screening_policy
from projections.facts import STABLE
from projections.trace import EarlierVersion, trace
from tests.builders import memory_write
from tests.integration.conftest import local_settings, one, recall_ids
from tests.integration.distributed import distributed_settings
from workers.bootstrap import Services, build
from workers.langgraph_store.values import content_of, value_of
from workers.versioning import rebuild

pytestmark = pytest.mark.integration

PROJECTIONS = ("facts", "vectors", "cache", "summaries")
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture(params=["postgres-log", "kafka"])
def svc(
    request: pytest.FixtureRequest, tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> Iterator[Services]:
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        services = build(distributed_settings(tmp_path, bootstrap, fresh_dsn, redis_url))
        assert services.tombstone_set is not None
        services.tombstone_set._interval_s = 0.0  # read the topic on every lookup: no timing in the test
    else:
        services = build(local_settings(tmp_path / "data", fresh_dsn, redis_url))
    yield services
    services.close()


def write(svc: Services, content: str, turn: str, **fields: Any) -> str:
    prov = {"writer": "test-agent", "written_at": utc_now(), "turn_id": turn, **fields.pop("provenance", {})}
    result = svc.ledger.write(svc.principal(), memory_write(content=content, provenance=prov, **fields))
    assert result.memory_id
    return result.memory_id


def facts_rows(svc: Services) -> list[tuple[Any, ...]]:
    """Every row of the serving facts version but the generated ``tsv``, by memory id."""
    with svc.pool.connection() as conn:
        rows = conn.execute(f"SELECT * FROM {STABLE.facts} ORDER BY memory_id").fetchall()
        names = [d.name for d in conn.execute(f"SELECT * FROM {STABLE.facts} LIMIT 0").description or ()]
    keep = [i for i, n in enumerate(names) if n != "tsv"]
    return [tuple(r[i] for i in keep) for r in rows]


def point_status(svc: Services, memory_id: str) -> str | None:
    points = svc.stores.route().index.retrieve([memory_id])
    return None if memory_id not in points else str(points[memory_id].payload["status"])


def replay_every_projection(svc: Services) -> None:
    """Rebuild every projection into a new version from offset 0 and swap to it."""
    for name in PROJECTIONS:
        rebuild(svc, name)
    assert {info.version for info in svc.stores.serving().values()} == {2}


def across_a_replay(svc: Services, check: Callable[[], None], *, same_facts: bool = False) -> None:
    """``check`` holds, then holds again after a replay of every projection; with
    ``same_facts`` the replay also rebuilds the same facts rows."""
    check()
    live = facts_rows(svc) if same_facts else None
    replay_every_projection(svc)
    check()
    if same_facts:
        assert facts_rows(svc) == live


def replace_secrets(svc: Services) -> None:
    """From now on ``svc``'s ledger replaces the secrets it finds instead of refusing them."""
    policy = load_screening_policy()
    svc.ledger.screener = Screener(
        policy.model_copy(update={"secrets": policy.secrets.model_copy(update={"action": "replace"})})
    )


def test_an_earlier_version_awaits_confirmation_when_its_replacement_is_erased(svc: Services) -> None:
    p = svc.principal()
    old = write(svc, "Sam works at Foo Industries", "turn-1", key="employer")
    new = write(svc, "Sam now works at Bar Logistics", "turn-2", key="employer")
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(new,), reason="subject asked"))
    assert [e.type for e in r.events] == ["ErasureRequested", "MemoryReinstated"]
    assert (r.affected, r.reinstated, r.earlier_versions) == ((new,), (old,), (old,))
    svc.catch_up()

    def the_older_version_awaits_confirmation() -> None:
        assert one(svc, f"SELECT status, superseded_by FROM {STABLE.facts} WHERE memory_id = %s", old) == (
            "needs_confirmation",
            None,
        )
        assert point_status(svc, old) == "needs_confirmation" and point_status(svc, new) is None
        assert old not in recall_ids(svc, "where does Sam work")
        assert old in recall_ids(svc, "where does Sam work", include_unconfirmed=True)
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete", report
        assert report.earlier_versions == [EarlierVersion(old, "needs_confirmation", True, True)]

    # the replay folds the reinstatement into the same rows
    across_a_replay(svc, the_older_version_awaits_confirmation, same_facts=True)

    confirmed = svc.ledger.confirm(p, "alice", old)
    assert [e.type for e in confirmed.events] == ["MemoryConfirmed"]
    svc.catch_up()
    assert old in recall_ids(svc, "where does Sam work")
    assert one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", old) == "active"


def test_the_nearest_version_not_erased_awaits_confirmation_when_a_chain_loses_its_live_end(svc: Services) -> None:
    p = svc.principal()
    a = write(svc, "Sam works at Foo Industries", "turn-1", key="employer")
    b = write(svc, "Sam now works at Bar Logistics", "turn-2", key="employer")
    c = write(svc, "Sam now works at Baz Shipping", "turn-3", key="employer")  # A <- B <- C
    other = write(svc, "Sam commutes by train", "turn-4")
    summary = write(
        svc,
        "Sam works at Baz Shipping and commutes by train",
        "turn-5",
        kind="summary",
        provenance={"writer": "summariser", "derived_from": [c, other]},
    )
    middle = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(b,), reason="subject asked"))
    assert (middle.reinstated, middle.earlier_versions) == ((), (a,))  # C is the answer: A stays superseded
    svc.catch_up()
    assert c in recall_ids(svc, "where does Sam work")  # a recall result cached before the erasure
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(c,), reason="subject asked"))
    assert [e.type for e in r.events][:2] == ["ErasureRequested", "MemoryReinstated"]
    assert (r.reinstated, r.earlier_versions) == ((a,), (a,))
    [reinstated] = [e for e in r.events if isinstance(e, MemoryReinstated)]
    assert (reinstated.memory_id, reinstated.replacement) == (a, c)
    svc.catch_up()

    def the_oldest_version_awaits_confirmation() -> None:
        assert one(svc, f"SELECT status, superseded_by FROM {STABLE.facts} WHERE memory_id = %s", a) == (
            "needs_confirmation",
            None,
        )
        assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE memory_id = ANY(%s)", [b, c]) == 0
        assert point_status(svc, a) == "needs_confirmation"
        assert point_status(svc, b) is None and point_status(svc, c) is None
        assert a not in recall_ids(svc, "where does Sam work")  # only with the unconfirmed
        unconfirmed = recall_ids(svc, "where does Sam work", include_unconfirmed=True)
        assert a in unconfirmed and b not in unconfirmed and c not in unconfirmed and summary not in unconfirmed
        with svc.pool.connection() as conn:
            texts = [str(t) for (t,) in conn.execute("SELECT content FROM summaries").fetchall()]
        assert texts and not any("Baz" in t for t in texts)  # regenerated from what remains
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete", report
        assert report.earlier_versions == [EarlierVersion(a, "needs_confirmation", True, True)]

    across_a_replay(svc, the_oldest_version_awaits_confirmation, same_facts=True)

    confirmed = svc.ledger.confirm(p, "alice", a)
    assert [e.type for e in confirmed.events] == ["MemoryConfirmed"]
    svc.catch_up()
    assert a in recall_ids(svc, "where does Sam work")
    assert one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", a) == "active"


def test_an_erasure_with_its_history_leaves_no_version_readable(svc: Services) -> None:
    p = svc.principal()
    chain = [write(svc, f"Sam's passport number is {n}", f"turn-{i}", key="passport") for i, n in enumerate("XYZ")]
    keep = write(svc, "Sam prefers aisle seats", "turn-9", key="seat")
    r = svc.ledger.erase(
        p, EraseMemories(subject_id="alice", memory_ids=(chain[-1],), reason="subject asked", with_history=True)
    )
    assert set(r.affected) == set(chain) and r.reinstated == () and r.earlier_versions == ()
    svc.catch_up()

    def no_version_is_readable() -> None:
        assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE memory_id = ANY(%s)", chain) == 0
        assert one(svc, "SELECT count(*) FROM ledger_memories WHERE memory_id = ANY(%s) AND status = 'erased'", chain)
        held = "SELECT count(*) FROM memory_keys WHERE split_part(key_id, '/', 1) = ANY(%s) AND wrapped_key IS NOT NULL"
        assert one(svc, held, chain) == 0
        assert svc.stores.route().index.retrieve(chain) == {}
        assert set(recall_ids(svc, "passport number", include_unconfirmed=True)).isdisjoint(chain)
        assert keep in recall_ids(svc, "aisle seats")
        report = trace(svc.pool, r.request_id or "", svc.trace_targets())
        assert report.verdict == "complete" and report.with_history and report.earlier_versions == []

    across_a_replay(svc, no_version_is_readable)


def test_retried_commands_change_nothing_and_another_turn_reinforces(svc: Services) -> None:
    p = svc.principal()

    def tea(turn: str) -> Any:
        prov = {"writer": "test-agent", "written_at": utc_now(), "turn_id": turn}
        return memory_write(content="Sam drinks green tea", veracity="tool", confirmed=False, provenance=prov)

    first = svc.ledger.write(p, tea("turn-3"))
    ends = svc.log.end_offsets()
    for _ in range(2):  # the client retries: another written_at, the same turn and fields
        again = svc.ledger.write(p, tea("turn-3"))
        assert (again.events, again.memory_id) == ((), first.memory_id) and again.repeat
        assert again.first_event_ids == tuple(e.event_id for e in first.events)
    assert svc.log.end_offsets() == ends
    svc.catch_up()
    assert one(svc, f"SELECT confidence FROM {STABLE.facts} WHERE memory_id = %s", first.memory_id) == 0.5

    restated = svc.ledger.write(p, tea("turn-4"))
    assert [e.type for e in restated.events] == ["MemoryReinforced"]
    assert svc.ledger.write(p, tea("turn-4")).events == ()
    confirmed = svc.ledger.confirm(p, "alice", first.memory_id)
    assert [e.type for e in confirmed.events] == ["MemoryConfirmed"]
    consent = {"consent_ref": "consent-9"}
    given = write(svc, "Sam reads best with large fonts", "turn-5", provenance=consent, key="fonts")
    revoked = svc.ledger.revoke_consent(p, RevokeConsent(subject_id="alice", consent_ref="consent-9"))
    assert revoked.affected == (given,)
    replacement = memory_write(
        content="Sam now drinks black tea",
        provenance={"writer": "test-agent", "written_at": utc_now(), "turn_id": "turn-6"},
    )
    superseded = svc.ledger.supersede(p, first.memory_id, replacement)
    ends = svc.log.end_offsets()
    assert svc.ledger.confirm(p, "alice", superseded.memory_id or "").repeat  # written confirmed
    assert svc.ledger.revoke_consent(p, RevokeConsent(subject_id="alice", consent_ref="consent-9")).repeat
    retried = svc.ledger.supersede(p, first.memory_id, replacement.model_copy())
    assert (retried.events, retried.memory_id) == ((), superseded.memory_id) and retried.repeat
    assert svc.log.end_offsets() == ends
    svc.catch_up()

    def confidence_of_two_turns() -> None:
        row = one(svc, f"SELECT confidence, status FROM {STABLE.facts} WHERE memory_id = %s", first.memory_id)
        assert row == (0.75, "superseded")  # noisy-OR of two turns, 1 - 0.5 * 0.5; not of four attempts
        assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE content = 'Sam now drinks black tea'") == 1

    across_a_replay(svc, confidence_of_two_turns, same_facts=True)


def test_a_retry_that_differs_only_in_white_space_or_normal_form_is_a_retry(svc: Services) -> None:
    p = svc.principal()

    def seats(content: str, turn: str = "turn-7") -> Any:
        prov = {"writer": "test-agent", "written_at": utc_now(), "turn_id": turn}
        return memory_write(content=content, veracity="tool", confirmed=False, provenance=prov)

    first = svc.ledger.write(p, seats("Sam prefers the café window seats"))
    ends = svc.log.end_offsets()
    nfd = unicodedata.normalize("NFD", "Sam prefers the café window seats")
    for again in ("Sam prefers the café window seats\n", "Sam prefers the café window seats ", f" {nfd}"):
        retried = svc.ledger.write(p, seats(again))
        assert (retried.events, retried.memory_id) == ((), first.memory_id) and retried.repeat, repr(again)
    assert svc.log.end_offsets() == ends
    restated = svc.ledger.write(p, seats("Sam prefers the café window seats ", turn="turn-8"))
    assert [e.type for e in restated.events] == ["MemoryReinforced"]  # another turn is new evidence
    svc.catch_up()

    def confidence_of_two_turns() -> None:
        row = one(svc, f"SELECT confidence, content FROM {STABLE.facts} WHERE memory_id = %s", first.memory_id)
        assert row == (0.75, "Sam prefers the café window seats")  # 1 - 0.5 * 0.5: two turns, not five attempts

    across_a_replay(svc, confidence_of_two_turns)


def test_secrets_are_refused_or_replaced_and_personal_data_raises_the_class(
    svc: Services, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    p = svc.principal()
    ends = svc.log.end_offsets()
    with pytest.raises(SecretFoundError) as refused:
        write(svc, f"The deploy key is {AWS_KEY}", "turn-1")
    assert (refused.value.field, refused.value.kinds) == ("content", ("aws_access_key",))
    with pytest.raises(InvalidCommandError) as no_consent:
        write(svc, "Sam's email is sam.jones@example.com", "turn-2")
    assert no_consent.value.field == "provenance.consent_ref" and "email address" in no_consent.value.rule
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 0

    personal = svc.ledger.write(
        p,
        memory_write(
            content="Call Sam on +44 20 7946 0958 or mail sam.jones@example.com",
            sensitivity="public",
            provenance={"writer": "test-agent", "written_at": utc_now(), "consent_ref": "consent-1"},
        ),
    )
    event = personal.events[0]
    assert isinstance(event, MemoryWritten) and event.memory.sensitivity == "personal"
    screening = event.memory.screening
    assert screening is not None and screening.raised_from == "public"
    assert {(f.kind, f.action, f.count) for f in screening.findings} == {
        ("email_address", "raised", 1),
        ("phone_number", "raised", 1),
    }
    expires_at = event.memory.retention.expires_at
    assert expires_at is not None and expires_at <= utc_now() + timedelta(days=180)  # the personal class's limit

    replace_secrets(svc)
    replaced = write(svc, "Connect with postgres://deploy:Sup3rS3cretPw@db.internal:5432/app", "turn-3")
    svc.catch_up()

    def screened_in_every_store() -> None:
        assert (
            one(svc, f"SELECT sensitivity FROM {STABLE.facts} WHERE memory_id = %s", personal.memory_id) == "personal"
        )
        content = one(svc, f"SELECT content FROM {STABLE.facts} WHERE memory_id = %s", replaced)
        assert content == "Connect with postgres://[secret: basic_auth_credentials]@db.internal:5432/app"
        assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE content LIKE '%%Sup3rS3cretPw%%'") == 0

    across_a_replay(svc, screened_in_every_store)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert AWS_KEY not in logged and "Sup3rS3cretPw" not in logged


def test_a_secret_behind_an_invisible_or_fullwidth_character_is_refused_and_an_idn_address_is_personal(
    svc: Services,
) -> None:
    ends = svc.log.end_offsets()
    for hidden in ("key AKIAIOSF\u200bODNN7EXAMPLE", "token \uff47hp_wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"):
        with pytest.raises(SecretFoundError) as refused:
            write(svc, hidden, "turn-1")
        assert refused.value.field == "content"
    with pytest.raises(InvalidCommandError) as no_consent:
        write(svc, "Sam's address is john@exämple.com", "turn-2", sensitivity="public")
    assert no_consent.value.field == "provenance.consent_ref" and "email address" in no_consent.value.rule
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 0
    idn = write(svc, "Sam's address is john@exämple.com", "turn-3", provenance={"consent_ref": "c-1"})
    assert one(svc, "SELECT sensitivity FROM ledger_memories WHERE memory_id = %s", idn) == "personal"


def test_default_ignorable_characters_hide_no_secret_or_personal_data_in_content_or_labels(svc: Services) -> None:
    p = svc.principal()
    ends = svc.log.end_offsets()
    # a combining grapheme joiner, variation selectors, a Hangul filler: invisible, not format characters
    for hidden in (
        f"my key AKIA\u034f{AWS_KEY[4:]}",
        f"my key AKIA\U000e0100{AWS_KEY[4:]}",
        "ghp_wWPw5k4a\u3164XcaT4fNP0UcnZwJUVFk6LO0pINUx",
    ):
        with pytest.raises(SecretFoundError) as refused:
            write(svc, hidden, "turn-1", purpose="hr")
        assert refused.value.field == "content" and AWS_KEY[4:] not in str(refused.value)
    with pytest.raises(InvalidCommandError) as no_consent:  # raised to personal: a consent is needed
        write(svc, "mail sam.inv@exa\ufe0fmple.com", "turn-2", purpose="hr", sensitivity="public")
    assert no_consent.value.field == "provenance.consent_ref" and "email address" in no_consent.value.rule
    labels = [
        ("purpose", {"purpose": "sam.inv@exa\ufe0fmple.com"}, "personal"),
        ("provenance.agent", {"provenance": {"agent": f"AKIA\u034f{AWS_KEY[4:]}"}}, "secret"),
    ]
    for field, fields, category in labels:
        with pytest.raises(LabelRefusedError) as info:
            write(svc, "harmless note", "turn-3", **fields)
        assert (info.value.field, info.value.category) == (field, category)
    with pytest.raises(LabelRefusedError) as erasure:
        reason = f"ticket AKIA\ufe0f{AWS_KEY[4:]}"
        svc.ledger.erase(p, EraseMemories(subject_id="alice", whole_subject=True, reason=reason))
    assert (erasure.value.field, erasure.value.category) == ("reason", "secret")
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 0
    assert one(svc, "SELECT count(*) FROM erasure_requests") == 0


def test_json_escapes_hide_no_secret_or_personal_data_and_a_replaced_value_stays_readable(svc: Services) -> None:
    ends = svc.log.end_offsets()
    with pytest.raises(SecretFoundError) as refused:
        write(svc, content_of({"cfg": 'db_password="hunter2xyz"'}), "turn-1")
    assert (refused.value.field, refused.value.kinds) == ("content", ("secret_keyword",))
    for value in ({"a": "iban:\nDE89370400440532013000"}, {"a": "phone\t2125550199"}):
        with pytest.raises(InvalidCommandError) as no_consent:  # raised to personal: a consent is needed
            write(svc, content_of(value), "turn-2", sensitivity="public")
        assert no_consent.value.field == "provenance.consent_ref"
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 0

    replace_secrets(svc)
    replaced = write(svc, content_of({"secret": 'abc"def', "n": 1}), "turn-3")
    svc.catch_up()
    content = one(svc, f"SELECT content FROM {STABLE.facts} WHERE memory_id = %s", replaced)
    assert value_of(content) == {"secret": "[secret: secret_keyword]", "n": 1}


def test_labels_holding_secrets_or_personal_data_are_refused_and_nothing_is_appended(svc: Services) -> None:
    p = svc.principal()
    kept = write(svc, "Sam prefers aisle seats", "turn-1", key="seat")
    ends = svc.log.end_offsets()
    refused = [
        ("provenance.agent", {"provenance": {"agent": f"bot of jane.doe@example.com {AWS_KEY}"}}),
        ("purpose", {"purpose": f"{AWS_KEY}-support"}),
        ("key", {"key": "jane.doe@example.com", "sensitivity": "public"}),
        ("key", {"key": "langgraph:notes/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"}),
        ("provenance.source_ref", {"provenance": {"source_ref": f"s3://bucket?key={AWS_KEY}"}}),
    ]
    for field, fields in refused:
        with pytest.raises(LabelRefusedError) as info:
            write(svc, "harmless note", "turn-2", **fields)
        assert info.value.field == field
        assert AWS_KEY not in str(info.value) and "jane.doe" not in str(info.value)
    with pytest.raises(LabelRefusedError) as erasure:
        svc.ledger.erase(p, EraseMemories(subject_id="alice", whole_subject=True, reason="asked by jane@example.com"))
    assert erasure.value.field == "reason" and "ticket or case id" in erasure.value.rule
    with pytest.raises(LabelRefusedError):
        svc.ledger.revoke_consent(p, RevokeConsent(subject_id="alice", purpose=f"{AWS_KEY}", allow_unmatched=True))
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM erasure_requests") == 0
    assert one(svc, "SELECT status FROM ledger_memories WHERE memory_id = %s", kept) == "active"
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 1

    source = "<CAF1x9=q@mail.example.com>"  # a reference may look like personal data: kept, sealed
    cited = write(svc, "Sam flies on Fridays", "turn-3", provenance={"source_ref": source, "agent": "support-bot"})
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref=source, reason="ticket 4711"))
    assert r.affected == (cited,)


def test_a_connection_string_password_that_detect_secrets_pattern_misses_is_refused_or_replaced(
    svc: Services,
) -> None:
    marker = "[secret: basic_auth_credentials]"
    urls = {  # no user name (Redis' form), a $ or ! in the password, an @ in the password
        "redis://:Sup3rS3cretPw@cache.internal:6379/0": f"redis://{marker}@cache.internal:6379/0",
        "postgres://deploy:Pa$$w0rd!@db.internal/app": f"postgres://{marker}@db.internal/app",
        "postgresql://deploy:p@ssw0rd9@db.internal/app": f"postgresql://{marker}@db.internal/app",
    }
    ends = svc.log.end_offsets()
    for url in urls:
        with pytest.raises(SecretFoundError) as refused:
            write(svc, f"The app connects with {url}", "turn-1")
        assert (refused.value.field, refused.value.kinds) == ("content", ("basic_auth_credentials",))
    assert svc.log.end_offsets() == ends
    assert one(svc, "SELECT count(*) FROM ledger_memories") == 0

    replace_secrets(svc)
    written = {
        write(svc, f"The app connects with {url}", f"turn-{i}"): kept for i, (url, kept) in enumerate(urls.items())
    }
    svc.catch_up()

    def only_the_replaced_text_is_stored() -> None:
        for memory_id, kept in written.items():
            content = one(svc, f"SELECT content FROM {STABLE.facts} WHERE memory_id = %s", memory_id)
            assert content == f"The app connects with {kept}"
            assert one(svc, f"SELECT sensitivity FROM {STABLE.facts} WHERE memory_id = %s", memory_id) == "internal"
        for password in ("Sup3rS3cretPw", "Pa$$w0rd!", "p@ssw0rd9"):
            assert one(svc, f"SELECT count(*) FROM {STABLE.facts} WHERE strpos(content, %s) > 0", password) == 0

    across_a_replay(svc, only_the_replaced_text_is_stored)
