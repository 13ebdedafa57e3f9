"""Principals and grants: deny by default, subject patterns, actions kept apart, and
loading grants from TOML (with errors that name the file and the key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ledger.errors import InvalidCommandError, NotAuthorisedError
from ledger.principals import ALL_ACTIONS, Grant, Principal, load_principals, resolve_principal

GRANTS_TOML = """
[principals.support-agent]
grants = [
  { subjects = ["user-*"], actions = ["write", "read"] },
]

[principals.dpo]
grants = [
  { subjects = ["*"], actions = ["erase"] },
  { subjects = ["user-42", "team-?"], actions = ["read"] },
]

[principals.no-grants]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grants.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- deny by default


@pytest.mark.parametrize("action", ALL_ACTIONS)
def test_unknown_principal_may_do_nothing(action: str) -> None:
    principals = {"support-agent": Principal(id="support-agent", grants=(Grant(subjects=("*",), actions=ALL_ACTIONS),))}
    stranger = resolve_principal(principals, "stranger")
    assert stranger.id == "stranger"
    assert stranger.grants == ()
    assert not stranger.may(action, "user-1")  # type: ignore[arg-type]
    with pytest.raises(NotAuthorisedError) as info:
        stranger.require(action, "user-1")  # type: ignore[arg-type]
    assert (info.value.principal_id, info.value.action, info.value.subject_id) == ("stranger", action, "user-1")
    assert "stranger" in str(info.value) and "user-1" in str(info.value)


def test_resolve_returns_the_known_principal() -> None:
    agent = Principal(id="agent", grants=(Grant(subjects=("user-1",), actions=("read",)),))
    assert resolve_principal({"agent": agent}, "agent") is agent


def test_principal_without_grants_is_denied_everything() -> None:
    principal = Principal(id="empty")
    for action in ALL_ACTIONS:
        for subject in ("user-1", "", "*"):
            assert not principal.may(action, subject)
            with pytest.raises(NotAuthorisedError):
                principal.require(action, subject)


def test_empty_registry_denies() -> None:
    principal = resolve_principal({}, "anyone")
    assert not any(principal.may(a, "user-1") for a in ALL_ACTIONS)


# --------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "subject", "allowed"),
    [
        ("user-1", "user-1", True),
        ("user-1", "user-10", False),
        ("user-1", "user-", False),
        ("user-*", "user-1", True),
        ("user-*", "user-", True),
        ("user-*", "user-abc-def", True),
        ("user-*", "users-1", False),
        ("user-*", "admin-user-1", False),
        ("user-*", "USER-1", False),  # case-sensitive
        ("User-*", "user-1", False),
        ("team-?", "team-a", True),
        ("team-?", "team-ab", False),
        ("team-[ab]", "team-b", True),
        ("team-[ab]", "team-c", False),
        ("*", "anything at all", True),
    ],
)
def test_subject_patterns(pattern: str, subject: str, allowed: bool) -> None:
    principal = Principal(id="p", grants=(Grant(subjects=(pattern,), actions=("read",)),))
    assert principal.may("read", subject) is allowed
    if allowed:
        principal.require("read", subject)
    else:
        with pytest.raises(NotAuthorisedError):
            principal.require("read", subject)


def test_any_pattern_of_a_grant_suffices() -> None:
    grant = Grant(subjects=("user-1", "team-*"), actions=("read",))
    assert grant.allows("read", "user-1")
    assert grant.allows("read", "team-x")
    assert not grant.allows("read", "user-2")


# --------------------------------------------------------------------------- actions


def test_actions_are_separate() -> None:
    writer = Principal(id="writer", grants=(Grant(subjects=("user-*",), actions=("write",)),))
    assert writer.may("write", "user-1")
    assert not writer.may("read", "user-1")
    assert not writer.may("erase", "user-1")
    with pytest.raises(NotAuthorisedError) as info:
        writer.require("erase", "user-1")
    assert info.value.action == "erase"


def test_grants_combine_per_action_and_subject() -> None:
    principal = Principal(
        id="mixed",
        grants=(
            Grant(subjects=("user-*",), actions=("read",)),
            Grant(subjects=("user-7",), actions=("erase",)),
        ),
    )
    assert principal.may("read", "user-7")
    assert principal.may("erase", "user-7")
    assert not principal.may("erase", "user-8")  # erase only for user-7
    assert not principal.may("write", "user-7")  # nobody granted write


def test_grant_rejects_unknown_actions_and_empty_lists() -> None:
    with pytest.raises(ValidationError) as info:
        Grant(subjects=("*",), actions=("delete",))  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"][0] == "actions"
    with pytest.raises(ValidationError) as info:
        Grant(subjects=(), actions=("read",))
    assert info.value.errors()[0]["loc"] == ("subjects",)
    with pytest.raises(ValidationError) as info:
        Grant(subjects=("*",), actions=())
    assert info.value.errors()[0]["loc"] == ("actions",)


