"""Figures of the benchmarks: verdicts against their targets and the printed table."""

from __future__ import annotations

import pytest

from workers.bench.figures import Figure, Target, render_figures, summary
from workers.bench.targets import TARGETS


@pytest.mark.parametrize(
    ("target", "value", "baseline", "verdict"),
    [
        (Target("at_most", 250.0), 250.0, None, "met"),
        (Target("at_most", 250.0), 250.1, None, "missed"),
        (Target("at_least", 0.7), 0.69, None, "missed"),
        (Target("ratio_at_least", 0.8), 800.0, 1000.0, "met"),
        (Target("ratio_at_least", 0.8), 799.0, 1000.0, "missed"),
        (Target("ratio_at_least", 0.8), 799.0, None, "not measured"),
        (Target("ratio_at_most", 1.5), 15.0, 10.0, "met"),
        (Target("ratio_at_most", 1.5), 15.1, 10.0, "missed"),
        (None, 5.0, None, "no target"),
    ],
)
def test_a_figure_is_judged_against_its_target(
    target: Target | None, value: float, baseline: float | None, verdict: str
) -> None:
    figure = Figure("k", "a figure", value, "ms", baseline=baseline, baseline_label="raw", target=target)
    assert figure.verdict == verdict
    assert figure.to_dict()["verdict"] == verdict


def test_a_figure_without_a_value_is_not_measured_and_says_why() -> None:
    figure = Figure("k", "a figure", None, "ms", target=Target("at_most", 1.0), note="worker crashed")
    assert figure.verdict == "not measured"
    assert "not measured (worker crashed)" in render_figures([figure])


def test_the_table_shows_value_baseline_ratio_target_and_verdict() -> None:
    figures = [
        Figure("append.ledger", "append", 2400.0, "events/s", 3000.0, "raw producer", Target("ratio_at_least", 0.8)),
        Figure("recall.p99", "recall p99", 31.0, "ms", target=Target("at_most", 30.0)),
    ]
    text = render_figures(figures)
    assert "2,400 events/s" in text and "3,000 events/s (raw producer)" in text and "0.80x" in text
    assert ">= 0.80x baseline" in text and "<= 30.0 ms" in text
    assert [line.split()[-1] for line in text.splitlines() if line.strip().startswith(("append", "recall"))] == [
        "met",
        "missed",
    ]
    assert summary(figures) == "targets: 1 met, 1 missed"


def test_every_target_key_names_a_figure_family_of_the_benchmarks() -> None:
    families = {"append", "replay", "lag", "erasure", "locomo", "recall", "rejoin", "serve"}
    assert {key.split(".")[0] for key in TARGETS} <= families
