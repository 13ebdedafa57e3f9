"""``memledger serve`` killed with SIGKILL after acknowledging a write: after a restart
the memory is there exactly once, and a retry with the same idempotency key changes
nothing. Then a clean stop, and the refusal to listen beyond loopback without a key."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e import serving
from tests.e2e.conftest import free_port, wait_until
from workers.client import LedgerClient

pytestmark = [pytest.mark.e2e]


def test_an_acknowledged_write_survives_kill_9_exactly_once(tmp_path: Path) -> None:
    env = serving.base_env(tmp_path)
    served = serving.start(env, tmp_path)
    token = served.key("agent-dana", ["dana"])
    url = f"{served.url}/v1/subjects/dana/memories"
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "write-1"}
    body = {"content": "Dana prefers the metric system", "purpose": "units", "key": "system"}
    first = httpx.post(url, json=body, headers=headers)
    assert first.status_code == 200, first.text
    serving.stop(served, signal.SIGKILL)  # the acknowledged write is in the log, nothing else ran
    data = Path(env["MEMLEDGER_DATA_DIR"])
    assert json.loads((data / "serve.json").read_text())["pid"] == served.proc.pid  # left behind, now stale

    again = serving.start(env, tmp_path)
    try:
        retried = httpx.post(f"{again.url}/v1/subjects/dana/memories", json=body, headers=headers)
        assert retried.status_code == 200 and retried.json() == first.json()
        with LedgerClient(again.url, token) as client:
            page = client.memories("dana", include_all=True)
            recalled = client.recall("dana", "metric", "units")
        assert [m.content for m in page.memories] == ["Dana prefers the metric system"]
        assert [i.memory_id for i in recalled.items] == [first.json()["memory_id"]]
        assert sum(again.cli.json("lag")["end_offsets"].values()) == 1  # one event, not two
        operators = [k for k in again.cli.json("keys", "list") if k["operator"]]
        assert len(operators) == 2 and sum(k["revoked_at"] is None for k in operators) == 1
    finally:
        assert serving.stop(again) == 0  # SIGTERM: a clean stop
    assert not (data / "serve.json").exists()
    assert "stopped (SIGTERM)" in again.logs()
    wait_until(lambda: not (data / "pg" / "postmaster.pid").exists(), 60, "the embedded PostgreSQL to stop with serve")

    # beyond loopback only once a key exists
    for key in again.cli.json("keys", "list"):
        if key["revoked_at"] is None:
            again.cli.run("keys", "revoke", key["key_id"])
    proc = again.cli.run("serve", "--host", "0.0.0.0", "--port", str(free_port()), check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: host: 0.0.0.0 is not a loopback address")
    assert "Traceback" not in proc.stderr
