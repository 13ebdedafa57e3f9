"""The LangGraph store's mapping without a server: namespaces and keys to ledger keys and
back, values to memory text, filters, the store's refusals (each naming the field, before
anything is sent), and the calls a batch makes, driven by a scripted server."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from contracts import utc_now
from ledger.detectors import Screener
from ledger.screening import LabelRefusedError, load_screening_policy
from projections.ranking.config import RankingConfig
from tests.builders import memory_write
from tests.imports import server_dependencies_imported
from workers import wire
from workers.client import Conflict, Forbidden, InvalidRequest, LedgerClientError, TransportError
from workers.client.calls import Call
from workers.langgraph_store import (
    BatchInterruptedError,
    ErasureReceipt,
    InvalidValueError,
    LedgerStore,
    NamespaceError,
    UnsupportedError,
    filters,
    namespaces,
    plan,
    values,
)
from workers.langgraph_store.store import _drive, ttl_config

NOW = datetime(2026, 12, 1, tzinfo=UTC)
labels = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(lambda s: "." not in s)


@given(st.lists(labels, min_size=0, max_size=3), labels)
def test_a_namespace_and_key_read_back_exactly_from_the_ledger_key(rest: list[str], key: str) -> None:
    address = namespaces.address(("alice", "support", *rest), key)
    assert address.key.startswith(namespaces.KEY_PREFIX)
    assert address.key == address.key.strip() and not any(c.isspace() or ord(c) < 32 for c in address.key)
    assert namespaces.item_of("alice", "support", address.key) == (("alice", "support", *rest), key)
    assert address.source_ref == namespaces.address(("alice", "support", *rest), key).source_ref


def test_the_ledger_key_is_readable_and_its_parts_cannot_run_into_each_other() -> None:
    assert namespaces.address(("u", "p", "prefs"), "answer_length").key == "langgraph:prefs/answer_length"
    split = namespaces.address(("u", "p", "a"), "b/c").key
    assert split == "langgraph:a/b%2Fc" != namespaces.address(("u", "p", "a", "b"), "c").key
    assert namespaces.address(("u", "p"), " 100% ").key == "langgraph:%20100%25%20"
    assert namespaces.item_of("u", "p", "answer_length") is None  # another way in: no item
    assert namespaces.item_of("u", "p", "langgraph:a//b") is None
    assert namespaces.item_of("u", "p", "langgraph:%zz") is None
    # the source names neither the key nor the namespace
    ref = namespaces.address(("u", "p", "prefs"), "answer_length").source_ref
    assert ref.startswith(namespaces.SOURCE_PREFIX) and "answer" not in ref and "prefs" not in ref


def test_a_subject_may_hold_a_slash_as_the_ledgers_identifiers_do() -> None:
    address = namespaces.address(("team/alice", "support", "prefs"), "k")
    assert (address.subject_id, address.purpose, address.key) == ("team/alice", "support", "langgraph:prefs/k")


@pytest.mark.parametrize(
    ("namespace", "key", "field", "rule"),
    [
        (("alice",), "k", "namespace", "must name at least a subject and a purpose"),
        ((), "k", "namespace", "must name at least a subject and a purpose"),
        (("alice", " support"), "k", "namespace[1]", "must not start or end with white space"),
        (("alice\x01", "support"), "k", "namespace[0]", "control characters"),
        (("alice", "support"), "", "key", "must not be empty"),
        (("alice", "support"), "k" * 600, "key", "at most 512"),
    ],
)
def test_a_namespace_that_does_not_map_is_refused_naming_the_field(
    namespace: tuple[str, ...], key: str, field: str, rule: str
) -> None:
    with pytest.raises(NamespaceError) as refused:
        namespaces.address(namespace, key)
    assert refused.value.field == field and rule in refused.value.rule
    assert isinstance(refused.value, InvalidNamespaceError)
    assert str(refused.value).startswith(f"{field}: ")


def test_prefixes_narrow_to_a_subject_a_purpose_and_the_start_of_the_key() -> None:
    assert namespaces.prefix(("u",)) == namespaces.Prefix("u", None, "langgraph:")
    assert namespaces.prefix(("u", "p", "a b")) == namespaces.Prefix("u", "p", "langgraph:a%20b/")
    with pytest.raises(NamespaceError, match=r"namespace_prefix: .* must start with the subject and the purpose"):
        namespaces.prefix(("u",), need_purpose=True)
    assert namespaces.pattern_prefix(("u", "*", "prefs", "*", "x")) == namespaces.Prefix("u", None, "langgraph:prefs/")
    with pytest.raises(NamespaceError, match=r"prefix: .* must name the subject first"):
        namespaces.pattern_prefix(("*", "p"))
    assert namespaces.matches(("u", "p", "a"), ("u", "*"), "prefix")
    assert namespaces.matches(("u", "p", "a"), ("*", "a"), "suffix")
    assert not namespaces.matches(("u", "p"), ("u", "p", "a"), "prefix")


def test_a_value_is_compact_json_read_back_exactly() -> None:
    value = {"b": [1, 2.5, True, None, ("x",)], "a": {"é": "\x7f\n"}}
    text = values.content_of(value)
    assert text == '{"b":[1,2.5,true,null,["x"]],"a":{"é":"\\u007f\\n"}}'
    assert values.value_of(text) == {"b": [1, 2.5, True, None, ["x"]], "a": {"é": "\x7f\n"}}
    assert values.value_of("plain text") is None and values.value_of("[1]") is None and values.value_of(None) is None
    proxy = MappingProxyType({"a": MappingProxyType({"b": 1})})  # BaseStore.put takes any Mapping
    assert values.content_of(proxy) == '{"a":{"b":1}}'


@pytest.mark.parametrize(
    ("value", "field", "rule"),
    [
        ([1], "value", "must be a JSON object"),
        ({"a": {1: "x"}}, "value.a", "not a string"),
        ({"a": [float("nan")]}, "value.a[0]", "not a JSON number"),
        ({"a": NOW}, "value.a", "a value of type datetime is not JSON"),
        ({"a": "x" * 40_000}, "value", "the store takes at most 32768"),
    ],
)
def test_a_value_that_cannot_be_a_memory_is_refused_naming_its_place(value: Any, field: str, rule: str) -> None:
    with pytest.raises(InvalidValueError) as refused:
        values.content_of(value)
    assert refused.value.field == field and rule in refused.value.rule


def test_filters_match_as_langgraph_documents_them() -> None:
    v = {"n": 3, "s": "b", "flag": True, "tags": ["x", "y"], "meta": {"lang": "en", "v": 2}}
    assert filters.matches(v, None) and filters.matches(v, {})
    assert filters.matches(v, {"n": 3, "meta": {"lang": "en"}, "tags": ["x", "y"]})
    assert not filters.matches(v, {"tags": ["x"]}) and not filters.matches(v, {"missing": 1})
    assert filters.matches(v, {"n": {"$gt": 2, "$lte": 3}, "s": {"$gte": "a"}, "meta": {"v": {"$ne": 1}}})
    assert not filters.matches(v, {"s": {"$gt": 1}})  # a string is not ordered against a number
    assert not filters.matches(v, {"flag": 1}) and filters.matches(v, {"flag": {"$eq": True}})


def test_filters_compare_json_values_strictly_as_the_readme_says() -> None:
    v = {"n": 1, "flag": True, "s": "1", "none": None}
    assert filters.matches(v, {"n": 1.0}) and filters.matches(v, {"n": {"$eq": 1.0, "$gte": 1.0}})  # 1 == 1.0
    assert not filters.matches(v, {"n": True}) and not filters.matches(v, {"flag": 1})  # 1 != true
    assert filters.matches(v, {"flag": {"$ne": 1}}) and not filters.matches(v, {"flag": {"$gt": 0}})
    assert not filters.matches(v, {"s": 1}) and not filters.matches(v, {"n": "1"})  # "1" != 1
    assert filters.matches(v, {"none": None}) and filters.matches(v, {"missing": None})  # a missing field is null
    assert filters.matches(v, {"missing": {"$ne": 1}}) and not filters.matches(v, {"missing": {"$lte": 1}})
    with pytest.raises(InvalidValueError, match=r"filter.n: unknown operator '\$in'"):
        filters.check({"n": {"$in": [1]}})
    with pytest.raises(InvalidValueError, match=r"filter.n.\$gt: compares a number or a string"):
        filters.check({"n": {"$gt": [1]}})


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"refresh_on_read": True}, "ttl.refresh_on_read"),
        ({"omit_expired": False}, "ttl.omit_expired"),
        ({"sweep_interval_minutes": 5}, "ttl.sweep_interval_minutes"),
    ],
)
def test_ttl_settings_the_ledger_does_not_honour_are_refused(config: Any, field: str) -> None:
    with pytest.raises(UnsupportedError) as refused:
        ttl_config(config)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("config", "field", "rule"),
    [
        (5, "ttl", "must be a TTLConfig (a mapping), not int"),
        ({"foo": 1}, "ttl.foo", "is not a TTLConfig setting"),
    ],
)
def test_a_ttl_config_that_is_not_one_is_refused_naming_the_field(config: Any, field: str, rule: str) -> None:
    with pytest.raises(InvalidValueError) as refused:
        ttl_config(config)
    assert refused.value.field == field and rule in refused.value.rule


@pytest.mark.parametrize("size", ["x", None, True, 1.5, 0, 70_000])
def test_a_value_size_limit_that_is_not_a_whole_number_in_range_is_refused(size: Any) -> None:
    with pytest.raises(InvalidValueError) as refused:
        LedgerStore("http://127.0.0.1:9", "t", max_value_bytes=size)
    assert refused.value.field == "max_value_bytes" and "whole number between 1 and" in refused.value.rule


def test_the_servers_refusal_of_a_label_names_the_namespace_label_it_came_from() -> None:
    for field, named in (("memories.0.purpose", "namespace[1]"), ("memories.0.subject_id", "namespace[0]")):
        with pytest.raises(InvalidRequest) as refused:
            Scripted(unprocessable(field, "holds a secret (AWS Access Key): ...")).run(
                [PutOp(("a", "p"), "x", {"v": 1})]
            )
        assert refused.value.field == named
    personal = unprocessable(
        "memories.0.key",
        "holds personal data (phone number): a key names an attribute, it is listed and shown wherever the memory is;"
        " put personal data in the content, where screening raises the memory's class",
    )
    with pytest.raises(InvalidRequest) as refused:
        Scripted(personal).run([PutOp(("a", "p"), "+44 20 7946 0958", {"v": 1})])
    assert refused.value.field == "key" and "put personal data in the content" not in refused.value.rule
    assert "namespace below the purpose and the item's key" in refused.value.rule


def test_the_store_reads_without_refreshing_and_refuses_an_index_of_its_own() -> None:
    assert ttl_config({"default_ttl": 60}) == {"refresh_on_read": False, "omit_expired": True, "default_ttl": 60}
    with pytest.raises(InvalidValueError, match=r"ttl.default_ttl: must be more than 0 minutes"):
        ttl_config({"default_ttl": 0})
    with pytest.raises(UnsupportedError, match="index: the ledger embeds memories with its own model"):
        LedgerStore("http://127.0.0.1:9", "t", index={"dims": 3, "embed": lambda texts: [[0.0] * 3 for _ in texts]})
    with pytest.raises(InvalidValueError, match="sensitivity: must be one of"):
        LedgerStore("http://127.0.0.1:9", "t", sensitivity="secret")
    for needs_consent in ("personal", "restricted"):  # refused at once, not at every put
        with pytest.raises(InvalidValueError) as refused:
            LedgerStore("http://127.0.0.1:9", "t", sensitivity=needs_consent)
        assert str(refused.value) == (
            f"sensitivity: {needs_consent} memories need a consent reference, which the store does not write;"
            " use internal or public"
        )


class Scripted:
    """A server that answers each call with the next scripted answer (or raises it), and
    the session of a store; its clock reads ``now``, which moves on by ``takes`` with
    every call answered (the time a request takes)."""

    def __init__(self, *answers: Any, takes: timedelta = timedelta(0)) -> None:
        self.answers = list(answers)
        self.calls: list[Call[Any]] = []
        self.positions: list[wire.LogPosition] = []
        self.receipts: list[ErasureReceipt] = []
        self.now, self.takes = NOW, takes

    def clock(self) -> datetime:
        return self.now

    def send(self, call: Call[Any]) -> Any:
        self.calls.append(call)
        self.now += self.takes
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def after(self) -> list[wire.LogPosition]:
        return list(self.positions)

    def acknowledged(self, positions: Any) -> None:
        self.positions += positions

    def erased(self, receipt: ErasureReceipt) -> None:
        self.receipts.append(receipt)

    def run(self, ops: list[Any]) -> list[Any]:
        return _drive(plan.batch(ops, plan.Config(), self, self.clock), self.send)


def acked(*offsets: int) -> wire.BatchAck:
    return wire.BatchAck(
        results=[
            wire.CommandAck(memory_id=f"m{o}", events=[], positions=[wire.LogPosition(partition=0, offset=o)])
            for o in offsets
        ]
    )


def test_a_batch_writes_runs_of_puts_per_subject_and_reads_after_its_own_writes() -> None:
    put: Callable[[str, str], PutOp] = lambda s, k: PutOp((s, "p"), k, {"v": k}, ttl=1.5)  # noqa: E731
    server = Scripted(acked(1, 2), acked(3), wire.MemoryPage(memories=[]), acked(4))
    ops = [put("a", "x"), put("a", "y"), put("b", "x"), GetOp(("a", "p"), "x"), put("a", "z")]
    assert server.run(ops) == [None, None, None, None, None]
    methods = [(c.method, c.path) for c in server.calls]
    assert methods == [
        ("POST", "/v1/subjects/a/memories/batch"),
        ("POST", "/v1/subjects/b/memories/batch"),
        ("GET", "/v1/subjects/a/memories"),
        ("POST", "/v1/subjects/a/memories/batch"),
    ]
    first = server.calls[0].body
    assert first is not None and [m["key"] for m in first["memories"]] == ["langgraph:x", "langgraph:y"]
    m = first["memories"][0]
    assert m["supersede_key"] is True and m["kind"] == "fact" and m["veracity"] == "inferred"
    assert m["content"] == '{"v":"x"}' and m["expires_at"].startswith("2026-12-01T00:01:30")
    assert m["source_ref"].startswith("langgraph-item:") and m["agent"] == "langgraph"
    read = dict(server.calls[2].params)
    assert read["key"] == "langgraph:x" and read["purpose"] == "p" and read["unexpired"] == "true"
    assert [v for k, v in server.calls[2].params if k == "wait_for"] == ["0:1", "0:2", "0:3"]


def test_a_puts_ttl_counts_from_when_its_write_is_sent_not_from_when_the_batch_was_planned() -> None:
    """Each request takes five minutes: a put sent after a read, or in the second half of
    a write the server found too large, still lives its whole TTL from its own send."""
    large = InvalidRequest(413, wire.Problem(title="Too large", status=413, detail="x", field="body", rule="..."))
    ops = [
        PutOp(("a", "p"), "x", {"v": 1}, ttl=10),
        GetOp(("a", "p"), "x"),
        PutOp(("a", "p"), "y", {"v": 2}, ttl=10),
        PutOp(("a", "p"), "z", {"v": 3}, ttl=10),
        PutOp(("a", "p"), "forever", {"v": 4}),
    ]
    server = Scripted(acked(1), wire.MemoryPage(memories=[]), large, acked(2), acked(3, 4), takes=timedelta(minutes=5))
    assert server.run(ops) == [None] * 5
    sent = [m for c in server.calls if c.body is not None for m in c.body["memories"]]
    assert [(m["key"], m.get("expires_at")) for m in sent] == [
        ("langgraph:x", "2026-12-01T00:10:00Z"),  # sent at 00:00
        ("langgraph:y", "2026-12-01T00:20:00Z"),  # sent at 00:10, after the read; too large, not written
        ("langgraph:z", "2026-12-01T00:20:00Z"),
        ("langgraph:forever", None),
        ("langgraph:y", "2026-12-01T00:25:00Z"),  # the first half, sent at 00:15
        ("langgraph:z", "2026-12-01T00:30:00Z"),  # the second half, sent at 00:20
        ("langgraph:forever", None),  # no TTL: the class's maximum lifetime, no expires_at sent
    ]


def test_a_bad_operation_anywhere_refuses_the_batch_before_anything_is_sent() -> None:
    server = Scripted()
    ops = [PutOp(("a", "p"), "x", {"v": 1}), PutOp(("a", "p"), "y", {"v": object()})]
    with pytest.raises(InvalidValueError) as second:
        server.run(ops)
    assert str(second.value) == "ops[1].value.v: a value of type object is not JSON"  # its place in the batch
    with pytest.raises(InvalidValueError, match="ttl: must be more than 0 minutes"):
        server.run([PutOp(("a", "p"), "x", {"v": 1}, ttl=-1)])
    with pytest.raises(InvalidNamespaceError, match="periods"):
        server.run([GetOp(("a.b", "p"), "x")])
    with pytest.raises(NamespaceError, match="prefix: must name the subject first"):
        server.run([ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("x",)),))])
    with pytest.raises(InvalidValueError, match="limit: must be a whole number"):
        server.run([SearchOp(("a", "p"), limit=-1)])
    assert server.calls == []


@pytest.mark.parametrize(
    ("op", "error", "said"),
    [
        # a string is not a namespace: 'user-42' would be subject 'u', purpose 's'
        (
            PutOp(cast(Any, "user-42"), "diet", {"t": 1}),
            NamespaceError,
            "namespace: must be a tuple of labels, not str ('user-42' would be read one character a label;"
            " give ('user-42', ...))",
        ),
        (GetOp(cast(Any, "user-42"), "diet"), NamespaceError, "namespace: must be a tuple of labels, not str"),
        (SearchOp(cast(Any, "user-42")), NamespaceError, "namespace_prefix: must be a tuple of labels, not str"),
        (
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", cast(Any, "user-42")),)),
            NamespaceError,
            "prefix: must be a tuple of labels, not str",
        ),
        # a lone surrogate has no UTF-8 encoding: it cannot be sent
        (SearchOp(("u", "p", "\ud800")), NamespaceError, "namespace_prefix[2]: must be valid Unicode"),
        (
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("u", "p", "\ud800")),)),
            NamespaceError,
            "prefix[2]: must be valid Unicode",
        ),
        (SearchOp(("u", "p"), query="\ud800"), InvalidValueError, "query: must be valid Unicode"),
        (SearchOp(("u", "p"), query="  "), InvalidValueError, "query: must contain more than white space"),
    ],
)
def test_a_namespace_or_query_that_cannot_be_sent_is_refused_naming_its_field(
    op: Any, error: type[Exception], said: str
) -> None:
    server = Scripted()
    with pytest.raises(error) as refused:
        server.run([op])
    assert str(refused.value).startswith(said)
    assert server.calls == []  # nothing sent


def test_a_delete_is_an_erasure_by_the_items_source_and_nothing_left_is_no_error() -> None:
    nothing = Conflict(409, wire.Problem(title="Conflict", status=409, detail="x", field="source_ref", rule="..."))
    erased = wire.CommandAck(
        request_id="er-1", affected=["m1", "m2"], events=[], positions=[wire.LogPosition(partition=0, offset=9)]
    )
    server = Scripted(erased, nothing)
    assert server.run([PutOp(("a", "p", "n"), "x", None), PutOp(("a", "p", "n"), "x", None)]) == [None, None]
    body = server.calls[0].body
    assert body is not None and body["source"] == namespaces.address(("a", "p", "n"), "x").source_ref
    assert body["with_history"] is True  # what a put of the item replaced goes too
    assert server.receipts == [
        ErasureReceipt(("a", "p", "n"), "x", "er-1", ("m1", "m2"), (wire.LogPosition(partition=0, offset=9),))
    ]
    no_grant = wire.Problem(
        title="Forbidden", status=403, detail="subject_id: no grant", field="subject_id", rule="no grant"
    )
    refused = Forbidden(403, no_grant)
    with pytest.raises(Forbidden) as delete:
        Scripted(refused).run([PutOp(("a", "p"), "x", None)])
    assert (delete.value.field, delete.value.problem.detail) == ("namespace[0]", "namespace[0]: no grant")
    with pytest.raises(Forbidden) as search:  # the second operation: named in its place
        Scripted(wire.MemoryPage(memories=[]), refused).run([GetOp(("b", "p"), "x"), SearchOp(("a", "p"))])
    assert search.value.field == "ops[1].namespace_prefix[0]"
    listing = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)),))
    with pytest.raises(Forbidden) as listed:
        Scripted(refused).run([listing])
    assert listed.value.field == "prefix[0]" and listed.value.rule == "no grant"


def unprocessable(field: str, rule: str) -> InvalidRequest:
    return InvalidRequest(
        422, wire.Problem(title="Invalid", status=422, detail=f"{field}: {rule}", field=field, rule=rule)
    )


def test_the_servers_refusal_of_a_put_names_the_put_its_field_and_its_place_in_the_batch() -> None:
    secret = unprocessable("memories.1.content", "holds a secret (AWS Access Key): ...")
    ops = [GetOp(("a", "p"), "x"), PutOp(("a", "p"), "x", {"v": 1}), PutOp(("a", "p"), "y", {"v": "AKIA"})]
    with pytest.raises(InvalidRequest) as refused:
        Scripted(wire.MemoryPage(memories=[]), secret).run(ops)  # the puts are memories 0 and 1 of one write
    assert (refused.value.field, refused.value.rule) == ("ops[2].value", "holds a secret (AWS Access Key): ...")
    assert refused.value.problem.detail == "ops[2].value: holds a secret (AWS Access Key): ..."

    past = unprocessable("memories.0.expires_at", "must be in the future (UTC)")
    with pytest.raises(InvalidRequest) as short:
        Scripted(past).run([PutOp(("a", "p"), "x", {"v": 1}, ttl=1e-9)])  # the only operation: no place
    assert short.value.field == "ttl"
    assert short.value.rule == "gives the memory's expires_at, which the ledger refuses: must be in the future (UTC)"
    consent = unprocessable("memories.1.consent_ref", "the content holds personal data (email address) ...")
    with pytest.raises(InvalidRequest) as personal:
        Scripted(consent).run([PutOp(("a", "p"), "x", {"v": 1}), PutOp(("a", "p"), "y", {"v": "a@example.com"})])
    assert personal.value.field == "ops[1].value"  # the value made the memory personal; the store gives no consent
    assert personal.value.rule.startswith("the content holds personal data (email address) ...; the store writes no")
    whole = unprocessable("memories", "at most 100 memories")
    with pytest.raises(InvalidRequest) as batch:
        Scripted(whole).run([PutOp(("a", "p"), "x", {"v": 1})])
    assert batch.value is whole  # no memory of the batch named: as it is


def test_a_run_of_puts_the_server_finds_too_large_is_written_in_halves() -> None:
    large = InvalidRequest(413, wire.Problem(title="Too large", status=413, detail="x", field="body", rule="..."))
    ops = [PutOp(("a", "p"), k, {"v": k}) for k in "wxyz"]
    server = Scripted(large, large, acked(1), acked(2), acked(3, 4))
    assert server.run(ops) == [None] * 4
    sizes = [len(c.body["memories"]) for c in server.calls if c.body is not None]
    assert sizes == [4, 2, 1, 1, 2]  # each half all or none, in order
    assert [p.offset for p in server.positions] == [1, 2, 3, 4]
    with pytest.raises(BatchInterruptedError) as half:  # the first half written, the second refused
        Scripted(large, acked(1, 2), unprocessable("memories.0.content", "...")).run(ops)
    assert (half.value.written, half.value.not_written) == ((0, 1), (2, 3))
    assert isinstance(half.value.error, InvalidRequest) and half.value.error.field == "ops[2].value"
    with pytest.raises(InvalidRequest) as single:
        Scripted(large).run([PutOp(("a", "p"), "x", {"v": 1})])
    assert single.value is large  # one put: nothing to halve


def test_a_batch_stopped_part_way_names_what_was_written_and_what_was_not() -> None:
    """150 puts are two writes of one subject; the second refused: the first 100 stand."""
    ops = [PutOp(("a", "p"), f"k{i}", {"v": i}) for i in range(150)]
    secret = unprocessable("memories.3.content", "holds a secret (AWS Access Key): ...")
    with pytest.raises(BatchInterruptedError) as stopped:
        Scripted(acked(*range(100)), secret).run(ops)
    e = stopped.value
    assert (e.written, e.not_written, e.in_doubt, e.at) == (tuple(range(100)), tuple(range(100, 150)), (), 100)
    assert isinstance(e.error, InvalidRequest) and e.error.field == "ops[103].value" and e.__cause__ is e.error
    assert e.items[0] == (("a", "p"), "k0") and e.items[149] == (("a", "p"), "k149")
    assert str(e).startswith("the batch stopped at ops[100] (422: ops[103].value: holds a secret (AWS Access Key)")
    assert "; written ops[0-99]: ('a', 'p') 'k0', ('a', 'p') 'k1', ('a', 'p') 'k2'," in str(e)
    assert str(e).endswith(
        "; not written ops[100-149]: ('a', 'p') 'k100', ('a', 'p') 'k101', ('a', 'p') 'k102',"
        " ('a', 'p') 'k103', ('a', 'p') 'k104', and 45 more"
    )
    assert isinstance(e, LedgerClientError)  # caught where the client's errors are


def test_a_write_whose_answer_was_lost_is_in_doubt_and_a_read_refused_after_writes_says_they_stand() -> None:
    lost = TransportError("POST /v1/subjects/b/memories/batch: ReadError", outcome_unknown=True)
    refused = TransportError("POST /v1/subjects/b/memories/batch: ConnectError: connection refused")
    forbidden = Forbidden(403, wire.Problem(title="Forbidden", status=403, detail="x", field="subject_id", rule="..."))
    erased = wire.CommandAck(request_id="er-1", events=[], positions=[wire.LogPosition(partition=0, offset=2)])
    ops = [PutOp(("a", "p"), "x", {"v": 1}), PutOp(("b", "p"), "y", {"v": 2}), PutOp(("a", "p"), "x", None)]
    with pytest.raises(BatchInterruptedError) as doubt:
        Scripted(acked(1), lost).run(ops)
    assert (doubt.value.written, doubt.value.in_doubt, doubt.value.not_written, doubt.value.at) == ((0,), (1,), (2,), 1)
    assert str(doubt.value).endswith(
        "; written ops[0]: ('a', 'p') 'x'; in doubt ops[1]: ('b', 'p') 'y'; not written ops[2]: ('a', 'p') 'x'"
    )
    assert doubt.value.error is lost
    with pytest.raises(BatchInterruptedError) as never:  # never reached the server: not written
        Scripted(acked(1), refused).run(ops)
    assert (never.value.written, never.value.in_doubt, never.value.not_written) == ((0,), (), (1, 2))
    with pytest.raises(BatchInterruptedError) as read:
        Scripted(erased, forbidden).run([PutOp(("a", "p"), "x", None), GetOp(("b", "p"), "y")])
    assert (read.value.written, read.value.not_written, read.value.at) == ((0,), (), 1)
    stopped = "the batch stopped at ops[1] (403: ops[1].namespace[0]: ...)"
    assert str(read.value) == f"{stopped}; written ops[0]: ('a', 'p') 'x'"
    with pytest.raises(Forbidden):  # nothing written before the refusal: the refusal as it is
        Scripted(wire.MemoryPage(memories=[]), forbidden).run([GetOp(("a", "p"), "x"), PutOp(("b", "p"), "y", {})])


def test_a_search_with_a_query_past_recalls_best_candidates_is_refused_naming_offset_and_limit() -> None:
    assert plan.RECALL_TOP == RankingConfig().depth == 50  # the server's: each ranker's best 50
    for offset, limit, field in [(45, 10, "limit"), (0, 51, "limit"), (50, 1, "offset")]:
        server = Scripted()
        with pytest.raises(InvalidValueError) as refused:
            server.run([SearchOp(("a", "p"), query="tea", offset=offset, limit=limit)])
        assert refused.value.field == field and server.calls == []
        assert refused.value.rule == (
            f"with a query, offset + limit ({offset} + {limit}) must be at most 50:"
            " recall ranks only its best 50 candidates of each ranker"
        )
    server = Scripted(wire.RecallResult(cached=False, degraded=[], items=[]))
    assert server.run([SearchOp(("a", "p"), query="tea", offset=40, limit=10)]) == [[]]
    assert server.calls[0].body is not None and server.calls[0].body["k"] == 100
    listing = Scripted(wire.MemoryPage(memories=[]))  # a listing has no such bound
    assert listing.run([SearchOp(("a", "p"), offset=500, limit=100)]) == [[]]


def listed(key: str, source_ref: str | None, content: str) -> wire.MemoryOut:
    provenance = {"source_ref": source_ref} if source_ref else {}
    return wire.MemoryOut(
        memory_id=f"m-{content}",
        subject_id="a",
        status="active",
        key=key,
        purpose="p",
        scope={"type": "subject", "id": None},
        written_at=NOW,
        provenance=provenance,
        content=content,
    )


def test_a_memory_without_the_items_source_is_no_item_since_a_delete_would_not_reach_it() -> None:
    address = namespaces.address(("a", "p"), "k")
    theirs = listed(address.key, None, '{"x":7}')  # written another way under a key that looks like the item's
    ours = listed(address.key, address.source_ref, '{"x":8}')
    page = wire.MemoryPage(memories=[theirs, ours])
    found = Scripted(page).run([GetOp(("a", "p"), "k")])[0]
    assert found is not None and found.value == {"x": 8}
    assert Scripted(wire.MemoryPage(memories=[theirs])).run([GetOp(("a", "p"), "k")]) == [None]


@pytest.mark.parametrize(
    ("op", "field", "rule"),
    [
        (PutOp(("a", "p"), "k", {"t": "\ud800"}), "value", "lone surrogate"),
        (PutOp(("a", "p"), "k\ud800", {"t": 1}), "key", "lone surrogate"),
        (PutOp(("a\ud800", "p"), "k", {"t": 1}), "namespace[0]", "lone surrogate"),
        (PutOp(("a", "p"), "k", {"t": 1}, ttl=1e12), "ttl", "at most"),
        (GetOp(("a", "p"), 5), "key", "must be a string, not int"),  # type: ignore[arg-type]
        (PutOp(("a", "p"), None, {"t": 1}), "key", "must be a string, not NoneType"),  # type: ignore[arg-type]
        (PutOp(("langgraph", "p"), "k", {"t": 1}), "namespace[0]", "must not be 'langgraph'"),
        (SearchOp(("a", "p"), filter=[1, 2]), "filter", "must be a mapping"),  # type: ignore[arg-type]
        (SearchOp(("a", "p"), filter={1: "x"}), "filter", "field names"),  # type: ignore[dict-item]
        (PutOp(("a", "p"), "k", {"a": [10**5000]}), "value.a[0]", "an integer of more than 4300 digits"),
        (SearchOp(("a", "p"), filter={"a": object()}), "filter.a", "a value of type object is not JSON"),
        (SearchOp(("a", "p"), filter={"a": {"$eq": float("nan")}}), "filter.a.$eq", "nan is not a JSON number"),
        (SearchOp(("a", "p"), filter={"a": [{"$ne": object()}]}), "filter.a[0].$ne", "not JSON"),
        (SearchOp(("a", "p"), query=123), "query", "must be a string, not int"),  # type: ignore[arg-type]
        (SearchOp(("a", "p"), query=["a"]), "query", "must be a string, not list"),  # type: ignore[arg-type]
        (ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)),), max_depth=1.5), "max_depth", "1.5"),  # type: ignore[arg-type]
        (ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)),), max_depth=True), "max_depth", "True"),
    ],
)
def test_input_python_would_choke_on_is_refused_naming_the_field(op: Any, field: str, rule: str) -> None:
    server = Scripted()
    with pytest.raises((InvalidValueError, NamespaceError)) as refused:
        server.run([op])
    assert refused.value.field == field and rule in refused.value.rule
    assert server.calls == []


@pytest.mark.parametrize(
    ("agent", "kind"),
    [
        ("bot-for-bob@example.com", "email address"),
        ("desk +44 20 7946 0958", "phone number"),
        ("agent-AKIAIOSFODNN7EXAMPLE", "AWS Access Key"),
    ],
)
def test_an_agent_label_holding_data_is_refused_at_construction_as_the_ledger_refuses_it(agent: str, kind: str) -> None:
    """The store's check is the ledger's: the write boundary refuses the same label in
    ``provenance.agent`` (the ledger's detectors under the default policy)."""
    with pytest.raises(InvalidValueError) as refused:
        LedgerStore("http://127.0.0.1:9", "t", agent=agent)
    assert refused.value.field == "agent" and kind in refused.value.rule and agent not in refused.value.rule
    cmd = memory_write(provenance={"writer": "w", "written_at": utc_now(), "turn_id": "t-1", "agent": agent})
    with pytest.raises(LabelRefusedError) as ledger_refused:
        Screener(load_screening_policy()).screen(cmd)
    assert ledger_refused.value.field == "provenance.agent"
    assert refused.value.rule == f"{ledger_refused.value.rule} (or give None)"


def test_a_store_with_an_agent_label_is_built_without_the_servers_dependencies() -> None:
    out = server_dependencies_imported(
        "from workers.langgraph_store import LedgerStore; LedgerStore('http://127.0.0.1:9', 't', agent='support-bot')"
    )
    assert out == "[]"


@pytest.mark.parametrize("agent", ["", " x", "x" * 600, "a\x00b", "\ud800"])
def test_an_agent_label_the_ledger_would_refuse_is_refused_at_construction(agent: str) -> None:
    with pytest.raises((InvalidValueError, NamespaceError)) as refused:
        LedgerStore("http://127.0.0.1:9", "t", agent=agent)
    assert refused.value.field == "agent"
