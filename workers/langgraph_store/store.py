"""``LedgerStore``: LangGraph's ``BaseStore`` over the HTTP API of ``memledger serve``.

LangGraph derives ``get``, ``put``, ``search``, ``delete``, ``list_namespaces`` and their
async forms from ``batch`` and ``abatch``; both run the steps of ``workers.langgraph_store.plan``,
``batch`` with the synchronous Python client, ``abatch`` with the asynchronous one.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig

from contracts import utc_now
from workers import wire
from workers.client import AsyncLedgerClient, LedgerClient, LedgerClientError, RetryPolicy
from workers.client.calls import Call
from workers.langgraph_store import namespaces, plan, values
from workers.langgraph_store.errors import InvalidValueError, UnsupportedError
from workers.langgraph_store.plan import ErasureReceipt, Step
from workers.wire.models import Sensitivity

if TYPE_CHECKING:
    from ledger.detectors import Screener

T = TypeVar("T")

KEPT_ERASURES = 1000
"""Erasure receipts a store keeps (``LedgerStore.erasures``), the newest."""


WRITABLE_CLASSES = ("internal", "public")
"""The sensitivity classes the store may write in: the checked-in retention policy
(``ledger/retention.toml``) requires a consent reference on every ``restricted`` memory,
and on every ``personal`` one unless its basis is ``contract``; the store gives neither
(a consent is the subject's, not the store's), so every put in those classes would be
refused."""


class LedgerStore(BaseStore):
    """LangGraph's long-term memory store backed by the ledger, through ``memledger
    serve`` at ``base_url`` with API key ``token`` (``memledger keys create``; read and
    write scopes, erase for ``delete``, and grants for the subjects its namespaces name).

    Namespaces are ``(subject_id, purpose, *rest)`` (``workers.langgraph_store.namespaces``);
    a value is a memory's content (``workers.langgraph_store.values``, at most
    ``max_value_bytes`` bytes of JSON); a put supersedes the item's live memory; a
    delete erases every revision, its receipt in ``erasures``; ``search`` with a query
    is a recall. Memories are written in ``sensitivity``'s class with ``agent`` as the
    agent's label beside the key's principal. TTLs are in minutes (LangGraph's unit)
    and become the memory's ``expires_at``; without one a memory keeps its class's
    maximum lifetime. Reads wait at most ``wait_timeout_s`` seconds for the projections
    to apply the store's own writes; each request takes at most ``timeout_s`` seconds,
    with ``retry``'s retries on 429, 503 and lost connections.

    ``ttl`` (LangGraph's ``TTLConfig``) may give ``default_ttl`` (minutes); a
    ``refresh_on_read`` of true is refused (reading never extends a memory's life), so
    is ``sweep_interval_minutes`` (``memledger sweep`` expires memories) and an
    ``omit_expired`` of false (expired memories are never read). A read's own
    ``refresh_ttl`` is ignored for the same reason. ``index`` is refused: the ledger
    embeds memories with its own model and ranks them with recall; a put's ``index``
    is ignored (the whole value is the memory's text).

    The asynchronous client serves one event loop at a time: ``await store.aclose()``
    before that loop ends (``async with store``); a later ``abatch`` in another loop
    opens another.

    Raises (at construction):
        UnsupportedError: ``index``, or a ``ttl`` setting the ledger does not honour.
        InvalidValueError: ``sensitivity`` not a class, or one outside
            ``WRITABLE_CLASSES``; ``max_value_bytes`` or ``wait_timeout_s`` out of range;
            an ``agent`` label the ledger refuses (``_check_agent``).
        workers.client.InvalidArgument: a ``token`` the client refuses (field ``token``).
    """

    supports_ttl = True

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        sensitivity: str = "internal",
        agent: str | None = "langgraph",
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        max_value_bytes: int = values.MAX_VALUE_BYTES,
        wait_timeout_s: float = 10.0,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        if index is not None:
            raise UnsupportedError(
                "index", "the ledger embeds memories with its own model and recall ranks them: give no index"
            )
        if sensitivity not in get_args(Sensitivity):
            raise InvalidValueError("sensitivity", f"must be one of {', '.join(get_args(Sensitivity))}")
        if sensitivity not in WRITABLE_CLASSES:
            raise InvalidValueError(
                "sensitivity",
                f"{sensitivity} memories need a consent reference, which the store does not write;"
                f" use {' or '.join(WRITABLE_CLASSES)}",
            )
        if (
            isinstance(max_value_bytes, bool)
            or not isinstance(max_value_bytes, int)
            or not 1 <= max_value_bytes <= values.CONTENT_MAX_CHARS
        ):
            raise InvalidValueError(
                "max_value_bytes", f"must be a whole number between 1 and {values.CONTENT_MAX_CHARS}"
            )
        if not 0 <= wait_timeout_s <= 60:
            raise InvalidValueError("wait_timeout_s", "must be between 0 and 60 seconds")
        if agent is not None:
            _check_agent(agent)
        self.ttl_config = ttl_config(ttl)
        self._cfg = plan.Config(sensitivity, agent, max_value_bytes, wait_timeout_s)
        self._base_url, self._token, self._timeout_s, self._retry = base_url, token, timeout_s, retry
        self._client = LedgerClient(base_url, token, timeout_s=timeout_s, retry=retry)
        self._aclient: AsyncLedgerClient | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._session = _Session()

    @property
    def erasures(self) -> deque[ErasureReceipt]:
        """The receipts of this store's deletes, oldest first (the last ``KEPT_ERASURES``)."""
        return self._session.receipts

    # -- BaseStore ------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (see ``workers.langgraph_store.plan.batch``) with the
        synchronous client.

        Raises:
            NamespaceError, InvalidValueError: a bad operation; nothing was sent.
            workers.client.ApiError: the server refused a step (``Forbidden``: a subject
                outside the key's grants) before any write of the batch took effect.
            workers.client.TransportError: the server could not be reached, likewise.
            BatchInterruptedError: either, after a write of the batch took effect: its
                ``written``, ``not_written`` and ``in_doubt`` name the puts and deletes
                by index (and namespace and key), ``error`` is the refusal.
        """
        return _drive(plan.batch(list(ops), self._cfg, self._session, utc_now), self._client.send)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` with the asynchronous client (raises as ``batch``)."""
        step = plan.batch(list(ops), self._cfg, self._session, utc_now)
        return await _adrive(step, self._async_client().send)

    # -- erasure ----------------------------------------------------------------------

    def erase(self, namespace: tuple[str, ...], key: str) -> ErasureReceipt | None:
        """``delete``, answering with the erasure's receipt (also kept in ``erasures``;
        ``None``: nothing of the item was left to erase). Raises as ``batch``."""
        return _drive(plan.erase(tuple(namespace), key, self._session), self._client.send)

    async def aerase(self, namespace: tuple[str, ...], key: str) -> ErasureReceipt | None:
        """``erase`` with the asynchronous client."""
        return await _adrive(plan.erase(tuple(namespace), key, self._session), self._async_client().send)

    def trace(self, request_id: str) -> wire.TraceOut:
        """Where erasure ``request_id`` was applied, store by store, and the verdict
        (``complete``, ``pending``, ``failed``). Raises ``workers.client.ApiError``."""
        return self._client.trace(request_id)

    async def atrace(self, request_id: str) -> wire.TraceOut:
        """``trace`` with the asynchronous client."""
        return await self._async_client().trace(request_id)

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the synchronous client."""
        self._client.close()

    async def aclose(self) -> None:
        """Close the asynchronous client (in the event loop it served)."""
        if self._aclient is not None:
            client, self._aclient, self._aloop = self._aclient, None, None
            await client.aclose()

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> LedgerStore:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    def _async_client(self) -> AsyncLedgerClient:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aloop is not loop:
            self._aclient = AsyncLedgerClient(self._base_url, self._token, timeout_s=self._timeout_s, retry=self._retry)
            self._aloop = loop
        return self._aclient


def ttl_config(given: TTLConfig | None) -> TTLConfig:
    """The store's ``TTLConfig``: ``given``'s ``default_ttl`` (minutes), reads that never
    refresh a TTL, expired items never returned.

    Raises:
        UnsupportedError: ``refresh_on_read`` true, ``omit_expired`` false, or
            ``sweep_interval_minutes`` given.
        InvalidValueError: not a mapping, a key ``TTLConfig`` does not have, or a
            ``default_ttl`` that is not a positive number of minutes.
    """
    given = given or {}
    if not isinstance(given, Mapping):
        raise InvalidValueError("ttl", f"must be a TTLConfig (a mapping), not {type(given).__name__}")
    unknown = sorted(str(k) for k in given if k not in TTLConfig.__annotations__)
    if unknown:
        raise InvalidValueError(
            f"ttl.{unknown[0]}", f"is not a TTLConfig setting (those are {', '.join(TTLConfig.__annotations__)})"
        )
    if given.get("refresh_on_read"):
        raise UnsupportedError("ttl.refresh_on_read", "reading never extends a memory's life in this ledger")
    if given.get("omit_expired") is False:
        raise UnsupportedError("ttl.omit_expired", "an expired memory is never read, swept or not")
    if given.get("sweep_interval_minutes") is not None:
        raise UnsupportedError(
            "ttl.sweep_interval_minutes", "memledger sweep expires memories: the store sweeps nothing"
        )
    default = given.get("default_ttl")
    if default is not None:
        plan.check_ttl(default, "ttl.default_ttl")
    return TTLConfig(refresh_on_read=False, omit_expired=True, default_ttl=default)


class _Session:
    """The positions of the store's own acknowledged writes (the newest per partition,
    which every read waits for) and its erasure receipts; shared by the threads that
    call the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[int, int] = {}
        self.receipts: deque[ErasureReceipt] = deque(maxlen=KEPT_ERASURES)

    def after(self) -> list[wire.LogPosition]:
        with self._lock:
            return [wire.LogPosition(partition=p, offset=o) for p, o in sorted(self._newest.items())]

    def acknowledged(self, positions: Sequence[wire.LogPosition]) -> None:
        with self._lock:
            for pos in positions:
                self._newest[pos.partition] = max(pos.offset, self._newest.get(pos.partition, -1))

    def erased(self, receipt: ErasureReceipt) -> None:
        with self._lock:
            self.receipts.append(receipt)


def _drive(step: Step[T], send: Callable[[Call[Any]], Any]) -> T:
    """Run ``step``, sending each call it yields and giving it the answer (or the
    client's error, a refusal or a request that could not be sent, which it may handle
    or name in its own)."""
    try:
        call = next(step)
        while True:
            try:
                answer = send(call)
            except LedgerClientError as exc:
                call = step.throw(exc)
            else:
                call = step.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _adrive(step: Step[T], send: Callable[[Call[Any]], Awaitable[Any]]) -> T:
    """``_drive`` with an asynchronous ``send``."""
    try:
        call = next(step)
        while True:
            try:
                answer = await send(call)
            except LedgerClientError as exc:
                call = step.throw(exc)
            else:
                call = step.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _check_agent(agent: str) -> None:
    """Refuse an ``agent`` label that the ledger refuses at every put: one that breaks the
    rule of identifiers (``namespaces.label_problem``), or the rule of labels
    (``ledger.screening.label_refusal``: no secret, and no personal data in a label the
    ledger keeps in clear, as it keeps ``provenance.agent``), screened by the ledger's own
    detectors under its default screening policy (``ledger/screening.toml``). A server
    run with a policy of its own (``MEMLEDGER_SCREENING_POLICY_FILE``) may refuse more,
    at the first put. The detectors are loaded at the first store built (a quarter of a
    second); they need none of the server's dependencies.

    Raises:
        InvalidValueError: field ``agent``, the rule broken (never the value found).
    """
    problem = namespaces.label_problem(agent)
    if problem is not None:
        raise InvalidValueError("agent", f"{problem} (or give None)")
    from ledger.screening import Label, LabelRefusedError

    try:
        _screener().screen_labels([Label("provenance.agent", agent, "clear")])
    except LabelRefusedError as exc:
        raise InvalidValueError("agent", f"{exc.rule} (or give None)") from None


@functools.cache
def _screener() -> Screener:
    """The ledger's detectors under its default screening policy, built once."""
    from ledger.detectors import Screener
    from ledger.screening import load_screening_policy

    return Screener(load_screening_policy())
