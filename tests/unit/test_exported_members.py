"""The public surface of ``contracts``: ``__all__`` is importable, sorted and without duplicates."""

from __future__ import annotations

import importlib
import re

import contracts


def _isort_style_key(name: str) -> tuple[int, list[tuple[int, object]]]:
    """The order of ruff's RUF022 "isort-style" sort, which the project uses for ``__all__``:
    SCREAMING_SNAKE_CASE constants first, then CamelCase classes, then everything else;
    a natural sort (digit runs compared as numbers) within each group."""
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and len(name) > 1:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    natural = [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part]
    return group, natural


def test_every_exported_name_is_importable_from_contracts() -> None:
    module = importlib.import_module("contracts")
    missing = [name for name in contracts.__all__ if not hasattr(module, name)]
    assert missing == [], f"contracts.__all__ names members that contracts does not define: {missing}"
    for name in contracts.__all__:
        namespace: dict[str, object] = {}
        exec(f"from contracts import {name}", namespace)
        assert namespace[name] is getattr(contracts, name)


def test_all_is_a_non_empty_list_of_strings() -> None:
    assert isinstance(contracts.__all__, list)
    assert contracts.__all__, "contracts.__all__ is empty"
    assert all(isinstance(name, str) and name.isidentifier() for name in contracts.__all__)


def test_all_is_sorted() -> None:
    expected = sorted(contracts.__all__, key=_isort_style_key)
    assert contracts.__all__ == expected, (
        "contracts.__all__ must be sorted isort-style (constants, classes, then functions; "
        "`ruff check --select RUF022 --fix contracts/__init__.py` sorts it)"
    )


def test_sort_key_orders_constants_then_classes_then_functions() -> None:
    names = ["utc_now", "Scope", "SCHEMA_VERSION", "decode_event", "EVENT_TYPES", "Envelope", "Item10", "Item9"]
    assert sorted(names, key=_isort_style_key) == [
        "EVENT_TYPES",
        "SCHEMA_VERSION",
        "Envelope",
        "Item9",
        "Item10",
        "Scope",
        "decode_event",
        "utc_now",
    ]


def test_all_has_no_duplicates() -> None:
    duplicates = sorted({name for name in contracts.__all__ if contracts.__all__.count(name) > 1})
    assert duplicates == [], f"contracts.__all__ lists these names more than once: {duplicates}"


def test_public_event_and_command_classes_are_exported() -> None:
    """Every event type of the union and the MemoryWrite command are part of the surface."""
    exported = set(contracts.__all__)
    for event_type in contracts.EVENT_TYPES:
        assert event_type.__name__ in exported, f"{event_type.__name__} is an event type but not in __all__"
    assert "MemoryWrite" in exported
