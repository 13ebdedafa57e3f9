"""Edges of the gateway (the application layer of ``memledger serve``) on the test
services, as an HTTP or MCP caller meets them: a supersession sent twice, what a listing
shows a principal that may erase but not read, and the field names its refusals use."""

from __future__ import annotations

import pytest

from tests.integration.conftest import caller, one
from workers import wire
from workers.bootstrap import Services
from workers.gateway import ForbiddenError, Gateway, InvalidRequestError

pytestmark = pytest.mark.integration

PURPOSE = "support"


def log_end(svc: Services) -> int:
    return int(one(svc, "SELECT count(*) FROM memory_events"))


def test_a_supersession_sent_twice_is_answered_as_a_retry(gateway: Gateway, svc: Services) -> None:
    vic = caller(gateway, "vic")
    old = gateway.write(vic, "vic", wire.WriteMemory(content="Vic lives in Oslo", purpose=PURPOSE, key="city"))
    assert old.memory_id is not None
    body = wire.Supersede(content="Vic lives in Bergen", turn_id="t-55")  # no `confirmed`, no Idempotency-Key
    first = gateway.supersede(vic, "vic", old.memory_id, body)
    end = log_end(svc)
    again = gateway.supersede(vic, "vic", old.memory_id, body)
    assert again.memory_id == first.memory_id and again.events == [] and again.positions == []
    assert again.first_event_ids == [e.event_id for e in first.events]
    assert again.repeat is not None and again.repeat.startswith("a retry of a supersession recorded at")
    assert log_end(svc) == end


def test_a_listing_without_a_read_grant_hides_the_key_as_it_hides_the_text(gateway: Gateway, svc: Services) -> None:
    rita = caller(gateway, "rita")
    written = gateway.write(
        rita, "rita", wire.WriteMemory(content="Rita's passport is X1234567", purpose=PURPOSE, key="passport")
    )
    svc.catch_up()  # the listing reads the facts projection
    eraser = caller(gateway, "rita", ("erase",))
    [listed] = gateway.memories(eraser, "rita", include_all=True).memories
    assert listed.memory_id == written.memory_id and listed.status == "active"
    assert listed.content is None and listed.key is None and listed.scope["id"] is None
    one = gateway.memory(eraser, "rita", str(written.memory_id)).memory
    assert one.key is None and one.content is None
    assert gateway.memories(rita, "rita").memories[0].key == "passport"  # a read grant shows it
    for narrowed in ({"key": "passport"}, {"key_prefix": "pass"}):  # nor can it be found by probing
        with pytest.raises(ForbiddenError) as refused:
            gateway.memories(eraser, "rita", **narrowed)  # type: ignore[arg-type]
        assert refused.value.field == next(iter(narrowed)) and "read" in refused.value.rule


def test_refusals_name_the_fields_of_the_http_body(gateway: Gateway, svc: Services) -> None:
    rita = caller(gateway, "rita")
    end = log_end(svc)
    with pytest.raises(InvalidRequestError) as screened:  # screening raises it to personal
        gateway.write(rita, "rita", wire.WriteMemory(content="Rita's card is 4111 1111 1111 1111", purpose=PURPOSE))
    assert screened.value.field == "consent_ref"
    assert screened.value.rule.startswith("the content holds personal data (payment card number)")
    assert "consent reference or basis 'contract'" in screened.value.rule and "retention." not in screened.value.rule
    with pytest.raises(InvalidRequestError) as unmatched:
        gateway.revoke_consent(rita, "rita", wire.RevokeConsent(purpose="marketting"))
    assert unmatched.value.field == "purpose"
    assert "give allow_unmatched to withdraw consent" in unmatched.value.rule and "--" not in unmatched.value.rule
    assert log_end(svc) == end
