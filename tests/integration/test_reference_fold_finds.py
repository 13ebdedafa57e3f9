"""The property of ``test_reference_fold.py`` finds what it is for (issue 11, "Done when":
it found, before the fix, the stale vector point of case 2).

Each test runs the same property (``fold_property.check_history``: histories from the
real ledger, the real store, the same deliveries) on the code with one revision guard
taken out, and asserts that hypothesis reports a counterexample whose differences are
the ones that guard prevents. The examples are derandomised (the same ones each run) and
the search stops at the first failing one without shrinking it (shrinking against the
real stores takes minutes: ``MEMLEDGER_TEST_FOLD_SHRINK=1`` shrinks, and the shrunk
histories are kept as ``test_revision_guards.py``); a failure of these tests says how
many examples the search took.

A guard is taken out by patching ``projections.marks.MarkBook`` (the marks every store
but the cache consults; the facts store reads its own from its history): a memory whose
mark was last advanced by one of the ``forgotten`` event types is treated as if it had
no mark (as if the mark had not outlived what that event did to the row or point), and
``ALL`` ignores every mark, which is what the vectors projection did before commit
afed0ac (its guard compared an event with the memory's current point only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from contracts import Event, MemoryRef, touched_memories
from ledger.crypto import Keyring
from projections import marks
from projections.base import ContentAccess
from tests.integration.fold_history import LedgerStage
from tests.integration.fold_property import VectorStore, check_history, open_store, steady_pool

pytestmark = pytest.mark.integration

ALL = frozenset({"*"})
"""Forget every mark: the vectors projection's guard before commit afed0ac."""

BUDGET = int(os.environ.get("MEMLEDGER_TEST_FOLD_FIND_EXAMPLES", "200"))
"""Examples a search may take to find its difference (it stops at the first)."""

SHRINK = os.environ.get("MEMLEDGER_TEST_FOLD_SHRINK") == "1"
"""Whether the search shrinks what it found (minutes on the real stores)."""

SEED = int(os.environ["MEMLEDGER_TEST_FOLD_SEED"]) if os.environ.get("MEMLEDGER_TEST_FOLD_SEED") else None
"""A seed to draw the examples from instead of derandomising them (how reliably a search
finds its difference: run it with a few)."""


@dataclass
class Found:
    """What a search reported: the example (1-based) that failed first with the wanted
    difference, the first that failed at all, and the counterexample's differences and
    notes (its commands and deliveries)."""

    first: int | None
    first_any: int | None
    runs: int
    differences: list[str]
    notes: list[str]

    def __str__(self) -> str:
        head = (
            f"first example with the wanted difference: {self.first}; first failing: {self.first_any};"
            f" examples run: {self.runs}"
        )
        return "\n".join([head, "differences:", *self.differences, "notes:", *self.notes])


def forget_marks(monkeypatch: pytest.MonkeyPatch, forgotten: Collection[str]) -> None:
    """Take a revision guard out: ``MarkBook.fresh`` treats a memory as unmarked when its
    mark was last advanced (in this process) by an event whose type is in ``forgotten``
    (``ALL``: every memory)."""
    last: dict[str, str] = {}
    advance = marks.MarkBook.advance

    def fresh(self: marks.MarkBook, event: Event) -> tuple[MemoryRef, ...]:
        out = []
        for ref in touched_memories(event):
            mark = self.get(ref.memory_id)
            gone = forgotten is ALL or last.get(ref.memory_id) in forgotten
            if mark is None or gone or ref.revision > mark.revision:
                out.append(ref)
        return tuple(out)

    def advanced(self: marks.MarkBook, event: Event, refs: tuple[MemoryRef, ...]) -> None:
        advance(self, event, refs)
        last.update({r.memory_id: event.type for r in refs})

    monkeypatch.setattr(marks.MarkBook, "fresh", fresh)
    monkeypatch.setattr(marks.MarkBook, "advance", advanced)


