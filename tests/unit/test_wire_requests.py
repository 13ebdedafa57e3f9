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


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (wire.Erase, {"whole_subject": "yes"}, "whole_subject"),  # an irreversible erasure from a string
        (wire.Erase, {"whole_subject": 1}, "whole_subject"),
        (wire.Erase, {"memory_ids": ["01a23ea1-f91d-7000-8000-000000000000"], "with_history": "true"}, "with_history"),
        (wire.WriteMemory, {"content": "x", "purpose": "p", "confirmed": "yes"}, "confirmed"),
        (wire.WriteMemory, {"content": "x", "purpose": "p", "key": "k", "supersede_key": 1}, "supersede_key"),
        (wire.Supersede, {"content": "x", "confirmed": "no"}, "confirmed"),
        (wire.RevokeConsent, {"purpose": "p", "allow_unmatched": "on"}, "allow_unmatched"),
        (wire.Recall, {**BASE, "wait_timeout_s": True}, "wait_timeout_s"),
        (wire.Wait, {"positions": [{"partition": 0, "offset": 1}], "timeout_s": "5"}, "timeout_s"),
    ],
)
def test_a_flag_or_duration_of_another_json_type_is_refused(model: Any, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(body)
    assert field in [".".join(map(str, e["loc"])) for e in refused.value.errors()]


def test_a_memory_tool_line_number_is_a_json_integer() -> None:
    from workers.wire.memory_tool import MemoryInsert, MemoryView

    view = {"command": "view", "path": "/memories/a.md", "purpose": "p"}
    with pytest.raises(ValidationError):
        MemoryView.model_validate({**view, "view_range": [True, "3"]})
    assert MemoryView.model_validate({**view, "view_range": [1, -1]}).view_range == [1, -1]
    insert = {"command": "insert", "path": "/memories/a.md", "insert_text": "x", "content_sha256": "0" * 64}
    with pytest.raises(ValidationError):
        MemoryInsert.model_validate({**insert, "purpose": "p", "insert_line": True})
