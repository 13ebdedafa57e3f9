"""What a batch of LangGraph store operations asks of the ledger, without I/O.

``batch`` is a generator: it yields the HTTP API calls to make (``workers.client.calls``)
and is sent their answers (or thrown the client's error), so that the synchronous and
the asynchronous store drive the same steps with their own client. Every operation of
the batch is checked first (namespace, key, value, TTL, filter, bounds): a bad one
refuses the whole batch before anything is sent. Then the operations run in order, each
seeing what the ones before it did (every read waits until the projections it reads
have applied the store's own writes):

- a run of puts of one subject is one batch write (at most ``wire.MAX_BATCH`` memories
  in one transaction, halved while the server finds the request too large): each
  memory supersedes the live memory of its key (``supersede_key``), kind ``fact``,
  veracity ``inferred`` (the agent's own note); a put's TTL counts from when its request
  is sent (the batch's clock is read then), not from when the batch was planned;
- a delete is an erasure by the item's source (every revision), whose receipt
  (request id) goes to the session; nothing left to erase is no error;
- a get lists the item's key, live and unexpired; a search without a query lists the
  namespace prefix and filters, newest put first; with a query it recalls for the
  prefix's purpose (recall's rules and ranking), keeps the items under the prefix that
  pass the filter, and reads each one's times (``offset + limit`` at most ``RECALL_TOP``);
- ``list_namespaces`` lists the live items under the subject of its prefix and
  returns their namespaces, matched, cut at ``max_depth``, sorted.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final, Protocol, TypeVar

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from contracts.types import text_problem
from workers import wire
from workers.client import ApiError, Forbidden, InvalidRequest, LedgerClientError, NotFound, TransportError, calls
from workers.client.calls import Call
from workers.langgraph_store import filters, namespaces, values
from workers.langgraph_store.errors import BatchInterruptedError, InvalidValueError, LedgerStoreError, NamespaceError
from workers.langgraph_store.namespaces import Address, Prefix

log = logging.getLogger(__name__)

T = TypeVar("T")
E = TypeVar("E", bound=ApiError)
Step = Generator[Call[Any], Any, T]
"""A generator that yields calls, is sent their answers, and returns a ``T``."""

Clock = Callable[[], datetime]
"""The time now, aware UTC (``contracts.utc_now``, or a fake one)."""

KIND: Final = "fact"
VERACITY: Final = "inferred"
"""An item is the agent's own note: a fact recorded as inferred by an agent (confidence 0.7)."""

ERASURE_REASON = "deleted through the LangGraph store"
ERASURE_BASIS = "deletion by the agent (LangGraph store)"

PAGE = 500
"""Memories per listing page (the API's largest)."""

MAX_K = 1000
"""The most items one recall returns (the API's bound)."""

MAX_QUERY_CHARS = 4096
"""The longest query recall takes."""

RECALL_TOP: Final = 50
"""The most items a search with a query reaches: ``offset + limit`` at most this. Recall
ranks only the best 50 candidates of each of its rankers
(``projections.ranking.config.RankingConfig.depth``, not a setting), so past its 50th
answer it is no longer a ranking of every match, and a window there would come back short
without a word."""

LIVE = ("active", "needs_confirmation")

RESERVED_ROOT: Final = "langgraph"
"""The root label LangGraph reserves: no put may name it (``BaseStore.put``'s rule)."""


@dataclass(frozen=True)
class Config:
    """How the store writes and waits: the sensitivity class of its memories, the
    agent label recorded beside the principal, the limit on a value (bytes of JSON) and
    the longest wait for the projections to apply the store's writes (seconds)."""

    sensitivity: str = "internal"
    agent: str | None = "langgraph"
    max_value_bytes: int = values.MAX_VALUE_BYTES
    wait_timeout_s: float = 10.0


@dataclass(frozen=True)
class ErasureReceipt:
    """A delete of the store: the item, the erasure's ``request_id`` (follow it with
    ``LedgerStore.trace``), the memories erased (every revision of the item, and what
    was derived from them) and where the log holds the erasure (empty when ``pending``:
    recorded, the log's acknowledgement lost; the relay publishes it)."""

    namespace: tuple[str, ...]
    key: str
    request_id: str
    memory_ids: tuple[str, ...]
    positions: tuple[wire.LogPosition, ...]
    pending: bool = False