@pytest.fixture
def pool(fresh_dsn: str) -> Iterator[ConnectionPool]:
    """This module's pool: every connection open before the first draw (``steady_pool``)."""
    with steady_pool(fresh_dsn) as p:
        yield p


@pytest.fixture
def running(pool: ConnectionPool, keyring: Keyring, tmp_path: Path) -> Search:
    return Search(pool, keyring, tmp_path)


class Search:
    """Runs the property on one store, derandomised, and returns what it found."""

    def __init__(self, pool: ConnectionPool, keyring: Keyring, directory: Path) -> None:
        self.stage = LedgerStage(pool, keyring)
        self.content = ContentAccess(pool, keyring)
        self.directory = directory

    def run(self, name: str, wanted: re.Pattern[str], compare_marks: bool = True) -> Found:
        """Search up to ``BUDGET`` examples on store ``name`` for one whose differences
        include a line matching ``wanted`` (examples failing with other differences count
        as passing, so that the search goes on, and shrinking keeps to that difference);
        ``compare_marks=False`` leaves the vector store's marks out of the comparison (the
        property as it was before the vectors projection kept marks). ``SEED``, when set,
        draws the examples from that seed instead of derandomising them.

        An example the code under test raised in (not a difference) is passed over and
        named in the failure if the search finds nothing.

        Raises:
            AssertionError: the search found no such example.
        """
        offsets: dict[int, int] = {}
        seen = {"examples": 0, "first": 0, "first_any": 0}
        errors: list[str] = []
        with open_store(name, self.stage.pool, self.content, self.directory, _no_redis) as store:
            if isinstance(store, VectorStore):
                store.with_marks = compare_marks

            @settings(
                max_examples=BUDGET,
                derandomize=SEED is None,
                database=None,
                deadline=None,
                report_multiple_bugs=False,
                phases=(Phase.generate, Phase.shrink) if SHRINK else (Phase.generate,),
                suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
            )
            @given(data=st.data())
            def search(data: st.DataObject) -> None:
                seen["examples"] += 1
                try:
                    check_history(data, store, self.stage, self.content, offsets)
                except AssertionError as exc:
                    seen["first_any"] = seen["first_any"] or seen["examples"]
                    if any(wanted.match(line) for line in str(exc).splitlines()):
                        seen["first"] = seen["first"] or seen["examples"]
                        raise
                except Exception as exc:  # not what this search is for: test_reference_fold.py reports it
                    errors.append(f"example {seen['examples']}: {type(exc).__name__}: {exc}")

            if SEED is not None:
                search = seed(SEED)(search)
            try:
                search()
            except AssertionError as exc:
                caught = exc
            else:
                raise AssertionError(
                    f"{seen['examples']} examples on {name} (first failing: {seen['first_any'] or None}):"
                    f" none failed with {wanted.pattern}; errors: {errors}"
                )
        notes = list(getattr(caught, "__notes__", []))
        return Found(
            seen["first"] or None, seen["first_any"] or None, seen["examples"], str(caught).splitlines(), notes
        )


def _no_redis() -> object:
    raise AssertionError("the cache's guards are its own (Redis): not taken out here")


STALE_ACTIVE_POINT = re.compile(r"^memories_v1 \S+ \(row\): store present \(active, revision 1\) \| reference None$")
"""A point the reference says is gone, back as ``active`` at its first revision."""


def test_without_the_vectors_guard_a_write_delivered_again_after_a_supersession_brings_its_point_back(
    running: Search, monkeypatch: pytest.MonkeyPatch
) -> None:
    forget_marks(monkeypatch, ALL)
    found = running.run("vectors-client", STALE_ACTIVE_POINT, compare_marks=False)
    print(found)
    assert found.first is not None and any(STALE_ACTIVE_POINT.match(d) for d in found.differences), found
    stale = {STALE_ACTIVE_POINT.match(d) and d.split()[1] for d in found.differences} - {None}
    superseded = [n for n in found.notes if "MemorySuperseded(" in n]
    assert any(m[-6:] + "@2" in n for m in stale for n in superseded), found  # it was superseded, then written again
