"""``memledger bench serve``: ``memledger serve`` under an offered load (``serve_load``),
next to the same operations called in-process in the same run, in the embedded default
and in the distributed mode.

Per mode:

1. the stores are made (embedded: a fresh data directory; distributed: a fresh database
   and topics of the shared Kafka, PostgreSQL and Redis, with ``memledger worker``), one
   API key per client (read and write on the bench subjects) and a few memories per
   subject are written, and the projections catch up;
2. baseline: the load through ``workers.gateway.Gateway`` in this process (authenticate
   the token, then write or recall: what a route does without HTTP), with the embedded
   projections applied in the background as ``serve`` applies them;
3. the same load over HTTP against a ``memledger serve`` process on the same stores,
   with ``serve``'s resident memory (RSS) sampled before the load (idle) and every
   0.2 s during it (the largest sample: under load). In the embedded default that is
   the serve process alone; its PostgreSQL and Redis run as processes of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from contracts import utc_now
from workers import wire
from workers.bench.env import (
    BenchTargets,
    Progress,
    bench_environment,
    services_for,
    start_worker,
    stop_worker,
    wait_caught_up,
)
from workers.bench.figures import Figure
from workers.bench.serve_load import PURPOSE, LoadPlan, run_load
from workers.bench.targets import target
from workers.bootstrap import PROJECTION_NAMES, Services, build
from workers.gateway import Gateway
from workers.serve.projector import Projector
from workers.settings import Settings

SEEDS_PER_SUBJECT = 4


class InProcess:
    """The baseline target: the gateway's operations in this process."""

    def __init__(self, gateway: Gateway, tokens: list[str]) -> None:
        self.gateway = gateway
        self.tokens = tokens

    def session(self, client: int) -> InProcessSession:
        return InProcessSession(self.gateway, self.tokens[client % len(self.tokens)])


class InProcessSession:
    def __init__(self, gateway: Gateway, token: str) -> None:
        self.gateway = gateway
        self.token = token

    def write(self, subject_id: str, content: str) -> str:
        caller = self.gateway.authenticate(self.token, "POST /v1/subjects/{subject_id}/memories")
        ack = self.gateway.write(caller, subject_id, wire.WriteMemory(content=content, purpose=PURPOSE))
        return ack.memory_id or ""

    def recall(self, subject_id: str, query: str) -> list[str]:
        caller = self.gateway.authenticate(self.token, "POST /v1/subjects/{subject_id}/recall")
        result = self.gateway.recall(caller, subject_id, wire.Recall(query=query, purpose=PURPOSE))
        return [i.memory_id for i in result.items]

    def close(self) -> None:
        return None


class OverHttp:
    """The measured target: ``memledger serve`` at ``url``, one keep-alive connection per client."""

    def __init__(self, url: str, tokens: list[str]) -> None:
        self.url = url
        self.tokens = tokens

    def session(self, client: int) -> HttpSession:
        return HttpSession(self.url, self.tokens[client % len(self.tokens)])


class HttpSession:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def write(self, subject_id: str, content: str) -> str:
        r = self.http.post(f"/v1/subjects/{subject_id}/memories", json={"content": content, "purpose": PURPOSE})
        r.raise_for_status()
        return str(r.json()["memory_id"])

    def recall(self, subject_id: str, query: str) -> list[str]:
        r = self.http.post(f"/v1/subjects/{subject_id}/recall", json={"query": query, "purpose": PURPOSE})
        r.raise_for_status()
        return [str(i["memory_id"]) for i in r.json()["items"]]

    def close(self) -> None:
        self.http.close()


def seed(gateway: Gateway, plan: LoadPlan) -> tuple[list[str], list[tuple[str, str]]]:
    """One API key per client and ``SEEDS_PER_SUBJECT`` memories per subject; returns
    the tokens and the (subject, text) of the memories."""
    tokens = [
        gateway.keys.create(f"bench-agent-{i}", ("read", "write"), ["bench-serve-*"], label="bench serve")[1]
        for i in range(plan.clients)
    ]
    caller = gateway.authenticate(tokens[0], "bench seed")
    seeds = []
    for s, subject in enumerate(plan.subjects):
        for j in range(SEEDS_PER_SUBJECT):
            text = f"Seeded preference {s}-{j}: the user likes {('tea', 'maps', 'jazz', 'chess')[j]} on {subject}."
            gateway.write(caller, subject, wire.WriteMemory(content=text, purpose=PURPOSE))
            seeds.append((subject, text))
    return tokens, seeds


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid``, bytes."""
    return int(psutil.Process(pid).memory_info().rss)


class RssSampler:
    """The largest RSS of ``pid`` seen every ``every_s`` seconds between start and stop."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid, self.every_s, self.peak = pid, every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except psutil.Error:
                return


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_process(env: dict[str, str], log_path: Path, timeout_s: float = 180) -> Iterator[tuple[str, int]]:
    """``memledger serve`` on a free loopback port with ``env``; yields its URL and pid
    once ``/readyz`` answers 200, stops it with SIGTERM afterwards.

    Raises:
        RuntimeError: it exited or did not become ready in ``timeout_s`` seconds (its log's end).
    """
    port = free_port()
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers", "serve", "--port", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memledger serve did not become ready:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def measure_http(
    env: dict[str, str],
    tokens: list[str],
    seeds: list[tuple[str, str]],
    plan: LoadPlan,
    mode: str,
    log_path: Path,
    progress: Progress,
) -> dict[str, Any]:
    """The load over HTTP against a ``serve`` started with ``env``, and its RSS."""
    with serve_process(env, log_path) as (url, pid):
        time.sleep(1.0)  # settled: the idle figure is not the start's
        idle = rss_bytes(pid)
        with RssSampler(pid) as sampler:
            out = run_load(OverHttp(url, tokens), plan, seeds, f"serve {mode}: over HTTP", progress)
        out["rss_idle_bytes"], out["rss_load_bytes"] = idle, max(sampler.peak, idle)
    return out