class Session(Protocol):
    """What a batch shares with its store: the log positions of the store's own writes
    (reads wait for them) and the receipts of its erasures."""

    def after(self) -> list[wire.LogPosition]: ...

    def acknowledged(self, positions: Sequence[wire.LogPosition]) -> None: ...

    def erased(self, receipt: ErasureReceipt) -> None: ...


def batch(ops: Sequence[Op], cfg: Config, session: Session, clock: Clock) -> Step[list[Result]]:
    """The results of ``ops``, in order (``None`` for a put or a delete). ``clock`` (aware
    UTC) is read as each batch write is sent: its time plus a put's TTL is the put's
    ``expires_at``, so the time the earlier operations take does not shorten the later
    puts' lives.

    Raises:
        NamespaceError, InvalidValueError: a bad operation (before anything is sent).
        workers.client.ApiError: the server's refusal of a step (``Forbidden`` for a
            subject outside the key's grants) before any write of the batch took effect
            (the reads before it ran); ``workers.client.TransportError`` likewise.
        BatchInterruptedError: either of those after a write of the batch took effect:
            which puts and deletes were written, which were not, which are in doubt.
    """
    places = [f"ops[{i}]" if len(ops) > 1 else "" for i in range(len(ops))]
    prepared: list[_Step] = []
    for op, place in zip(ops, places, strict=True):
        try:
            prepared.append(_prepare(op, cfg))
        except LedgerStoreError as exc:
            raise exc.at(place) from None
    results: list[Result] = [None] * len(prepared)
    progress = _Progress(prepared)
    i = 0
    try:
        while i < len(prepared):
            step = prepared[i]
            progress.at = i
            if isinstance(step, _Put):
                run = [step]
                while i + len(run) < len(prepared) and len(run) < wire.MAX_BATCH:
                    after = prepared[i + len(run)]
                    if not isinstance(after, _Put) or after.address.subject_id != step.address.subject_id:
                        break
                    run.append(after)
                yield from _write(run, session, places[i : i + len(run)], clock, range(i, i + len(run)), progress)
                i += len(run)
                continue
            progress.sending((i,) if isinstance(step, _Delete) else ())
            results[i] = yield from step.run(cfg, session)
            progress.done()
            i += 1
    except LedgerClientError as exc:
        named = _forbidden_in_place(exc, prepared[progress.at].subject_field, places[progress.at])
        interrupted = progress.interrupted(named)
        if interrupted is not None:
            raise interrupted from exc
        if named is exc:
            raise
        raise named from None
    return results


def _forbidden_in_place(exc: LedgerClientError, subject_field: str, place: str) -> LedgerClientError:
    """``exc`` naming, for a subject outside the key's grants (403 on ``subject_id``),
    the label that named the subject (``subject_field``) in the operation's place
    (``ops[2].namespace[0]``): the store's words, as ``put_field`` gives them for a
    refused put; otherwise ``exc``."""
    if not isinstance(exc, Forbidden) or exc.field != "subject_id":
        return exc
    return _renamed(exc, place, subject_field, exc.rule or "")


def _renamed(exc: E, place: str, field: str, rule: str) -> E:
    """``exc`` (a refusal of the server) naming ``field`` in the operation's ``place``
    (``ops[2].value``; none for the only operation) and ``rule``, in its problem's
    ``field``, ``rule`` and ``detail``."""
    named = f"{place}.{field}" if place else field
    problem = exc.problem.model_copy(update={"field": named, "rule": rule, "detail": f"{named}: {rule}"})
    return type(exc)(exc.status, problem)


class _Progress:
    """What the writes of a batch have done so far: the indices of the puts and deletes
    written, and of those of the request being sent (``sending``); ``at`` is the
    operation being run."""

    def __init__(self, prepared: Sequence[_Step]) -> None:
        self.items = {i: (s.namespace, s.key) for i, s in enumerate(prepared) if isinstance(s, _Put | _Delete)}
        self.written: list[int] = []
        self.at = 0
        self._sending: tuple[int, ...] = ()

    def sending(self, indices: Sequence[int]) -> None:
        self._sending = tuple(indices)
        if self._sending:
            self.at = self._sending[0]

    def done(self) -> None:
        """The request being sent took effect."""
        self.written += self._sending
        self._sending = ()

    def interrupted(self, error: LedgerClientError) -> BatchInterruptedError | None:
        """``error`` stopped the batch: the error naming what was written, or ``None``
        when no write of the batch took effect (then ``error`` is the answer as it is)."""
        if not self.written:
            return None
        in_doubt = self._sending if isinstance(error, TransportError) and error.outcome_unknown else ()
        settled = {*self.written, *in_doubt}
        not_written = [i for i in self.items if i not in settled]
        return BatchInterruptedError(error, self.at, self.written, not_written, in_doubt, self.items)


