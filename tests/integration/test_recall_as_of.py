"""Recall as of a past instant against the real PostgreSQL: an item reports the memory as
it was then, its status and its revision, not what a later supersession made of its row."""

from __future__ import annotations

import pytest

from contracts import utc_now
from tests.builders import PURPOSE, memory_write
from tests.integration.conftest import one
from workers.bootstrap import Services

pytestmark = pytest.mark.integration

QUERY = "how long should answers be"


def test_a_memory_superseded_since_answers_with_the_revision_and_status_it_had_then(svc: Services) -> None:
    p = svc.principal()
    short = svc.ledger.write(p, memory_write(content="Alice prefers short answers", key="answer_length"))
    svc.catch_up()
    then = utc_now()
    detailed = svc.ledger.supersede(
        p, short.memory_id, memory_write(content="Alice prefers detailed answers", key="answer_length")
    )
    svc.catch_up()
    row = one(svc, "SELECT status, revision FROM facts WHERE memory_id = %s", short.memory_id)
    assert tuple(row) == ("superseded", 2)  # the row as it is now

    past = svc.recall.recall(p, "alice", PURPOSE, QUERY, utc_now(), as_of=then)
    assert [(i.memory_id, i.status, i.revision, i.content) for i in past.items] == [
        (short.memory_id, "active", 1, "Alice prefers short answers")
    ]
    current = svc.recall.recall(p, "alice", PURPOSE, QUERY, utc_now())
    assert [(i.memory_id, i.status, i.revision) for i in current.items] == [(detailed.memory_id, "active", 1)]
