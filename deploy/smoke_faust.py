"""Smoke test: a faust-streaming worker against the local Kafka broker.

Needs the services up (bash deploy/services.sh up) and the project venv:

    .venv/bin/python deploy/smoke_faust.py [BOOTSTRAP]     # default 127.0.0.1:19092

It creates the source topic up front with kafka-python (the broker has
auto.create.topics.enable=false and faust only creates its *internal* topics:
changelogs, repartition and its assignor topic; a plain `app.topic(...)` that
does not exist is logged as "Ignoring missing topic" and never consumed),
starts `faust worker` for a one-agent app in a child process (this same file,
with the argument `worker`), produces a few messages with kafka-python, waits
until the agent printed each one, then stops the worker with SIGTERM.
Exit status 0 on success.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

BOOTSTRAP = os.environ.get("SMOKE_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
TOPIC = "memledger-smoke-faust"
PARTITIONS = 6
CONSUMED_RE = re.compile(r"CONSUMED (\S+)")


def make_app():
    import faust

    app = faust.App(
        "memledger-smoke-faust",
        broker=f"kafka://{BOOTSTRAP}",
        store="memory://",
        web_enabled=False,  # NB: `faust worker` ignores this; pass --without-web
        topic_partitions=PARTITIONS,  # for the internal topics faust creates
        datadir=os.environ.get("SMOKE_FAUST_DATADIR", tempfile.gettempdir()),
    )
    topic = app.topic(TOPIC, value_type=bytes, value_serializer="raw")

    @app.agent(topic)
    async def consume(stream):
        async for value in stream:
            # faust routes print() through its logger: one string per line
            print(f"CONSUMED {value.decode()}")

    return app


def ensure_topic():
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="smoke-faust")
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
        print(f"created topic {TOPIC} ({PARTITIONS} partitions)")
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def run_check(n_messages: int = 5, timeout: float = 60.0) -> int:
    from kafka import KafkaProducer

    ensure_topic()
    datadir = tempfile.mkdtemp(prefix="smoke-faust-")
    env = dict(os.environ, SMOKE_KAFKA_BOOTSTRAP=BOOTSTRAP, SMOKE_FAUST_DATADIR=datadir)
    worker = subprocess.Popen(
        # --without-web: the `worker` command overrides the app's web_enabled
        # (its --with-web flag defaults to on, binding 0.0.0.0:6066).
        [sys.executable, __file__, "worker", "--without-web", "--loglevel", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout), daemon=True)
    reader.start()

    run_id = uuid.uuid4().hex[:8]
    expected = {f"{run_id}-{i}" for i in range(n_messages)}
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", enable_idempotence=True)
    for value in sorted(expected):
        producer.send(TOPIC, key=value.encode(), value=value.encode())
    producer.flush()
    producer.close()
    print(f"produced {n_messages} messages; waiting for the worker")

    start = time.monotonic()
    seen: set[str] = set()
    while time.monotonic() - start < timeout and worker.poll() is None:
        seen = {m.group(1) for ln in list(lines) for m in CONSUMED_RE.finditer(ln)} & expected
        if seen == expected:
            break
        time.sleep(0.2)
    elapsed = time.monotonic() - start

    worker.send_signal(signal.SIGTERM)
    try:
        rc = worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        rc = worker.wait()
        print("worker did not stop within 30s after SIGTERM; killed")
    reader.join(timeout=5)
    shutil.rmtree(datadir, ignore_errors=True)

    ok = seen == expected
    print(f"consumed {len(seen)}/{n_messages} in {elapsed:.1f}s; worker exit status {rc}")
    if not ok:
        print("----- worker output -----")
        print("".join(lines[-60:]))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        make_app().main()  # argv: <file> worker [faust worker options]
    else:
        if sys.argv[1:]:
            BOOTSTRAP = sys.argv[1]
        sys.exit(run_check())
