"""Nothing left on disk, on the embedded default: after an erasure with its history, a
replay of every projection and ``memledger compact``, no file of the data directory
(PostgreSQL's tables, indexes and WAL, the Qdrant engine's segments and WAL, the Redis
dump) holds the erased text or its turn ids; and the write boundary refuses a secret
with one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import Cli

pytestmark = pytest.mark.e2e

PURPOSE = "identity_checks"
TEXTS = (b"quetzalvine", b"marmorkatze")
"""Words only the erased memories hold."""
TURNS = (b"turn-erased-4711", b"turn-erased-4712")


def files_holding(root: Path, needles: tuple[bytes, ...]) -> dict[str, list[str]]:
    """Which needles each file under ``root`` holds (files holding none left out)."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            data = path.read_bytes()
        except OSError:  # a server's socket or a file removed while we walk
            continue
        hits = [n.decode() for n in needles if n in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def test_after_compact_no_file_of_the_data_directory_holds_the_erased_text(embedded_cli: Cli) -> None:
    cli = embedded_cli
    data = Path(cli.env["MEMLEDGER_DATA_DIR"])
    first = cli.json(
        "write", "sam", f"Sam's passport number is X1234567 {TEXTS[0].decode()}",
        "--purpose", PURPOSE, "--key", "passport", "--turn-id", TURNS[0].decode(),
    )  # fmt: skip
    second = cli.json(
        "write", "sam", f"Sam's new passport number is Y7654321 {TEXTS[1].decode()}",
        "--purpose", PURPOSE, "--key", "passport", "--turn-id", TURNS[1].decode(),
    )  # fmt: skip
    assert [e["type"] for e in second["events"]] == ["MemoryWritten", "MemorySuperseded"]
    recalled = cli.json("recall", "sam", "passport number", "--purpose", PURPOSE)  # the cache holds it too
    assert [i["memory_id"] for i in recalled["items"]] == [second["memory_id"]]

    refused = cli.run("write", "sam", "my key is AKIAIOSFODNN7EXAMPLE", "--purpose", PURPOSE, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "error: content: holds a secret (AWS Access Key): memories must not store credentials; remove it, or have"
        " the screening policy 'default' replace it (secrets.action = 'replace')"
    ]

    erased = cli.json("erase", "sam", second["memory_id"], "--with-history")
    assert sorted(erased["affected"]) == sorted([first["memory_id"], second["memory_id"]])
    assert erased["reinstated"] == [] and erased["earlier_versions"] == []
    before = files_holding(data, TEXTS + TURNS)
    assert before, "no residue before compact: the search would prove nothing"
    trace = cli.json("trace", erased["request_id"])
    assert trace["verdict"] == "complete"
    assert trace["disk"]["probe"] == "residue until compaction (memledger compact)"

    cli.run("replay", "all")  # version 2 serves, rebuilt without them; version 1, which held them, is kept
    compaction = cli.json("compact")
    assert compaction["complete"], compaction
    assert {s["store"] for s in compaction["steps"]} == {"postgres", "wal", "vectors", "cache"}
    done = {s["target"] for s in compaction["steps"] if s["status"] == "done"}
    assert {"facts_v1", "facts_v2", "summaries_v1", "summaries_v2", "memories_v1", "memories_v2"} <= done
    assert files_holding(data, TEXTS + TURNS) == {}
    disk = cli.json("trace", erased["request_id"])["disk"]
    assert disk["status"] == "applied" and disk["probe"] == f"compacted at {compaction['finished_at']}"
    assert files_holding(data, TEXTS + TURNS) == {}  # and the commands since wrote nothing of it back
    cli.run("replay", "all")  # version 3, rebuilt after the compaction, never held them either
    again = cli.json("trace", erased["request_id"])
    assert again["verdict"] == "complete" and again["disk"] == disk
    assert files_holding(data, TEXTS + TURNS) == {}