def test_principals_are_frozen() -> None:
    principal = Principal(id="p")
    with pytest.raises(ValidationError):
        principal.grants = (Grant(subjects=("*",), actions=ALL_ACTIONS),)  # type: ignore[misc]
    assert not principal.may("read", "user-1")


# --------------------------------------------------------------------------- TOML file


def test_load_principals_from_toml(tmp_path: Path) -> None:
    principals = load_principals(_write(tmp_path, GRANTS_TOML))
    assert set(principals) == {"support-agent", "dpo", "no-grants"}
    agent = principals["support-agent"]
    assert agent.id == "support-agent"
    assert agent.grants == (Grant(subjects=("user-*",), actions=("write", "read")),)
    assert agent.may("write", "user-1") and agent.may("read", "user-1")
    assert not agent.may("erase", "user-1")
    assert not agent.may("read", "team-a")

    dpo = principals["dpo"]
    assert dpo.may("erase", "anyone")
    assert dpo.may("read", "user-42") and dpo.may("read", "team-x")
    assert not dpo.may("read", "user-41")
    assert not dpo.may("write", "user-42")

    assert principals["no-grants"].grants == ()
    assert not any(principals["no-grants"].may(a, "user-1") for a in ALL_ACTIONS)
    assert not resolve_principal(principals, "not-in-file").may("read", "user-1")


def test_empty_file_has_no_principals(tmp_path: Path) -> None:
    assert load_principals(_write(tmp_path, "")) == {}


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(InvalidCommandError) as info:
        load_principals(missing)
    assert info.value.field == "grants_file"
    assert str(missing) in info.value.rule
    assert "does not exist" in info.value.rule


@pytest.mark.parametrize(
    "text",
    ["[principals.agent\n", "principals = {", '[principals.a]\ngrants = [ { subjects = ["x"] \n'],
    ids=["unclosed-table", "unclosed-inline", "unclosed-array"],
)
def test_bad_toml(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidCommandError) as info:
        load_principals(path)
    assert info.value.field == "grants_file"
    assert "not valid TOML" in info.value.rule
    assert str(path) in info.value.rule


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("users = []\n", "grants_file:users"),
        (
            '[principals.a]\ngrants = [ { subjects = ["u"], actions = ["read"], expires = "2030" } ]\n',
            "grants_file:principals.a.grants.0.expires",
        ),
        (
            '[principals.a]\ngrants = [ { subjects = ["u"], actions = ["read"] },'
            ' { subject = ["u"], actions = ["read"] } ]\n',
            "grants_file:principals.a.grants.1",
        ),
    ],
    ids=["top-level", "in-grant", "misspelt-grant-key"],
)
def test_unknown_key_names_where_it_is(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InvalidCommandError) as info:
        load_principals(_write(tmp_path, text))
    assert info.value.field.startswith(field), f"{info.value.field!r} does not point at {field!r}"
    assert str(info.value).startswith(info.value.field)


def test_unknown_list_key_in_a_principal_table_is_named(tmp_path: Path) -> None:
    text = "[principals.a]\ngrants = []\nroles = []\n"
    with pytest.raises(InvalidCommandError) as info:
        load_principals(_write(tmp_path, text))
    assert info.value.field == "grants_file:principals.a.roles"
    assert "unknown" in info.value.rule


def test_unknown_scalar_key_in_a_principal_table_is_reported_as_unknown(tmp_path: Path) -> None:
    text = '[principals.a]\ngrants = []\ndescription = "the support bot"\n'
    with pytest.raises(InvalidCommandError) as info:
        load_principals(_write(tmp_path, text))
    assert "principals.a" in info.value.field
    assert "description" in f"{info.value.field} {info.value.rule}"
    assert "unknown" in info.value.rule.lower()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[principals.a]\ngrants = [ { subjects = ["u"], actions = ["delete"] } ]\n', "principals.a.grants.0.actions"),
        ('[principals.a]\ngrants = [ { subjects = [], actions = ["read"] } ]\n', "principals.a.grants.0.subjects"),
        ('[principals.a]\ngrants = [ { actions = ["read"] } ]\n', "principals.a.grants.0.subjects"),
    ],
    ids=["unknown-action", "no-subjects", "missing-subjects"],
)
def test_invalid_grant_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InvalidCommandError) as info:
        load_principals(_write(tmp_path, text))
    assert info.value.field.startswith(f"grants_file:{field}")


def test_empty_principal_name_is_an_invalid_grants_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidCommandError) as info:
        load_principals(_write(tmp_path, '[principals.""]\ngrants = []\n'))
    assert info.value.field.startswith("grants_file")
