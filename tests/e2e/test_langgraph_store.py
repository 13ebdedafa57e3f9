"""LangGraph's ``BaseStore`` backed by the ledger, driven through LangGraph's own API
against a real ``memledger serve``, in the embedded default and the distributed mode
(one ``serve`` per mode for the module): every method sync and async, batches, two
subjects with two keys refused across, TTL judged at read time, delete as an erasure
whose trace completes, a replay of every projection followed by the same reads with
the same answers, and the README's example graph."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from tests.e2e import serving
from tests.e2e.conftest import wait_until
from workers.client import Forbidden, InvalidRequest, LedgerClient
from workers.langgraph_store import BatchInterruptedError, InvalidValueError, LedgerStore, NamespaceError

pytestmark = [pytest.mark.e2e]

P = "support"
"""The purpose of the warm-up write and of the example graph; each test keeps to purposes of its own."""
PROJECTIONS = ("facts", "vectors", "cache", "summaries")

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key: screened as a secret
BODY_LIMIT = {"MEMLEDGER_API_MAX_BODY_BYTES": str(256 * 1024)}
"""The serves' largest request body: a batch of a dozen large values is more."""


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.embedded(tmp_path_factory.mktemp("lg-embedded"), BODY_LIMIT) as served:
        yield served


@pytest.fixture(scope="module")
def distributed(
    tmp_path_factory: pytest.TempPathFactory, pg_dsn: str, kafka_bootstrap: str, redis_url: str
) -> Iterator[serving.Served]:
    root = tmp_path_factory.mktemp("lg-distributed")
    with serving.distributed(root, pg_dsn, kafka_bootstrap, redis_url, BODY_LIMIT) as served:
        with LedgerClient(served.url, served.key("warm-up", ["warm-up"])) as client:  # until the workers apply
            client.wait(client.write("warm-up", "the workers are up", P), timeout_s=60)
        yield served


@pytest.fixture(scope="module", params=["embedded", "distributed"])
def served(request: pytest.FixtureRequest) -> serving.Served:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


class Agent:
    """A subject, an API key granted for it alone, a store and a client with that key."""

    def __init__(self, served: serving.Served, name: str) -> None:
        self.subject = f"{name}-{uuid.uuid4().hex[:8]}"
        self.token = served.key(f"agent-{self.subject}", [self.subject])
        self.store = LedgerStore(served.url, self.token, wait_timeout_s=30)
        self.client = LedgerClient(served.url, self.token)

    def close(self) -> None:
        self.store.close()
        self.client.close()


@pytest.fixture(scope="module")
def pair(served: serving.Served) -> Iterator[tuple[Agent, Agent]]:
    """Two agents of the mode's serve for the whole module (each test keeps to purposes of
    its own), closed at its end."""
    a, b = Agent(served, "a"), Agent(served, "b")
    yield a, b
    a.close()
    b.close()


class Api:
    """``BaseStore``'s methods, each awaited: the sync ones (run as they are) or the
    async ones, so that one scenario drives both."""

    def __init__(self, store: LedgerStore, sync: bool) -> None:
        self.store, self.sync = store, sync

    async def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.sync:
            return getattr(self.store, name)(*args, **kwargs)
        return await getattr(self.store, "a" + name)(*args, **kwargs)


