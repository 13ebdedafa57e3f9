"""The listing rule of ``Principal.may_list``: read shows text, erase shows status only."""

from __future__ import annotations

import pytest

from ledger.errors import NotAuthorisedError
from ledger.principals import Grant, Principal


def _principal(*grants: tuple[str, tuple[str, ...]]) -> Principal:
    return Principal(id="p", grants=tuple(Grant(subjects=(s,), actions=a) for s, a in grants))  # type: ignore[arg-type]


def test_a_read_grant_lists_with_text() -> None:
    assert _principal(("user-*", ("read",))).may_list("user-1") is True


def test_an_erase_grant_lists_status_only() -> None:
    assert _principal(("user-*", ("erase",))).may_list("user-1") is False


def test_a_credential_without_the_read_scope_cannot_use_the_read_grant() -> None:
    principal = _principal(("user-*", ("read", "erase")))
    assert principal.may_list("user-1", usable={"erase"}) is False
    with pytest.raises(NotAuthorisedError, match="read"):
        principal.may_list("user-1", usable={"write"})


def test_no_grant_on_the_subject_is_refused_naming_read() -> None:
    with pytest.raises(NotAuthorisedError, match="read"):
        _principal(("user-*", ("read", "erase")), ("other", ("write",))).may_list("other")