# -- the operations, checked ----------------------------------------------------------


class _Step:
    subject_field: ClassVar[str] = "namespace[0]"
    """Where the operation names its subject, in the store's words (a refusal of the
    subject names it)."""

    def run(self, cfg: Config, session: Session) -> Step[Result]:
        raise NotImplementedError


@dataclass(frozen=True)
class _AtItem(_Step):
    """An operation on one item: its namespace and key, and its ledger address."""

    namespace: tuple[str, ...]
    key: str
    address: Address


@dataclass(frozen=True)
class _Put(_AtItem):
    """A put of the item: ``memory`` is its new revision, without its ``expires_at``,
    which ``ttl_minutes`` (``None``: no TTL) gives when it is sent (``memory_at``). Puts
    run in batches (``batch``), not one by one."""

    memory: wire.WriteMemory
    ttl_minutes: float | None

    def memory_at(self, now: datetime) -> wire.WriteMemory:
        """The revision as sent at ``now`` (aware UTC): its TTL counts from then."""
        if self.ttl_minutes is None:
            return self.memory  # the class's maximum lifetime, the ledger's retention rule
        return self.memory.model_copy(update={"expires_at": now + timedelta(minutes=self.ttl_minutes)})


@dataclass(frozen=True)
class _Delete(_AtItem):
    """A delete of the item: an erasure of every revision (by its source) and of every
    earlier version they superseded (``with_history``: a memory written another way under
    the item's key before a put replaced it holds a value of the item too)."""

    def run(self, cfg: Config, session: Session) -> Step[Result]:
        yield from self.erase(session)
        return None

    def erase(self, session: Session) -> Step[ErasureReceipt | None]:
        """The erasure and its receipt (also given to the session); ``None`` when
        nothing of the item is left to erase."""
        erase = wire.Erase(
            source=self.address.source_ref, reason=ERASURE_REASON, legal_basis=ERASURE_BASIS, with_history=True
        )
        try:
            ack: wire.CommandAck = yield calls.erase(self.address.subject_id, erase)
        except ApiError as exc:
            if exc.status in (409, 422) and exc.field == "source_ref":
                return None  # nothing of the item is left to erase (ledger.erasure.erasure_targets)
            raise
        session.acknowledged(ack.positions)
        receipt = ErasureReceipt(
            self.namespace, self.key, ack.request_id or "", tuple(ack.affected), tuple(ack.positions), ack.pending
        )
        session.erased(receipt)
        return receipt


def erase(namespace: tuple[str, ...], key: str, session: Session) -> Step[ErasureReceipt | None]:
    """A delete of the item ``key`` in ``namespace`` that answers with its receipt.

    Raises:
        NamespaceError: before anything is sent; workers.client.ApiError: the refusal.
    """
    step = _prepare(PutOp(namespace, key, None), Config())
    assert isinstance(step, _Delete)
    return (yield from step.erase(session))


@dataclass(frozen=True)
class _Get(_AtItem):
    """A get of the item: its live, unexpired memory."""

    def run(self, cfg: Config, session: Session) -> Step[Result]:
        a = self.address
        found = yield from _listed(a.subject_id, a.purpose, cfg, session, key=a.key)
        same = [i for i in found if i.namespace == self.namespace and i.key == self.key]
        return same[-1] if same else None  # the newest, were a slot ever in conflict


