#!/usr/bin/env bash
# deploy/redis.sh start|stop|status — a throw-away Redis (Debian's package)
# for tests on 127.0.0.1:16379, no persistence, daemonized; pid file and log
# in $MEMLEDGER_RUN_DIR/redis (default .run/redis).
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

R_DIR="$RUN_DIR/redis"
PID_FILE="$R_DIR/redis.pid"
R_LOG="$R_DIR/redis.log"

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    die "redis-server/redis-cli not installed (run deploy/install.sh)"
fi

cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
is_ready() { [ "$(cli ping 2>/dev/null)" = PONG ]; }

start() {
    if pid_alive "$PID_FILE" && is_ready; then
        log "already running (pid $(cat "$PID_FILE"))"; return 0
    elif is_ready; then
        die "something else already answers on 127.0.0.1:$REDIS_PORT"
    fi
    make_run_dir
    mkdir -p "$R_DIR"
    log "starting on 127.0.0.1:$REDIS_PORT"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
        --daemonize yes --pidfile "$PID_FILE" --logfile "$R_LOG" --dir "$R_DIR" \
        --save '' --appendonly no \
        || { log_tail "$R_LOG"; die "redis-server failed to start"; }
    local i
    for ((i = 0; i < 100; i++)); do is_ready && [ -s "$PID_FILE" ] && break; sleep 0.1; done
    is_ready || { log_tail "$R_LOG"; die "no PONG from 127.0.0.1:$REDIS_PORT"; }
    log "ready on 127.0.0.1:$REDIS_PORT (pid $(cat "$PID_FILE"))"
}

stop() {
    if ! pid_alive "$PID_FILE"; then
        log "not running"; rm -f "$PID_FILE"; return 0
    fi
    local pid; pid="$(cat "$PID_FILE")"
    log "stopping (pid $pid)"
    cli shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    wait_pid_gone "$pid" 20 || { kill -KILL "$pid" 2>/dev/null || true; wait_pid_gone "$pid" 5; }
    rm -f "$PID_FILE"
    log "stopped"
}

status() {
    if pid_alive "$PID_FILE" && is_ready; then
        echo "redis: running on 127.0.0.1:$REDIS_PORT (pid $(cat "$PID_FILE"))"
    else
        echo "redis: stopped"; return 3
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
