"""What the CLI prints and how it reads its arguments, without stores: erase's positional
arguments, counts in the singular and plural in trace and erasure-report, and the
provenance each recalled item shows in text."""

from __future__ import annotations

import pytest
import typer

from workers.cli import erase_target

# -- erase's arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "subject_opt", "expected"),
    [
        (["alice", "m-1", "m-2"], None, ("alice", ("m-1", "m-2"))),
        (["alice"], None, ("alice", ())),
        (["alice"], "alice", ("alice", ("alice",))),  # the subject's name given again is a memory id
        (["alice", "m-1"], "alice", ("alice", ("alice", "m-1"))),
        (["m-1", "m-2"], "alice", ("alice", ("m-1", "m-2"))),
        (["bob", "m-1"], "alice", ("alice", ("bob", "m-1"))),
        ([], "alice", ("alice", ())),
    ],
)
def test_erase_target_with_subject_option_keeps_every_argument_as_an_id(
    arguments: list[str], subject_opt: str | None, expected: tuple[str, tuple[str, ...]]
) -> None:
    assert erase_target(arguments, subject_opt) == expected


def test_erase_target_without_any_subject_is_a_usage_error() -> None:
    with pytest.raises(typer.BadParameter, match="subject: missing"):
        erase_target([], None)
