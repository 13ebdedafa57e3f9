"""The listing rule of ``Principal.may_list``: read shows text, erase shows status only."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ledger.errors import InvalidCommandError, NotAuthorisedError
from ledger.principals import Grant, GrantsFile, Principal

CLI_ONLY = '[principals.cli]\ngrants = [{ subjects = ["*"], actions = ["write", "read", "erase"] }]\n'
DPO_ERASES = '[principals.dpo]\ngrants = [{ subjects = ["*"], actions = ["erase"] }]\n'


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


def test_the_grants_file_is_read_again_when_it_changes_and_a_bad_one_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "grants.toml"
    path.write_text(CLI_ONLY)
    grants = GrantsFile(path)
    assert set(grants.principals()) == {"cli"} and grants.problem is None
    path.write_text(CLI_ONLY + DPO_ERASES)  # the same second, the same size or not: its content decides
    assert grants.principals()["dpo"].may("erase", "alice")
    with caplog.at_level(logging.WARNING, logger="ledger.principals"):
        path.write_text(CLI_ONLY + "[principals.dpo\n")
        for _ in range(3):  # reported once, however often it is read
            assert grants.principals()["dpo"].may("erase", "alice")
        path.unlink()
        assert grants.principals()["dpo"].may("erase", "alice")
    assert grants.problem == f"grants_file: {path} does not exist"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and f"{path} is not valid TOML" in warned[0] and "stay in force" in warned[0]
    path.write_text(CLI_ONLY)
    assert set(grants.principals()) == {"cli"} and grants.problem is None


def test_a_grants_file_against_the_schema_is_refused_at_start_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "grants.toml"
    path.write_text('[principals.dpo]\ngrants = [{ subjects = ["*"], actions = ["delete"] }]\n')
    with pytest.raises(InvalidCommandError) as caught:
        GrantsFile(path)
    assert caught.value.field.startswith("grants_file:principals.dpo.grants.0.actions")


@pytest.mark.parametrize(
    ("subject", "rule"), [("", "must not be empty"), ("  ", "must not be empty"), ("a\x00b", "control")]
)
def test_a_subject_id_no_event_can_hold_is_refused_before_the_grants_are_read(subject: str, rule: str) -> None:
    """A wildcard grant matches an empty subject id; a read of it would answer nothing."""
    from ledger.errors import InvalidCommandError
    from ledger.principals import Grant, Principal

    everyone = Principal(id="ops", grants=(Grant(subjects=("*",), actions=("read", "write", "erase")),))
    for check in (lambda: everyone.require("read", subject), lambda: everyone.may_list(subject)):
        with pytest.raises(InvalidCommandError) as refused:
            check()
        assert refused.value.field == "subject_id" and rule in refused.value.rule
    assert everyone.may_list("alice") is True
