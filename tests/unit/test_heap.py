"""Settling a long-running process's start-up heap, and counting full collections."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence

import pytest
from prometheus_client import REGISTRY

from projections.embedding import HashingEmbedder
from workers.heap import FullCollections, settle
from workers.serve.runtime import settle_start_up


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session collects as before


def test_settle_freezes_what_exists_and_later_objects_are_collected_as_before(unfrozen: None) -> None:
    kept = [[n] for n in range(1000)]
    frozen = settle()
    # at least what this test keeps (another thread of the session may freeze or free meanwhile)
    assert frozen >= len(kept) and gc.get_freeze_count() >= len(kept)
    seen = {id(o) for o in gc.get_objects()}  # what collections walk: the frozen are not among them
    assert all(gc.is_tracked(o) and id(o) not in seen for o in kept)
    cycle: list[object] = []
    cycle.append(cycle)  # garbage only a collection frees
    del cycle
    assert gc.collect() >= 1  # objects made after settling are still collected


def test_full_collections_are_counted_with_their_pause_and_others_are_not() -> None:
    counted = FullCollections().start()
    gc.collect(0)
    gc.collect(1)
    assert counted.count == 0
    gc.collect()
    gc.collect(2)
    counted.stop()
    gc.collect()
    assert counted.count == 2 and counted.pause_ms > 0.0
    assert counted._callback not in gc.callbacks


class _CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return super().embed(texts)


def test_serve_settles_its_start_up_once_the_embedder_is_loaded_and_metrics_show_it(unfrozen: None) -> None:
    gc.unfreeze()
    assert REGISTRY.get_sample_value("memledger_heap_frozen_objects") == 0  # not settled yet
    embedder = _CountingEmbedder()
    frozen = settle_start_up(embedder)
    assert embedder.calls == 1  # the model (and what it imports) is loaded before the freeze
    assert frozen == gc.get_freeze_count() > 0
    assert REGISTRY.get_sample_value("memledger_heap_frozen_objects") == frozen
