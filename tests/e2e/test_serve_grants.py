"""``memledger serve`` and the grants it enforces while it runs: an edit of the grants
file takes effect on the next forwarded command and operator request; a file that no
longer parses keeps the last good grants, reported once in serve's log and in ``/readyz``;
an API key made or revoked while it runs counts at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e import serving
from workers.client import LedgerClient, Unauthenticated

pytestmark = [pytest.mark.e2e]

PURPOSE = "technical_writing"
DPO_ERASES = '\n[principals.dpo]\ngrants = [{ subjects = ["*"], actions = ["erase"] }]\n'


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.embedded(tmp_path_factory.mktemp("serve-grants")) as served:
        yield served


def readyz(served: serving.Served) -> dict[str, Any]:
    """The body of serve's ``/readyz``, as JSON."""
    body: dict[str, Any] = httpx.get(served.url + "/readyz", timeout=30).json()
    return body


def test_an_edited_grants_file_counts_at_the_next_command_through_serve(embedded: serving.Served) -> None:
    cli = embedded.cli
    grants = Path(cli.env["MEMLEDGER_DATA_DIR"]) / "grants.toml"
    first = grants.read_text()
    subject = f"zed-{uuid.uuid4().hex[:8]}"
    written = cli.json("write", subject, "Zed prefers tabs", "--purpose", PURPOSE)
    refused = cli.run("--principal", "dpo", "memories", subject, check=False)
    assert refused.returncode == 2 and "may not read" in refused.stderr, refused.stderr
    grants.write_text(first + DPO_ERASES)  # the operator gives dpo an erase grant
    listed = cli.json("--principal", "dpo", "memories", subject)["memories"]
    assert [m["memory_id"] for m in listed] == [written["memory_id"]] and listed[0]["content"] is None
    assert readyz(embedded)["grants_file"] is None

    grants.write_text(first + DPO_ERASES + "[principals.broken\n")  # no longer TOML
    for _ in range(2):
        listed = cli.json("--principal", "dpo", "memories", subject)["memories"]  # the last good grants
        assert [m["memory_id"] for m in listed] == [written["memory_id"]]
    ready = readyz(embedded)
    assert ready["ready"] is True, ready
    assert ready["grants_file"].startswith("grants_file: grants.toml is not valid TOML"), ready
    assert str(grants) not in ready["grants_file"]  # the probe has no credential: no path of the machine
    warned = [line for line in embedded.logs().splitlines() if "is not valid TOML" in line]
    assert len(warned) == 1 and str(grants) in warned[0] and "stay in force" in warned[0], embedded.logs()

    grants.write_text(first)  # the grant withdrawn: refused again at once
    refused = cli.run("--principal", "dpo", "memories", subject, check=False)
    assert refused.returncode == 2 and "may not read" in refused.stderr, refused.stderr
    assert readyz(embedded)["grants_file"] is None


def test_an_api_key_made_or_revoked_while_serve_runs_counts_at_once(embedded: serving.Served) -> None:
    subject = f"amy-{uuid.uuid4().hex[:8]}"
    token = embedded.key("helper", [subject], ("read", "write"))
    with LedgerClient(embedded.url, token) as client:
        ack = client.write(subject, "Amy likes tea", PURPOSE)
        assert [i.memory_id for i in client.recall(subject, "tea", PURPOSE, after=ack).items] == [ack.memory_id]
        embedded.cli.run("keys", "revoke", token.split("_")[1])
        with pytest.raises(Unauthenticated):
            client.recall(subject, "tea", PURPOSE)
