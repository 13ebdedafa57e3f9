"""``memledger eval recall`` and the voices it measures, against real stores (the test
PostgreSQL and Redis, a local vector index, the hashing embedder), on a small
conversation in LoCoMo's shape written here: a turn that shares no word with its
question is found through the observation derived from it (lineage), the answer given in
the next turn through the turn that matches (neighbours), and the report has every row."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from contracts import utc_now
from workers.bootstrap import Services
from workers.locomo import ingest
from workers.locomo.mapping import PURPOSE
from workers.recall_eval import evaluate, load_eval_set, stores_of, variants

pytestmark = [pytest.mark.integration]


def _conversation() -> dict[str, Any]:
    turns_1 = [
        ("D1:1", "Ann", "Good morning Bob, how was the weekend?"),
        ("D1:2", "Bob", "Which instrument did your sister pick up?"),
        ("D1:3", "Ann", "The cello, she practises every evening."),
        ("D1:4", "Bob", "I finally finished the canvas I started in spring."),
        ("D1:5", "Ann", "Lovely, send me a photo of it."),
    ]
    turns_2 = [
        ("D2:1", "Ann", "We drove to the coast and slept in a tent."),
        ("D2:2", "Bob", "My grandmother turns ninety on Saturday."),
        ("D2:3", "Ann", "Give her my best wishes for the party."),
    ]

    def session(turns: list[tuple[str, str, str]]) -> list[dict[str, str]]:
        return [{"speaker": s, "dia_id": d, "text": t} for d, s, t in turns]

    return {
        "sample_id": "conv-eval",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": session(turns_1),
            "session_2_date_time": "9:05 am on 3 June, 2023",
            "session_2": session(turns_2),
        },
        "session_summary": {
            "session_1_summary": "Ann's sister learns the cello; Bob paints and finished a canvas.",
            "session_2_summary": "Ann went camping by the sea; Bob's grandmother has a birthday party.",
        },
        "observation": {
            "session_1_observation": {"Bob": [["Bob is a painter who works on oil paintings.", "D1:4"]]},
            "session_2_observation": {"Ann": [["Ann went camping at the beach.", "D2:1"]]},
        },
        "event_summary": {},
        "qa": [
            {
                "question": "What kind of artwork does Bob make as a painter?",
                "answer": "oil",
                "evidence": ["D1:4"],
                "category": 4,
            },
            {
                "question": "Which instrument did Ann's sister pick up?",
                "answer": "cello",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {"question": "Where did Ann go camping?", "answer": "the coast", "evidence": ["D2:1"], "category": 1},
            {
                "question": "How old is Bob's grandmother turning?",
                "answer": "ninety",
                "evidence": ["D2:2"],
                "category": 2,
            },
        ],
    }


@pytest.fixture
def services(svc: Services) -> Services:
    return svc


@pytest.fixture
def data(tmp_path: Path, services: Services) -> Path:
    path = tmp_path / "small-locomo.json"
    path.write_text(json.dumps([_conversation()]))
    ingest(services, path)
    return path


def _turns(services: Services, question: str, **kw: Any) -> list[tuple[str, list[str]]]:
    result = services.recall.recall(
        services.principal(),
        "conv-eval",
        PURPOSE,
        question,
        utc_now(),
        k=5,
        include_summaries=False,
        use_cache=False,
        **kw,
    )
    return [(str(i.provenance.get("turn_id")), i.matched_by) for i in result.items]


def test_lineage_finds_a_turn_through_the_observation_derived_from_it(services: Services, data: Path) -> None:
    question = "What kind of artwork does Bob make as a painter?"
    fts_only = [t for t, _ in _turns(services, question, ranking=services.recall.ranking.only("fts"))]
    assert "D1:4" not in fts_only[:1]  # the turn shares no word with the question but "Bob"
    found = dict(_turns(services, question))
    assert "lineage" in found["D1:4"] and next(iter(found)) == "D1:4"


def test_the_answer_in_the_next_turn_is_lifted_by_its_neighbour(services: Services, data: Path) -> None:
    found = dict(_turns(services, "Which instrument did Ann's sister pick up?"))
    assert "D1:3" in found and "neighbours" in found["D1:3"]  # D1:2 matches, D1:3 answers


def test_the_evaluation_reports_baselines_each_ranker_fused_and_ablations(services: Services, data: Path) -> None:
    evalset = load_eval_set(data)
    config = services.recall.ranking
    report = evaluate(stores_of(services, evalset), evalset, config, utc_now(), ablations=True)
    names = [r.name for r in report.rows]
    expected = [v.name for v in variants(config, ablations=True)]
    assert names[3:] == expected and len(names) == 3 + len(expected)
    assert [r.group for r in report.rows[:3]] == ["baseline"] * 3
    assert {"fusion without lineage", "fusion without recency", "fts alone, ts_rank"} <= set(names)
    for row in report.rows:
        m = row.measures
        assert 0.0 <= m["R@1"] <= m["R@5"] <= m["R@10"] <= m["R@25"] <= 1.0 and 0.0 <= m["MRR"] <= 1.0
        assert set(row.per_category) == {1, 2, 4}
    fusion = report.row("fusion")
    assert fusion.measures["R@5"] == 1.0 and fusion.tokens_per_query > 0
    assert not math.isnan(fusion.latency_ms_p50) and math.isnan(report.row("fts alone").latency_ms_p50)
    assert report.row("fusion").measures["MRR"] >= report.row("fusion without lineage").measures["MRR"]
    data_out = report.to_dict()
    assert data_out["rows"][3]["name"] == "fusion" and "attribution" in data_out
