"""The demo's last step: ``memledger serve`` on the demo's data directory for a moment,
one write and one recall over HTTP with the Python client, then a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from workers.serve import files

START_TIMEOUT_S = 120.0


def over_http(data_dir: Path, embedder: str, subject: str, purpose: str, console: Console) -> bool:
    """Start ``serve`` (any free loopback port), make a key for ``subject`` through the
    CLI (which goes through serve), write and recall over HTTP, stop serve with SIGTERM.
    Returns whether the written memory was recalled and serve stopped cleanly."""
    from workers.client import LedgerClient

    env = os.environ | {"MEMLEDGER_DATA_DIR": str(data_dir), "MEMLEDGER_EMBEDDER": embedder}
    env.pop("MEMLEDGER_KAFKA_BOOTSTRAP", None)
    cli = [sys.executable, "-m", "workers"]
    proc = subprocess.Popen([*cli, "serve", "--port", "0"], env=env, stdout=subprocess.DEVNULL)
    try:
        info = _wait_for(data_dir, proc)
        console.print(f"  memledger serve answers at {info.url} (OpenAPI at {info.url}/openapi.json)")
        made = subprocess.run(
            [
                *cli,
                "keys",
                "create",
                "demo-agent",
                "--scope",
                "read",
                "--scope",
                "write",
                "--subject",
                subject,
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        token = json.loads(made.stdout)["token"]
        with LedgerClient(info.url, token) as ledger:
            ack = ledger.write(subject, "Alice wants release notes as bullet points", purpose, agent="demo-agent")
            at = ", ".join(f"partition {p.partition} offset {p.offset}" for p in ack.positions)
            console.print(f"  POST /v1/subjects/{subject}/memories -> memory {ack.memory_id} at {at}")
            result = ledger.recall(subject, "how should release notes look", purpose, after=ack, k=3)
            console.print(f"  POST /v1/subjects/{subject}/recall (after that write) ->")
            for item in result.items:
                console.print(f"    {item.score:.4f} {item.content} (by {item.provenance['writer']})")
        recalled = any(i.memory_id == ack.memory_id for i in result.items)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    console.print(f"  serve stopped with SIGTERM (exit status {code})")
    return recalled and code == 0


def _wait_for(data_dir: Path, proc: subprocess.Popen[bytes]) -> files.ServeFile:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = files.read(data_dir)
        if info is not None and info.pid == proc.pid:
            return info
        if proc.poll() is not None:
            raise RuntimeError(f"memledger serve exited with status {proc.returncode}")
        time.sleep(0.2)
    raise RuntimeError(f"memledger serve did not start within {START_TIMEOUT_S:.0f} s")
