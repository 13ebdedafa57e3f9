"""Request bodies are strict about counts, positions and flags: JSON's ``true`` is not 1,
``"5"`` is not 5, ``1`` is not true (pydantic's lax mode would take each)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from workers import wire

BASE = {"query": "what does Sam eat", "purpose": "support"}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "200"}, "max_tokens"),
        ({"max_tokens": 200.0}, "max_tokens"),
        ({"k": True}, "k"),
        ({"k": "10"}, "k"),
        ({"include_unconfirmed": 1}, "include_unconfirmed"),
        ({"include_unconfirmed": "yes"}, "include_unconfirmed"),
        ({"wait_for": [{"partition": True, "offset": 3}]}, "wait_for.0.partition"),
        ({"wait_for": [{"partition": 0, "offset": "3"}]}, "wait_for.0.offset"),
    ],
)
def test_a_recall_refuses_a_count_position_or_flag_of_another_json_type(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        wire.Recall.model_validate({**BASE, **extra})
    assert [".".join(map(str, e["loc"])) for e in refused.value.errors()] == [field]


def test_a_recall_of_the_right_types_is_taken() -> None:
    body = {**BASE, "k": 5, "max_tokens": 200, "include_unconfirmed": True, "wait_for": [{"partition": 1, "offset": 7}]}
    recall = wire.Recall.model_validate(body)
    assert (recall.k, recall.max_tokens, recall.include_unconfirmed) == (5, 200, True)
    assert recall.wait_for == [wire.LogPosition(partition=1, offset=7)]
    assert wire.Recall.model_validate_json(wire.Recall.model_validate(body).model_dump_json()) == recall


@pytest.mark.parametrize("field", ["as_of", "now"])
@pytest.mark.parametrize(
    "moment", ["0001-01-01T00:30:00+01:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:30:00-01:00"]
)
def test_a_time_utc_cannot_hold_is_refused_naming_the_field(field: str, moment: str) -> None:
    """Year 1 ahead of UTC has no UTC time in Python's range: refused, not a server error."""
    with pytest.raises(ValidationError) as refused:
        wire.Recall.model_validate({**BASE, field: moment})
    (problem,) = refused.value.errors()
    assert problem["loc"] == (field,)
    assert "must be a time UTC can hold: between 0001-01-01 and 9999-12-31 in UTC" in problem["msg"]


def test_the_ends_of_utcs_range_are_taken() -> None:
    recall = wire.Recall.model_validate({**BASE, "as_of": "0001-01-01T00:00:00Z", "now": "9999-12-31T23:59:59Z"})
    assert recall.as_of is not None and recall.as_of.year == 1


def test_a_contract_time_utc_cannot_hold_is_refused() -> None:
    from pydantic import TypeAdapter

    from contracts.types import UtcDatetime

    with pytest.raises(ValidationError, match="must be a time UTC can hold"):
        TypeAdapter(UtcDatetime).validate_python("0001-01-01T00:30:00+01:00")
