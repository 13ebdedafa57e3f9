"""The scenario suite of the memory lifecycle: ``memledger eval scenarios [--json]``.

Scenarios are data (:mod:`workers.scenarios.catalogue`, in the vocabulary of
:mod:`workers.scenarios.model`); :class:`ScenarioRunner` plays them against a built
system (embedded or Kafka), catching the projections up before each check, and measures
the recall output (:mod:`workers.scenarios.runner`). Context cost is counted with the
all-MiniLM-L6-v2 WordPiece tokenizer that the default embedder uses
(:func:`projections.minilm.load_tokenizer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from workers.bootstrap import Services
from workers.scenarios.catalogue import SCENARIOS
from workers.scenarios.model import Scenario
from workers.scenarios.runner import (
    CheckReport,
    ScenarioReport,
    ScenarioRunner,
    TokenCounter,
    Totals,
    report_dict,
    totals,
)

__all__ = [
    "SCENARIOS",
    "CheckReport",
    "ScenarioReport",
    "ScenarioRunner",
    "SuiteReport",
    "Totals",
    "minilm_token_counter",
    "run_suite",
    "select",
]


def minilm_token_counter() -> tuple[TokenCounter, str]:
    """A token counter with the all-MiniLM-L6-v2 WordPiece tokenizer (special tokens not
    counted, no truncation), and a one-line description of it for the report.

    Raises:
        ModelPackageMissingError, ModelFileMismatchError: as ``load_tokenizer``.
    """
    from projections.minilm import load_tokenizer

    tokenizer = load_tokenizer()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    name = (
        f"all-MiniLM-L6-v2 WordPiece (HF tokenizers, {tokenizer.get_vocab_size()} tokens, lowercase;"
        " [CLS]/[SEP] not counted)"
    )
    return count, name


def select(names: Sequence[str] | None) -> tuple[Scenario, ...]:
    """The scenarios named (all when ``names`` is empty or None), in catalogue order.

    Raises:
        ValueError: a name that is not in the catalogue.
    """
    if not names:
        return SCENARIOS
    known = {s.name for s in SCENARIOS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"scenario: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return tuple(s for s in SCENARIOS if s.name in names)


@dataclass
class SuiteReport:
    """Every scenario's report, the totals, and how they were measured."""

    mode: str
    tokenizer: str
    run_id: str
    scenarios: list[ScenarioReport]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.scenarios)

    @property
    def total(self) -> Totals:
        return totals(self.scenarios)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tokenizer": self.tokenizer,
            "run_id": self.run_id,
            "passed": self.passed,
            "scenarios_passed": sum(1 for r in self.scenarios if r.passed),
            "scenarios_total": len(self.scenarios),
            "total": asdict(self.total),
            "scenarios": [report_dict(r) for r in self.scenarios],
        }

    def render(self, console: Console, details: bool = True) -> None:
        """Per scenario a table of its recall checks (when ``details``), then one table with
        a row per scenario and the total."""
        if details:
            for report in self.scenarios:
                console.print(_check_table(report))
                for failure in report.all_failures():
                    console.print(f"  [red]FAIL[/] {failure}")
        console.print(_summary_table(self))
        console.print(f"context cost: tokens of recalled text per query; tokenizer: {self.tokenizer}")
        console.print(
            "relevance: prec = relevant returned / returned; recall = expected-relevant recalled / expected-relevant"
        )
        ok = sum(1 for r in self.scenarios if r.passed)
        verdict = "[green]PASS[/]" if self.passed else "[red]FAIL[/]"
        console.print(f"{verdict}: {ok}/{len(self.scenarios)} scenarios passed ({self.mode} mode, run {self.run_id})")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _check_table(report: ScenarioReport) -> Table:
    verdict = "[green]PASS[/]" if report.passed else "[red]FAIL[/]"
    table = Table(title=f"{verdict} {report.name}: {report.description}", title_justify="left")
    table.add_column("check", ratio=3)
    table.add_column("returned (by label)", ratio=2)
    for column in ("prec", "recall", "stale", "scope", "confl", "tokens", "ok"):
        table.add_column(column, justify="right", no_wrap=True)
    for c in report.checks:
        returned = ", ".join(c.returned) or "(nothing)"
        if c.grouped:
            returned += f" [dim](+ grouped {', '.join(c.grouped)})[/]"
        table.add_row(
            c.what,
            returned,
            _ratio(c.relevant_returned / len(c.returned) if c.returned else None),
            _ratio(c.relevant_seen / c.relevant_expected if c.relevant_expected else None),
            str(len(c.stale)),
            str(len(c.out_of_scope)),
            str(len(c.undetected_conflicts)),
            str(c.tokens),
            "[green]ok[/]" if c.passed else "[red]FAIL[/]",
        )
    return table


def _summary_table(suite: SuiteReport) -> Table:
    table = Table(
        title="scenario suite (stale and undetected conflicts must be 0)",
        title_justify="left",
        caption="prec, recall: relevance; scope: out-of-scope items returned; tokens/q: context cost",
        caption_justify="left",
    )
    table.add_column("scenario", no_wrap=True)
    for column in ("queries", "prec", "recall", "stale", "scope", "undetected conflicts", "duplicates", "tokens/q"):
        table.add_column(column, justify="right")
    table.add_column("result", justify="center", no_wrap=True)

    def row(name: str, t: Totals, passed: bool, end_section: bool = False) -> None:
        table.add_row(
            name,
            str(t.queries),
            _ratio(t.precision),
            _ratio(t.recall),
            str(t.stale),
            str(t.out_of_scope),
            str(t.undetected_conflicts),
            str(t.duplicates),
            "-" if t.tokens_per_query is None else f"{t.tokens_per_query:.1f}",
            "[green]PASS[/]" if passed else "[red]FAIL[/]",
            end_section=end_section,
        )

    for i, report in enumerate(suite.scenarios):
        row(report.name, totals([report]), report.passed, end_section=i == len(suite.scenarios) - 1)
    row("total", suite.total, suite.passed)
    return table


def run_suite(
    svc: Services,
    scenarios: Sequence[Scenario] = SCENARIOS,
    sync: Callable[[], object] | None = None,
    count_tokens: tuple[TokenCounter, str] | None = None,
    progress: Callable[[ScenarioReport], None] | None = None,
) -> SuiteReport:
    """Run ``scenarios`` on ``svc`` (fresh subjects each) and measure them.

    ``sync`` brings the read side up to date before each check (default
    ``svc.catch_up()``); ``count_tokens`` is (counter, description), default the MiniLM
    tokenizer; ``progress`` is called after each scenario.
    """
    counter, tokenizer_name = count_tokens or minilm_token_counter()
    runner = ScenarioRunner(svc, counter, sync=sync)
    reports = runner.run_all(scenarios, progress)
    return SuiteReport(svc.settings.mode, tokenizer_name, runner.run_id, reports)