def shown(items: list[Any]) -> list[tuple[Any, ...]]:
    """What a search answered, scores aside (recency moves them between two reads)."""
    return [(i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in items]


async def every_method(api: Api, agent: Agent, p: str) -> None:
    """put, get, search (listing and recall, filter, limit, offset), list_namespaces,
    batch and delete, each checked against the events and the erasure's trace, in the
    namespaces of purposes ``p`` and ``p-other``."""
    s, other = agent.subject, f"{p}-other"
    ns, prefs = (s, p), (s, p, "prefs")
    assert await api("put", prefs, "answer_length", {"prefers": "short answers", "n": 3}) is None
    first = await api("get", prefs, "answer_length")
    assert isinstance(first, Item) and first.value == {"prefers": "short answers", "n": 3}
    assert first.namespace == prefs and first.key == "answer_length" and first.created_at == first.updated_at
    await api("put", prefs, "answer_length", {"prefers": "detailed answers", "n": 4})
    second = await api("get", prefs, "answer_length")
    assert second.value == {"prefers": "detailed answers", "n": 4}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    old = agent.client.memories(s, include_all=True, purpose=p, key="langgraph:prefs/answer_length").memories
    assert sorted(m.status for m in old) == ["active", "superseded"]  # a put of an existing key supersedes
    history = agent.client.memory(s, next(m.memory_id for m in old if m.status == "superseded")).history
    assert [h.event_type for h in history] == ["MemoryWritten", "MemorySuperseded"]
    assert await api("get", prefs, "missing") is None and await api("get", (s, other), "answer_length") is None

    await api("put", ns, "diet", {"text": "vegetarian, no fish", "n": 1})
    await api("put", prefs, "tone", {"prefers": "a formal tone", "n": 5})
    await api("put", (s, other), "tone", {"prefers": "no tone at all", "n": 0})
    listed = await api("search", ns)
    assert [(i.namespace, i.key) for i in listed] == [(prefs, "tone"), (ns, "diet"), (prefs, "answer_length")]
    assert all(i.score is None for i in listed)
    assert [i.key for i in await api("search", ns, filter={"n": {"$gte": 4}})] == ["tone", "answer_length"]
    assert [i.key for i in await api("search", ns, filter={"n": 1})] == ["diet"]
    assert [i.key for i in await api("search", ns, limit=1, offset=1)] == ["diet"]
    assert [i.key for i in await api("search", prefs)] == ["tone", "answer_length"]
    every = [(i.namespace[1:], i.key) for i in await api("search", (s,)) if i.namespace[1] in (p, other)]
    assert every == [((other,), "tone"), (prefs[1:], "tone"), ((p,), "diet"), (prefs[1:], "answer_length")]

    found = await api("search", ns, query="is the user vegetarian")
    assert found[0].key == "diet" and found[0].value == {"text": "vegetarian, no fish", "n": 1}
    assert found[0].score is not None and found[0].score > 0 and found[0].created_at == listed[1].created_at
    under = await api("search", prefs, query="vegetarian formal detailed")
    assert {i.key for i in under} <= {"tone", "answer_length"} and under
    assert all(i.key == "tone" for i in await api("search", ns, query="vegetarian formal", filter={"n": 5}))

    assert await api("list_namespaces", prefix=(s, p)) == [ns, prefs]
    assert await api("list_namespaces", prefix=(s, p), max_depth=2) == [ns]
    assert await api("list_namespaces", prefix=(s, p), limit=1, offset=1) == [prefs]
    across = await api("list_namespaces", prefix=(s, "*"), max_depth=2)
    assert {n for n in across if n[1] in (p, other)} == {ns, (s, other)}
    assert prefs in await api("list_namespaces", prefix=(s, "*"), suffix=("prefs",))

    results = await api(
        "batch",
        [
            PutOp((s, p, "batch"), "a", {"v": 1}),
            PutOp((s, p, "batch"), "b", {"v": 2}),
            GetOp((s, p, "batch"), "a"),
            SearchOp((s, p, "batch"), filter={"v": 2}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", (s, p, "batch")),)),
            PutOp((s, p, "batch"), "a", None),
            GetOp((s, p, "batch"), "a"),
        ],
    )
    assert results[:2] == [None, None] and results[2].value == {"v": 1}
    assert [i.key for i in results[3]] == ["b"] and results[4] == [(s, p, "batch")]
    assert results[5] is None and results[6] is None  # the delete is seen by the get after it

    assert await api("delete", ns, "diet") is None
    receipt = agent.store.erasures[-1]
    assert receipt.namespace == ns and receipt.key == "diet" and receipt.request_id.startswith("er-")
    assert await api("get", ns, "diet") is None
    assert "diet" not in [i.key for i in await api("search", ns)]
    assert "diet" not in [i.key for i in await api("search", ns, query="is the user vegetarian")]
    assert await api("delete", ns, "diet") is None  # nothing left to erase: no error, no erasure
    assert agent.store.erasures[-1] == receipt
    revisions = agent.store.erase(prefs, "answer_length")  # every revision of the item
    assert revisions is not None and len(revisions.memory_ids) == 2
    for request_id in (receipt.request_id, revisions.request_id):
        wait_until(lambda r=request_id: agent.store.trace(r).verdict == "complete", 120, f"trace {request_id}")
        traced = agent.store.trace(request_id)
        assert traced.subject_id == s and traced.reason == "deleted through the LangGraph store"
        assert {st.store for st in traced.stores} >= set(PROJECTIONS)


def test_every_method_sync_and_async(pair: tuple[Agent, Agent]) -> None:
    a, b = pair

    async def run() -> None:
        await every_method(Api(a.store, sync=True), a, "sync")
        async with b.store:
            await every_method(Api(b.store, sync=False), b, "async")

    asyncio.run(run())


def test_two_subjects_with_two_keys_are_refused_across(pair: tuple[Agent, Agent]) -> None:
    a, b = pair
    theirs = (b.subject, "across")
    b.store.put(theirs, "secret", {"code": "4321"})

    async def run(api: Api) -> None:
        attempts: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("put", (theirs, "secret", {"code": "0000"}), {}),
            ("put", (theirs, "new", {"x": 1}), {}),
            ("get", (theirs, "secret"), {}),
            ("search", (theirs,), {}),
            ("search", (theirs,), {"query": "code"}),
            ("list_namespaces", (), {"prefix": (b.subject,)}),
            ("delete", (theirs, "secret"), {}),
        ]
        named = {"search": "namespace_prefix[0]", "list_namespaces": "prefix[0]"}
        for name, args, kwargs in attempts:
            with pytest.raises(Forbidden) as refused:
                await api(name, *args, **kwargs)
            field = named.get(name, "namespace[0]")  # the store's words for where the subject came from
            assert refused.value.field == field and "4321" not in str(refused.value.problem), name
            assert refused.value.problem.detail.startswith(f"{field}: "), name
        with pytest.raises(BatchInterruptedError) as stopped:  # the put before the refused read stands
            await api("batch", [PutOp((a.subject, "across"), "mine", {"x": 1}), GetOp(theirs, "secret")])
        assert isinstance(stopped.value.error, Forbidden) and (stopped.value.written, stopped.value.at) == ((0,), 1)

    asyncio.run(run(Api(a.store, sync=True)))

    async def run_async() -> None:
        async with a.store:
            await run(Api(a.store, sync=False))

    asyncio.run(run_async())
    mine = b.store.get(theirs, "secret")
    assert mine is not None and mine.value == {"code": "4321"}  # nothing of b's changed
    assert [i.key for i in b.store.search(theirs)] == ["secret"]
    done = a.store.get((a.subject, "across"), "mine")
    assert done is not None and done.value == {"x": 1}  # the batch's step before the refusal took effect


def test_a_subject_holding_a_slash_is_one_subject_of_the_ledger(served: serving.Served) -> None:
    """The ledger's subject ids may hold '/': the namespace's subject reaches its routes."""
    team = f"team-{uuid.uuid4().hex[:8]}"
    ns = (f"{team}/alice", "support")
    with LedgerStore(served.url, served.key(f"agent-{team}", [f"{team}/*"]), wait_timeout_s=30) as store:
        store.put(ns, "diet", {"text": "vegetarian"})
        item = store.get(ns, "diet")
        assert item is not None and item.namespace == ns and item.value == {"text": "vegetarian"}
        assert [i.key for i in store.search(ns)] == ["diet"]
        assert store.list_namespaces(prefix=(ns[0],)) == [ns]
        store.delete(ns, "diet")
        assert store.get(ns, "diet") is None and store.search(ns) == []


def test_refusals_name_the_field_and_write_nothing(pair: tuple[Agent, Agent]) -> None:
    agent = pair[0]
    s, p = agent.subject, "bad"
    for run, error, field in [
        (lambda: agent.store.put((s,), "k", {"x": 1}), NamespaceError, "namespace"),
        (lambda: agent.store.put((s, p), "", {"x": 1}), NamespaceError, "key"),  # an empty key
        (lambda: agent.store.get((s, p), ""), NamespaceError, "key"),
        # a subject holding '/' reaches its route, where the grants decide (the key's is s alone)
        (lambda: agent.store.put((f"{s}/x", p), "k", {"x": 1}), Forbidden, "namespace[0]"),
        (lambda: agent.store.put((s, p), "k", {"x": "y" * 40_000}), InvalidValueError, "value"),
        (lambda: agent.store.put((s, p), "k", {"x": 1}, ttl=0), InvalidValueError, "ttl"),
        (lambda: agent.store.search((s,), query="anything"), NamespaceError, "namespace_prefix"),
        (lambda: agent.store.list_namespaces(), NamespaceError, "prefix"),
        (
            lambda: agent.store.batch([PutOp((s, p), "ok", {"x": 1}), PutOp((s,), "k", {})]),
            NamespaceError,
            "ops[1].namespace",
        ),
        (lambda: agent.store.put((s, p), "k", {"x": 10**5000}), InvalidValueError, "value.x"),
        (lambda: agent.store.search((s, p), filter={"x": {"$eq": float("nan")}}), InvalidValueError, "filter.x.$eq"),
        # refused by the ledger, in the store's words: a TTL over before the put arrives, a secret in the second put
        (lambda: agent.store.put((s, p), "k", {"x": 1}, ttl=1e-9), InvalidRequest, "ttl"),
        # personal data makes the memory personal, which needs a consent reference the store does not write
        (lambda: agent.store.put((s, p), "k", {"contact": "bob@example.com"}), InvalidRequest, "value"),
        # operations given to batch directly, past BaseStore's own checks
        (lambda: agent.store.batch([GetOp((s, p), 5)]), NamespaceError, "key"),  # type: ignore[arg-type]
        (lambda: agent.store.batch([PutOp(("langgraph", p), "k", {"x": 1})]), NamespaceError, "namespace[0]"),
        (
            lambda: agent.store.batch([PutOp((s, p), "ok", {"x": 1}), PutOp((s, p), "k", {"x": AWS_KEY})]),
            InvalidRequest,
            "ops[1].value",
        ),
    ]:
        with pytest.raises(error) as refused:
            run()
        assert refused.value.field == field  # type: ignore[attr-defined]
    assert agent.client.memories(s, include_all=True, purpose=p).memories == []


def test_every_get_is_audited_as_an_export_by_the_keys_principal(
    served: serving.Served, pair: tuple[Agent, Agent]
) -> None:
    agent = pair[0]
    s, p = agent.subject, "audited"
    agent.store.put((s, p), "k", {"x": 1})
    with LedgerClient(served.url, served.key(f"auditor-{s}", [], ("admin",))) as admin:
        before = admin.audit(limit=500, subject_id=s).entries
        assert agent.store.get((s, p), "k") is not None and agent.store.get((s, p), "missing") is None
        entries = admin.audit(limit=500, subject_id=s).entries
    new = [(e.principal, e.route, e.outcome, e.reason) for e in entries[: len(entries) - len(before)]]
    route = "GET /v1/subjects/{subject_id}/memories"
    assert new == [
        (f"agent-{s}", route, "ok", "export: 0 memories with content"),  # newest first
        (f"agent-{s}", route, "ok", "export: 1 memory with content"),
    ]


def test_a_delete_erases_what_a_put_of_the_item_replaced(pair: tuple[Agent, Agent]) -> None:
    """A memory written another way under the item's key, then replaced by a put of the
    item, holds a value of the item too: the delete erases it with the item's revisions."""
    agent = pair[0]
    s, p = agent.subject, "outside"
    outside = agent.client.write(s, '{"x": 7}', p, key="langgraph:good", veracity="inferred")
    agent.store.put((s, p), "good", {"x": 8})
    item = agent.store.get((s, p), "good")
    assert item is not None and item.value == {"x": 8}
    receipt = agent.store.erase((s, p), "good")
    assert receipt is not None and outside.memory_id in receipt.memory_ids and len(receipt.memory_ids) == 2
    for memory_id in receipt.memory_ids:  # an erased memory keeps neither its purpose nor its key
        erased = agent.client.memory(s, memory_id).memory
        assert erased.status == "erased" and erased.content is None and erased.erased_by == receipt.request_id


def test_a_batch_of_puts_over_the_servers_body_limit_is_written(pair: tuple[Agent, Agent]) -> None:
    agent = pair[0]
    s, p = agent.subject, "large"
    value = {"text": "lorem ipsum dolor " * 1500}  # 27,000 bytes, below the store's limit; twelve are too many at once
    keys = [f"k{i:02}" for i in range(12)]
    results = agent.store.batch([*(PutOp((s, p), k, value) for k in keys), SearchOp((s, p), limit=20)])
    assert sorted(i.key for i in results[-1]) == keys and all(i.value == value for i in results[-1])


def test_a_put_takes_any_mapping_as_langgraph_types_it(pair: tuple[Agent, Agent]) -> None:
    agent = pair[0]
    ns = (agent.subject, "mapping")
    agent.store.put(ns, "k", MappingProxyType({"a": MappingProxyType({"b": 1})}))
    item = agent.store.get(ns, "k")
    assert item is not None and item.value == {"a": {"b": 1}}


def test_ttl_is_judged_at_read_time_and_reading_never_extends_it(pair: tuple[Agent, Agent]) -> None:
    agent = pair[0]
    ns = (agent.subject, "ttl")
    agent.store.put(ns, "soon", {"x": 1}, ttl=0.2)  # 12 seconds
    agent.store.put(ns, "kept", {"x": 2})
    item = agent.store.get(ns, "soon", refresh_ttl=True)
    assert item is not None
    memory = agent.client.memories(agent.subject, purpose="ttl", key="langgraph:soon").memories[0]
    assert memory.expires_at is not None and memory.written_at is not None
    ttl = memory.expires_at - memory.written_at
    assert timedelta(seconds=11) < ttl <= timedelta(seconds=12)  # minutes from the put, as LangGraph counts
    kept = agent.client.memories(agent.subject, purpose="ttl", key="langgraph:kept").memories[0]
    assert kept.expires_at is not None and kept.expires_at - memory.written_at > timedelta(days=300)  # the class's
    deadline = time.monotonic() + 60
    while agent.store.get(ns, "soon", refresh_ttl=True) is not None:  # reads ask to refresh: ignored
        assert time.monotonic() < deadline, "the item outlived its TTL"
        time.sleep(0.5)
    assert [i.key for i in agent.store.search(ns)] == ["kept"]
    assert agent.store.list_namespaces(prefix=ns) == [ns]
    unswept = agent.client.memories(agent.subject, purpose="ttl", key="langgraph:soon").memories
    assert [m.status for m in unswept] == ["active"]  # not swept: judged expired when read
    again = agent.client.memories(agent.subject, purpose="ttl", key="langgraph:soon").memories[0]
    assert again.expires_at == memory.expires_at  # every read left its life as it was


def test_a_replay_of_every_projection_gives_the_same_answers(served: serving.Served, pair: tuple[Agent, Agent]) -> None:
    agent, s, p = pair[0], pair[0].subject, "replay"
    agent.store.batch(
        [
            PutOp((s, p), "diet", {"text": "vegetarian"}),
            PutOp((s, p, "prefs"), "tone", {"text": "formal tone"}),
            PutOp((s, p, "prefs"), "length", {"text": "short answers"}),
            # the same text three times: equal scores, ranked by memory id, not by the order a replay writes them
            *[PutOp((s, p, "tea"), k, {"text": "likes green tea"}) for k in ("first", "second", "third")],
        ]
    )
    agent.store.put((s, p, "prefs"), "length", {"text": "detailed answers"})
    agent.store.put((s, p), "gone", {"text": "to erase"})
    agent.store.delete((s, p), "gone")

    def reads() -> list[Any]:
        found = agent.store.search((s, p), query="formal tone")
        return [
            agent.store.get((s, p, "prefs"), "length"),
            agent.store.get((s, p), "gone"),
            shown(agent.store.search((s, p))),
            shown(found),
            [round(i.score, 3) for i in found],
            agent.store.list_namespaces(prefix=(s, p)),
            [i.key for i in agent.store.search((s, p, "tea"), query="green tea")],
        ]

    before = reads()
    assert before[0].value == {"text": "detailed answers"} and before[1] is None and before[3]
    for projection in PROJECTIONS:
        served.cli.run("replay", projection, "--json", timeout_s=300)
    # the distributed vectors worker of the new version takes the index over from the replay
    ranked = lambda: not agent.client.recall(s, "formal tone", p).degraded  # noqa: E731
    wait_until(ranked, 120, "recall to rank with every store again", served.cli.worker_logs)
    assert reads() == before


@dataclass
class Context:
    user_id: str


class State(TypedDict):
    message: str
    question: str
    recalled: list[str]


def remember(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    assert runtime.store is not None
    runtime.store.put((runtime.context.user_id, "support"), "diet", {"text": state["message"]})
    return {}


def recall(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    assert runtime.store is not None
    found = runtime.store.search((runtime.context.user_id, "support"), query=state["question"])
    return {"recalled": [item.value["text"] for item in found]}


def example_graph(store: BaseStore) -> Any:
    """The README's example: a node that writes, a node that searches."""
    return (
        StateGraph(State, context_schema=Context)
        .add_node(remember)
        .add_node(recall)
        .add_edge(START, "remember")
        .add_edge("remember", "recall")
        .add_edge("recall", END)
        .compile(store=store)
    )


def test_the_readme_example_graph_runs_offline_against_the_embedded_default(embedded: serving.Served) -> None:
    agent = Agent(embedded, "graph")
    try:
        graph = example_graph(agent.store)
        context = Context(user_id=agent.subject)
        out = graph.invoke({"message": "I am vegetarian", "question": "is the user vegetarian"}, context=context)
        assert out["recalled"] == ["I am vegetarian"]
        again = graph.invoke({"message": "I am vegan now", "question": "is the user vegan"}, context=context)
        assert again["recalled"] == ["I am vegan now"]  # the put superseded the first answer
    finally:
        agent.close()