def bench_embedded(data_dir: Path, embedder: str, plan: LoadPlan, progress: Progress) -> dict[str, Any]:
    """Both phases in the embedded default on a fresh data directory ``data_dir``."""
    env = {"MEMLEDGER_DATA_DIR": str(data_dir), "MEMLEDGER_EMBEDDER": embedder}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}, **env}
    settings = Settings(data_dir=data_dir, embedder=embedder)
    svc = build(settings)
    try:
        gateway = Gateway(svc)
        projector = Projector(svc)
        try:
            tokens, seeds = seed(gateway, plan)
            svc.catch_up()
            projector.start()
            in_process = run_load(InProcess(gateway, tokens), plan, seeds, "serve embedded: in-process", progress)
        finally:
            projector.stop()
            gateway.close()
    finally:
        svc.close()
    http = measure_http(env, tokens, seeds, plan, "embedded", data_dir / "serve.log", progress)
    return {"mode": "embedded", "embedder": embedder, "in_process": in_process, "http": http}


def bench_distributed(
    targets: BenchTargets, data_dir: Path, embedder: str, plan: LoadPlan, progress: Progress
) -> dict[str, Any]:
    """Both phases in the distributed mode: a fresh database and topics, ``memledger worker``."""
    with bench_environment(targets, data_dir, embedder) as env:
        worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-serve.log")
        try:
            svc = services_for(env)
            try:
                gateway = Gateway(svc)
                try:
                    tokens, seeds = seed(gateway, plan)
                    wait_caught_up(svc, PROJECTION_NAMES, 300, progress)
                    _wait_for_vectors(svc)
                    in_process = run_load(
                        InProcess(gateway, tokens), plan, seeds, "serve distributed: in-process", progress
                    )
                finally:
                    gateway.close()
            finally:
                svc.close()
            full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}, **env}
            log_path = Path(env["MEMLEDGER_DATA_DIR"]) / "serve.log"
            http = measure_http(full_env, tokens, seeds, plan, "distributed", log_path, progress)
        finally:
            stop_worker(worker)
    return {"mode": "distributed", "embedder": embedder, "in_process": in_process, "http": http}


def _wait_for_vectors(svc: Services, timeout_s: float = 120) -> None:
    """Until the vectors worker answers queries (it does once it has started)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            svc.recall.recall(svc.principal(), "bench-serve-0", PURPOSE, "tea", utc_now())
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def serve_figures(out: dict[str, Any]) -> list[Figure]:
    """The figures of one mode: each HTTP figure next to the in-process one of the same run."""
    mode, http, base = out["mode"], out["http"], out["in_process"]
    label = f"serve ({mode}, {out['embedder']})"
    figures = [
        Figure(
            f"serve.{mode}.rate",
            f"{label}: achieved rate of {http['requests']} requests offered at a steady rate",
            http["achieved_rate"],
            "req/s",
            baseline=base["achieved_rate"],
            baseline_label="in-process",
            target=target(f"serve.{mode}.rate"),
            note=_failures(http),
        )
    ]
    for measure, what in (
        ("write_ack", "write, request -> acknowledged"),
        ("recall", "recall"),
        ("ack_to_recallable", "a write's ack -> a recall returns it"),
    ):
        for q in ("p50", "p99"):
            key = f"serve.{mode}.{measure}.{q}"
            figures.append(
                Figure(
                    key,
                    f"{label}: {what} {q}",
                    http[f"{measure}_{q}_ms"],
                    "ms",
                    baseline=base[f"{measure}_{q}_ms"],
                    baseline_label="in-process",
                    target=target(key),
                    note=f"{http['not_recalled']} never returned"
                    if measure == "ack_to_recallable" and http["not_recalled"]
                    else None,
                )
            )
    mb = 1024 * 1024
    figures.append(
        Figure(f"serve.{mode}.rss.idle", f"{label}: serve's RSS, idle", round(http["rss_idle_bytes"] / mb, 1), "MiB")
    )
    figures.append(
        Figure(
            f"serve.{mode}.rss.load",
            f"{label}: serve's RSS under the load (largest sample)",
            round(http["rss_load_bytes"] / mb, 1),
            "MiB",
            baseline=round(http["rss_idle_bytes"] / mb, 1),
            baseline_label="idle",
        )
    )
    return figures


def _failures(result: dict[str, Any]) -> str | None:
    failures = result["failures"]
    return ", ".join(f"{n} {k}" for k, n in sorted(failures.items())) if failures else None


def render(outs: list[dict[str, Any]]) -> str:
    """One line per mode and phase: rate, latencies, failures."""
    lines = ["serve (milliseconds; in-process is the baseline of the same run):"]
    for out in outs:
        for phase in ("in_process", "http"):
            r = out[phase]
            lines.append(
                f"  {out['mode']:<11} {phase:<10} {r['achieved_rate']:>6} req/s  write p50 {r['write_ack_p50_ms']}"
                f" p99 {r['write_ack_p99_ms']}  recall p50 {r['recall_p50_ms']} p99 {r['recall_p99_ms']}"
                f"  ack->recallable p50 {r['ack_to_recallable_p50_ms']} p99 {r['ack_to_recallable_p99_ms']}"
                f"  failures {r['failures'] or 0}"
            )
    return "\n".join(lines)