@dataclass(frozen=True)
class _Search(_Step):
    op: SearchOp
    prefix: Prefix
    subject_field: ClassVar[str] = "namespace_prefix[0]"

    def run(self, cfg: Config, session: Session) -> Step[Result]:
        op, p = self.op, self.prefix
        if not op.query:
            found = yield from _listed(p.subject_id, p.purpose, cfg, session, key_prefix=p.key_prefix)
            kept = [
                i for i in found if _under(i.namespace, op.namespace_prefix) and filters.matches(i.value, op.filter)
            ]
            kept.sort(key=lambda i: (-i.updated_at.timestamp(), i.namespace, i.key))
            window = kept[op.offset : op.offset + op.limit]
            return [SearchItem(i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in window]
        hits = yield from self._recalled(cfg, session)
        out: list[SearchItem] = []
        for hit in hits[op.offset : op.offset + op.limit]:
            try:
                detail: wire.MemoryDetail = yield calls.memory(
                    p.subject_id, hit.memory_id, session.after(), cfg.wait_timeout_s
                )
            except NotFound:
                continue  # erased since it was recalled
            item = _item(detail.memory)
            if item is not None and detail.memory.status in LIVE:
                out.append(
                    SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, hit.score)
                )
        return out

    def _recalled(self, cfg: Config, session: Session) -> Step[list[wire.RecalledItem]]:
        """Recalled items under the prefix that pass the filter, best first: recall for
        ``offset + limit`` of them, asking for more (at most ``MAX_K``) while recall had
        more to give."""
        op, p = self.op, self.prefix
        assert op.query and p.purpose is not None
        need = op.offset + op.limit
        k = min(MAX_K, max(10, 2 * need))
        while True:
            result: wire.RecallResult = yield calls.recall(
                p.subject_id, op.query, p.purpose, k, None, (), False, session.after(), cfg.wait_timeout_s
            )
            if result.degraded:
                log.warning("recall for %s left out %s: a store did not answer", p.subject_id, result.degraded)
            hits = [h for h in _flat(result.items) if self._keeps(h)]
            if len(hits) >= need or len(result.items) < k or k >= MAX_K:
                return hits
            k = min(MAX_K, k * 4)

    def _keeps(self, hit: wire.RecalledItem) -> bool:
        where = namespaces.item_of(hit.subject_id, hit.purpose, hit.key)
        value = values.value_of(hit.content)
        return (
            where is not None
            and value is not None
            and hit.scope.get("type") == "subject"
            and _under(where[0], self.op.namespace_prefix)
            and filters.matches(value, self.op.filter)
        )


@dataclass(frozen=True)
class _ListNamespaces(_Step):
    op: ListNamespacesOp
    prefix: Prefix
    subject_field: ClassVar[str] = "prefix[0]"

    def run(self, cfg: Config, session: Session) -> Step[Result]:
        op, p = self.op, self.prefix
        found = yield from _listed(p.subject_id, p.purpose, cfg, session, key_prefix=p.key_prefix)
        conditions = op.match_conditions or ()
        spaces = {
            i.namespace for i in found if all(namespaces.matches(i.namespace, c.path, c.match_type) for c in conditions)
        }
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]


def _prepare(op: Op, cfg: Config) -> _Step:
    """``op`` checked and mapped onto the ledger.

    Raises:
        NamespaceError, InvalidValueError.
    """
    _check_shape(op)
    validate_op_namespace(op)
    if isinstance(op, PutOp):
        namespace, address = tuple(op.namespace), namespaces.address(op.namespace, op.key)
        if op.value is None:
            return _Delete(namespace, op.key, address)
        if namespace[0] == RESERVED_ROOT:  # as BaseStore.put, for a PutOp given to batch directly
            raise NamespaceError("namespace[0]", f"the root label must not be {RESERVED_ROOT!r}: LangGraph reserves it")
        ttl_minutes = None if op.ttl is None else check_ttl(op.ttl, "ttl")
        memory = wire.WriteMemory(
            content=values.content_of(op.value, cfg.max_value_bytes),
            purpose=address.purpose,
            kind=KIND,
            key=address.key,
            sensitivity=cfg.sensitivity,  # type: ignore[arg-type]
            source_ref=address.source_ref,
            veracity=VERACITY,
            agent=cfg.agent,
            supersede_key=True,
        )
        return _Put(namespace, op.key, address, memory, ttl_minutes)
    if isinstance(op, GetOp):
        return _Get(tuple(op.namespace), op.key, namespaces.address(op.namespace, op.key))
    if isinstance(op, SearchOp):
        _bound("limit", op.limit)
        _bound("offset", op.offset)
        filters.check(op.filter)
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidValueError("query", f"must be a string, not {type(op.query).__name__}")
        if op.query and len(op.query) > MAX_QUERY_CHARS:
            raise InvalidValueError("query", f"must be at most {MAX_QUERY_CHARS} characters")
        if op.query and (problem := text_problem(op.query)) is not None:
            raise InvalidValueError("query", problem)
        if op.query and op.offset + op.limit > RECALL_TOP:
            raise InvalidValueError(
                "offset" if op.offset >= RECALL_TOP else "limit",
                f"with a query, offset + limit ({op.offset} + {op.limit}) must be at most {RECALL_TOP}:"
                f" recall ranks only its best {RECALL_TOP} candidates of each ranker",
            )
        return _Search(op, namespaces.prefix(op.namespace_prefix, need_purpose=bool(op.query)))
    if isinstance(op, ListNamespacesOp):
        _bound("limit", op.limit)
        _bound("offset", op.offset)
        if op.max_depth is not None and (
            isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
        ):
            raise InvalidValueError("max_depth", f"must be a whole number, 1 or more, not {op.max_depth!r}")
        prefixes = [c for c in op.match_conditions or () if c.match_type == "prefix"]
        if not prefixes:
            raise NamespaceError("prefix", "must name the subject first: (subject_id, ...); subjects are not listed")
        return _ListNamespaces(op, namespaces.pattern_prefix(prefixes[0].path))
    raise InvalidValueError("op", f"unknown operation {type(op).__name__}")


