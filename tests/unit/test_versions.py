"""Projection versions without I/O: names of versioned storage and stable views, version
records, progress arithmetic, CLI argument parsing, and recall's model guard."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
import typer

from projections import versions
from projections.embedding import HashingEmbedder
from projections.errors import VersionError
from projections.facts import STABLE, FactsTables
from projections.recall import Recall, ServingStores
from projections.vector_index import VectorFilter, VectorHit
from projections.versions import EmbedderSpec, VersionInfo
from workers.bootstrap import vector_query_url
from workers.cli.versions import _eta, _name
from workers.settings import Settings
from workers.versioning import _progress_of

T = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_versioned_tables_and_stable_views() -> None:
    assert (FactsTables(2).facts, FactsTables(2).history, FactsTables(2).conflicts) == (
        "facts_v2",
        "facts_history_v2",
        "facts_conflicts_v2",
    )
    assert (STABLE.facts, STABLE.history, STABLE.conflicts) == ("facts", "facts_history", "facts_conflicts")
    views = {view: pattern.format(v=3) for pairs in versions.STABLE_VIEWS.values() for view, pattern in pairs}
    assert views == {
        "facts": "facts_v3",
        "facts_history": "facts_history_v3",
        "facts_conflicts": "facts_conflicts_v3",
        "summaries": "summaries_v3",
    }
    assert versions.collection_name(2) == "memories_v2"


def test_check_name_refuses_unknown_projections() -> None:
    assert versions.check_name("vectors") == "vectors"
    with pytest.raises(VersionError, match="projection: must be one of facts, vectors, cache, summaries"):
        versions.check_name("facts_v1")


def test_version_info_id_and_dict() -> None:
    info = VersionInfo("vectors", 2, "building", EmbedderSpec("minilm", 384, "all-MiniLM-L6-v2/int8"), T, None, None)
    assert info.id == "vectors_v2"
    assert info.to_dict() == {
        "name": "vectors",
        "version": 2,
        "id": "vectors_v2",
        "state": "building",
        "embedder": {"name": "minilm", "dim": 384, "model": "all-MiniLM-L6-v2/int8"},
        "created_at": "2026-11-29T12:00:00Z",
        "swapped_at": None,
        "retired_at": None,
    }


def test_cli_projection_names_and_time_left() -> None:
    assert _name("facts") == "facts" and _name("summaries_v12") == "summaries"
    with pytest.raises(typer.BadParameter, match="projection"):
        _name("memories")
    assert (_eta(None), _eta(0.4), _eta(3725.0)) == ("-:--:--", "0:00:00", "1:02:05")


def test_each_vectors_version_answers_queries_on_its_own_port() -> None:
    settings = Settings(vector_query_url="http://127.0.0.1:16334")
    assert vector_query_url(settings, 1) == "http://127.0.0.1:16334"
    assert vector_query_url(settings, 3) == "http://127.0.0.1:16336"


def test_progress_position_lag_rate_and_time_left() -> None:
    svc = SimpleNamespace(log=SimpleNamespace(end_offsets=lambda: {0: 100, 1: 50}))
    p = _progress_of("facts_v2", {0: 59, 1: 49}, cast(Any, svc), applied=110, started=0.0)
    assert (p.projection, p.position, p.end, p.lag) == ("facts_v2", 110, 150, 40)
    assert p.rate > 0 and p.eta_s is not None and p.eta_s == pytest.approx(p.lag / p.rate)
    fresh = _progress_of("facts_v2", {}, cast(Any, svc), applied=0, started=0.0)
    assert (fresh.position, fresh.lag, fresh.eta_s) == (0, 150, None)


class FakeIndex:
    collection = "memories_v2"

    def __init__(self, hits: list[VectorHit]) -> None:
        self.hits = hits
        self.queried: list[int] = []

    def search(
        self, vector: Sequence[float], flt: VectorFilter, limit: int, payload_keys: Sequence[str] | None = None
    ) -> list[VectorHit]:
        self.queried.append(len(vector))
        return self.hits


def test_recall_embeds_the_query_with_the_serving_model_and_ignores_points_of_another() -> None:
    embedder = HashingEmbedder(64)
    index = FakeIndex(
        [
            VectorHit("a", 0.9, {"model": embedder.model_name}),
            VectorHit("b", 0.8, {"model": "hashing-256/blake2b-v1"}),
            VectorHit("c", 0.7, {"model": embedder.model_name}),
        ]
    )
    routed = ServingStores(index=cast(Any, index), embedder=embedder, cache=None)
    recall = Recall(cast(Any, None), None, None, route=lambda: routed)
    params = {"subject": "alice", "purpose": "p", "statuses": ["active"], "scopes": ["subject:alice"], "at": T}
    degraded: list[str] = []
    hits, derived = recall._vector_search(routed, "tea", params, recall.ranking, False, degraded)
    assert [h.memory_id for h in hits] == ["a", "c"] and [h.memory_id for h in derived] == ["a", "c"]
    assert index.queried == [64, 64] and degraded == []  # the memories, then the derived ones (lineage)
