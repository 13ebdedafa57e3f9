"""Property tests: every real store against the reference fold (issue 11, point 4).

Histories come from the real ``Ledger`` (``fold_history``): hypothesis draws the
commands, the ledger decides the events. The events reach the store under test as
``fold_delivery`` schedules them: each first delivered in log order per partition, the
partitions interleaved, commands and deliveries interleaved (so some events are applied
live, while their keys still open, and some only after a later command destroyed them),
then delivered again at later offsets, older events after newer ones, in batches of one
to four. At the end the store must hold exactly what the reference fold of the first
deliveries expects, with today's keys and tombstones: a replay's result, which live
processing must equal (invariant 8) and which no duplicate may change (invariant 2).
The property itself is ``fold_property.check_history``.

Stores: facts (``facts_v1``, its history and conflicts), summaries, vectors on both local
Qdrant engines through the ``VectorIndex`` port, and the Redis cache (its marks, and no
cached result holding a memory older than the cache has applied).

The example budget is fixed (``EXAMPLES`` per store); under ``CI=true`` the ``ci``
profile (tests/conftest.py) derandomises the examples, so CI runs the same ones each time.
That the property finds what it is for is ``test_reference_fold_finds.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from ledger.crypto import Keyring
from projections.base import ContentAccess
from tests.integration.fold_history import LedgerStage
from tests.integration.fold_property import STORES, StoreUnderTest, check_history, open_store, steady_pool

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("MEMLEDGER_TEST_FOLD_EXAMPLES", "30"))
"""Examples per store (each: up to 8 commands through the ledger and their deliveries);
``MEMLEDGER_TEST_FOLD_EXAMPLES`` raises it for a deeper search outside CI."""

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large),
)
"""The stores and the ledger are shared by the examples of a test (each example has
subjects of its own), hence the function-scoped fixtures."""


@pytest.fixture
def pool(fresh_dsn: str) -> Iterator[ConnectionPool]:
    """This module's pool: every connection open before the first draw (``steady_pool``)."""
    with steady_pool(fresh_dsn) as p:
        yield p


@pytest.fixture
def stage(pool: ConnectionPool, keyring: Keyring) -> LedgerStage:
    return LedgerStage(pool, keyring)


@pytest.fixture
def offsets() -> dict[int, int]:
    return {}


@pytest.fixture
def content(pool: ConnectionPool, keyring: Keyring, stage: LedgerStage) -> ContentAccess:
    return ContentAccess(pool, keyring)


@pytest.fixture(params=STORES)
def store(
    request: pytest.FixtureRequest, pool: ConnectionPool, content: ContentAccess, tmp_path: Path
) -> Iterator[StoreUnderTest]:
    with open_store(request.param, pool, content, tmp_path, lambda: request.getfixturevalue("redis_client")) as s:
        yield s


@PROPERTY
@given(data=st.data())
def test_every_store_holds_what_the_reference_folds(
    data: st.DataObject,
    store: StoreUnderTest,
    stage: LedgerStage,
    content: ContentAccess,
    offsets: dict[int, int],
) -> None:
    check_history(data, store, stage, content, offsets)