def _write(
    run: Sequence[_Put],
    session: Session,
    places: Sequence[str],
    clock: Clock,
    at: Sequence[int],
    progress: _Progress,
) -> Step[None]:
    """One batch write of the puts of ``run`` (one subject), all or none; ``places``
    are their places in the batch (``ops[3]``; empty for the only operation), ``at``
    their indices, given to ``progress`` as they are sent and written. ``clock``
    is read as the request is made: the puts' TTLs count from then. A request
    the server finds too large (413: over its ``MEMLEDGER_API_MAX_BODY_BYTES``, which
    the store cannot know; 100 values of 32 KiB are more than the default 2 MiB) is
    written as two halves, one after the other, each all or none (and each with the
    clock read again).

    Raises:
        workers.client.InvalidRequest: the server refused a put; the field is the put's
            (``put_field``), in its place (``ops[3].value``); a 413 of a single put.
    """
    progress.sending(at)
    try:
        now = clock()
        ack: wire.BatchAck = yield calls.write_batch(run[0].address.subject_id, [p.memory_at(now) for p in run])
    except InvalidRequest as exc:
        if exc.status == TOO_LARGE and len(run) > 1:
            half = len(run) // 2
            yield from _write(run[:half], session, places[:half], clock, at[:half], progress)
            yield from _write(run[half:], session, places[half:], clock, at[half:], progress)
            return
        raise _in_place(exc, places) from None
    progress.done()
    session.acknowledged([pos for r in ack.results for pos in r.positions])


TOO_LARGE: Final = 413
"""The status of a request body over the server's limit."""

_BATCH_ITEM = re.compile(r"memories\.(\d+)\.(.+)")
"""How the server names a field of one memory of a batch write: ``memories.1.content``."""


def put_field(field: str, rule: str) -> tuple[str, str]:
    """The field of a put that a refused field of its memory comes from, and the rule
    to say: the memory's ``content`` is the put's ``value``, its
    ``expires_at`` (the server's name of ``retention.expires_at``) what the put's ``ttl``
    made of it, its ``key`` the put's ``key``; a missing ``consent_ref`` is the
    ``value`` too (screening found personal data in it, which makes the memory
    ``personal``, and the store writes no consent reference: the store's class is
    ``internal`` or ``public``, which need none); the memory's ``subject_id`` and
    ``purpose`` are the namespace's first two labels, its ``key`` the labels below them
    and the item's key together (a label's personal data has no other place in this store:
    the advice to put it in the content is dropped); other fields as the server names them."""
    if field == "content":
        return "value", rule
    if field in ("subject_id", "purpose", "key"):
        rule = rule.split("; put personal data in the content")[0]
        if field == "key":
            return "key", f"{rule} (the memory's key is made of the namespace below the purpose and the item's key)"
        return ("namespace[0]" if field == "subject_id" else "namespace[1]"), rule
    if field in ("consent_ref", "provenance.consent_ref"):
        return "value", f"{rule}; the store writes no consent reference, so a value may not hold personal data"
    if field in ("expires_at", "retention.expires_at"):
        return "ttl", f"gives the memory's expires_at, which the ledger refuses: {rule}"
    return field, rule


