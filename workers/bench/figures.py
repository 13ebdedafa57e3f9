"""A benchmark's figures: what was measured, the baseline it is compared with (measured
in the same run: the machine is shared and noisy, so a ratio says more than a number),
the target, and the verdict.

A ``Target`` bounds either the value itself (``at_most``, ``at_least``: latencies in
milliseconds, for example) or its ratio to the baseline (``ratio_at_least``: throughput
next to the raw client's; ``ratio_at_most``: a latency next to the same operation
without the layer measured). ``render_figures`` prints one line per figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

Rule = Literal["at_most", "at_least", "ratio_at_least", "ratio_at_most"]
Verdict = Literal["met", "missed", "no target", "not measured"]


@dataclass(frozen=True)
class Target:
    """``rule`` applied to ``bound``: the value is at most / at least ``bound`` (in the
    figure's unit), or its ratio to the baseline is at least / at most ``bound``."""

    rule: Rule
    bound: float

    def met(self, value: float, baseline: float | None) -> bool | None:
        """Whether ``value`` (and ``baseline``, for a ratio) meets the target; ``None``
        when a ratio target has no baseline to divide by."""
        if self.rule == "at_most":
            return value <= self.bound
        if self.rule == "at_least":
            return value >= self.bound
        if not baseline:
            return None
        if self.rule == "ratio_at_most":
            return value / baseline <= self.bound
        return value / baseline >= self.bound

    def describe(self, unit: str) -> str:
        """E.g. ``<= 250 ms``, ``>= 0.80x baseline`` or ``<= 1.50x baseline``."""
        if self.rule == "ratio_at_least":
            return f">= {self.bound:.2f}x baseline"
        if self.rule == "ratio_at_most":
            return f"<= {self.bound:.2f}x baseline"
        sign = "<=" if self.rule == "at_most" else ">="
        return f"{sign} {_number(self.bound)} {unit}"


@dataclass(frozen=True)
class Figure:
    """One measured figure. ``key`` is stable (``append.ledger``, ``lag.vectors.p99``) for
    scripts; ``label`` says what was measured; ``value`` is ``None`` when the run could not
    measure it (then ``note`` says why). ``baseline`` is measured in the same run and named
    by ``baseline_label``."""

    key: str
    label: str
    value: float | None
    unit: str
    baseline: float | None = None
    baseline_label: str | None = None
    target: Target | None = None
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        """``value / baseline``, when both exist."""
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def verdict(self) -> Verdict:
        if self.value is None:
            return "not measured"
        if self.target is None:
            return "no target"
        met = self.target.met(self.value, self.baseline)
        if met is None:
            return "not measured"
        return "met" if met else "missed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "target": None if self.target is None else self.target.describe(self.unit),
            "verdict": self.verdict,
            "note": self.note,
        }


def _number(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:,.1f}"
    return f"{x:,.2f}"


def render_figures(figures: Sequence[Figure], width: int = 160) -> str:
    """The figures as a plain-text table: figure, value, baseline, ratio, target, verdict."""
    table = Table(title="figures (baselines measured in the same run)", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("figure", "value", "baseline", "ratio", "target", "verdict"):
        table.add_column(column, overflow="fold", ratio=3 if column == "figure" else None)
    for f in figures:
        value = "-" if f.value is None else f"{_number(f.value)} {f.unit}"
        baseline = "-" if f.baseline is None else f"{_number(f.baseline)} {f.unit} ({f.baseline_label})"
        ratio = "-" if f.ratio is None else f"{f.ratio:.2f}x"
        target = "-" if f.target is None else f.target.describe(f.unit)
        verdict = f.verdict if f.note is None else f"{f.verdict} ({f.note})"
        table.add_row(*(Text(cell) for cell in (f.label, value, baseline, ratio, target, verdict)))
    console = Console(width=width, highlight=False)
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().rstrip().splitlines())


def summary(figures: Sequence[Figure]) -> str:
    """One line: how many figures met, missed, have no target or were not measured."""
    counts: dict[str, int] = {}
    for f in figures:
        counts[f.verdict] = counts.get(f.verdict, 0) + 1
    order: tuple[Verdict, ...] = ("met", "missed", "no target", "not measured")
    return "targets: " + ", ".join(f"{counts[v]} {v}" for v in order if v in counts)
