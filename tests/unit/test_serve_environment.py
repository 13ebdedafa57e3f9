"""Which of the CLI's MEMLEDGER_* variables disagree with the serve it forwards to."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.serve import environment
from workers.settings import Settings


def settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def test_only_set_variables_whose_value_differs_are_named() -> None:
    serve = environment.digests(settings(recall_rrf_k=30, cache_ttl_s=10.0))
    mine = settings(recall_rrf_k=7, cache_ttl_s=10.0)
    environ = {"MEMLEDGER_RECALL_RRF_K": "7", "MEMLEDGER_CACHE_TTL_S": "10", "HOME": "/x"}
    assert environment.differing(mine, serve, environ) == ["MEMLEDGER_RECALL_RRF_K"]
    # a variable the CLI does not set is serve's, whatever the CLI's default
    assert environment.differing(settings(), serve, {}) == []


def test_names_are_case_insensitive_as_settings_reads_them() -> None:
    serve = environment.digests(settings())
    assert environment.differing(settings(recall_rrf_k=7), serve, {"memledger_recall_rrf_k": "7"}) == [
        "memledger_recall_rrf_k"
    ]


@pytest.mark.parametrize(
    "name",
    [
        "MEMLEDGER_PRINCIPAL",
        "MEMLEDGER_DATA_DIR",
        "MEMLEDGER_API_WRITE_BURST",
        "MEMLEDGER_METRICS_PORT",
        "MEMLEDGER_MASTER_KEY",
        "MEMLEDGER_TEST_REDIS_URL",
        "MEMLEDGER_NOT_A_SETTING",
    ],
)
def test_the_caller_the_data_directory_and_serves_own_process_are_not_compared(name: str) -> None:
    assert not environment.compared(name.removeprefix("MEMLEDGER_").lower())


def test_a_relative_path_is_compared_as_the_file_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    serve = environment.digests(settings(screening_policy_file=Path("policy.toml")))
    monkeypatch.chdir(tmp_path / "b")
    environ = {"MEMLEDGER_SCREENING_POLICY_FILE": "policy.toml"}
    assert environment.differing(settings(screening_policy_file=Path("policy.toml")), serve, environ) == [
        "MEMLEDGER_SCREENING_POLICY_FILE"
    ]
    same = settings(screening_policy_file=tmp_path / "a" / "policy.toml")
    assert environment.differing(same, serve, {"MEMLEDGER_SCREENING_POLICY_FILE": "x"}) == []


def test_a_serve_file_of_an_older_serve_compares_nothing() -> None:
    assert environment.differing(settings(recall_rrf_k=7), {}, {"MEMLEDGER_RECALL_RRF_K": "7"}) == []


def test_the_digests_hold_no_value() -> None:
    digests = environment.digests(settings(screening_policy_file=Path("/srv/secret-policy.toml")))
    assert all(len(d) == 64 and "secret" not in d for d in digests.values())