def _in_place(exc: InvalidRequest, places: Sequence[str]) -> InvalidRequest:
    """``exc`` naming the put it refused in the store's words (``put_field``) and place;
    as it is when it names no memory of the batch."""
    found = _BATCH_ITEM.fullmatch(exc.field or "")
    if found is None or int(found[1]) >= len(places):
        return exc
    return _renamed(exc, places[int(found[1])], *put_field(found[2], exc.rule or ""))


def _listed(
    subject_id: str,
    purpose: str | None,
    cfg: Config,
    session: Session,
    key: str | None = None,
    key_prefix: str | None = None,
) -> Step[list[Item]]:
    """The live, unexpired items of the subject (and purpose) with ``key`` or under
    ``key_prefix``, page by page, in memory id order."""
    items: list[Item] = []
    after_id: str | None = None
    while True:
        page: wire.MemoryPage = yield calls.memories(
            subject_id, False, PAGE, after_id, session.after(), cfg.wait_timeout_s, purpose, key, key_prefix, True
        )
        items += [i for i in map(_item, page.memories) if i is not None]
        if page.next_after is None:
            return items
        after_id = page.next_after


def _item(m: wire.MemoryOut) -> Item | None:
    """The item a memory holds: ``created_at`` when its key was first given a value (of
    the revisions still held), ``updated_at`` when this value was put; ``None`` for a
    memory the store did not write: one without the item's ``source_ref`` (written
    another way under a key that looks like an item's) is no item, since a delete, an
    erasure by that source, would not reach it."""
    if m.purpose is None or m.written_at is None or m.scope.get("type") != "subject" or m.key is None:
        return None
    where = namespaces.item_of(m.subject_id, m.purpose, m.key)
    value = values.value_of(m.content)
    if where is None or value is None:
        return None
    if m.provenance.get("source_ref") != Address(m.subject_id, m.purpose, m.key).source_ref:
        return None
    created = m.first_written_at or m.written_at
    return Item(value=value, key=where[1], namespace=where[0], created_at=created, updated_at=m.written_at)


def _flat(items: Sequence[wire.RecalledItem]) -> list[wire.RecalledItem]:
    """Recalled items with the sources grouped under a summary after it, in rank order."""
    return [x for i in items for x in (i, *i.grouped)]


def _under(namespace: Sequence[str], prefix: Sequence[str]) -> bool:
    return tuple(namespace[: len(prefix)]) == tuple(prefix)


MAX_TTL_MINUTES: Final = 100 * 366 * 24 * 60
"""The longest TTL taken, in minutes (a date must stay representable; the retention of
the item's sensitivity class may allow far less, and the ledger refuses beyond it)."""


def check_ttl(minutes: object, field: str) -> float:
    """``minutes`` as a TTL: a positive, finite number of minutes (LangGraph's unit).

    Raises:
        InvalidValueError: ``field``, for anything else.
    """
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes):
        raise InvalidValueError(field, f"must be a number of minutes, not {minutes!r}")
    if minutes <= 0:
        raise InvalidValueError(field, f"must be more than 0 minutes, not {minutes!r}")
    if minutes > MAX_TTL_MINUTES:
        raise InvalidValueError(field, f"must be at most {MAX_TTL_MINUTES} minutes (100 years), not {minutes!r}")
    return float(minutes)


def _check_shape(op: Op) -> None:
    """Each namespace of ``op`` is a tuple (or list) of labels: a string given as a
    namespace would be read one character a label (``'user-42'``: subject ``'u'``, purpose
    ``'s'``), a write under another subject.

    Raises:
        NamespaceError: the field (``namespace``, ``namespace_prefix``, ``prefix`` or
            ``suffix``) and what it was.
    """
    found: list[tuple[str, object]] = []
    if isinstance(op, PutOp | GetOp):
        found.append(("namespace", op.namespace))
    elif isinstance(op, SearchOp):
        found.append(("namespace_prefix", op.namespace_prefix))
    elif isinstance(op, ListNamespacesOp):
        found += [(c.match_type, c.path) for c in op.match_conditions or ()]
    for field, namespace in found:
        if not isinstance(namespace, tuple | list):
            shown = f" ({namespace!r} would be read one character a label; give ({namespace!r}, ...))"
            raise NamespaceError(
                field,
                f"must be a tuple of labels, not {type(namespace).__name__}"
                + (shown if isinstance(namespace, str) else ""),
            )


def _bound(field: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidValueError(field, f"must be a whole number, 0 or more, not {n!r}")
