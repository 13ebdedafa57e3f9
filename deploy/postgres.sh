#!/usr/bin/env bash
# deploy/postgres.sh start|stop|status — a throw-away PostgreSQL (Debian's
# package, 15 on Debian 12) for tests on 127.0.0.1:55432, trust auth,
# database "memledger", superuser "postgres". Data and log live in
# $MEMLEDGER_RUN_DIR/postgres (default .run/postgres). TCP only (no unix socket).
# Run as root, the server runs as the "postgres" OS user; otherwise as yourself.
# Durability is off (fsync=off): this is test data only.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Run a command as the database's OS user.
as_pg() {
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# The server's OS user must reach its data dir. If the run dir sits in a
# private folder (e.g. a clone under /root), keep the data in /tmp instead.
pg_dir() {
    make_run_dir
    if as_pg test -x "$RUN_DIR"; then
        echo "$RUN_DIR/postgres"
    else
        echo "${TMPDIR:-/tmp}/memledger-postgres-$(echo "$RUN_DIR" | cksum | cut -d' ' -f1)"
    fi
}
PG_DIR="$(pg_dir)"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"

PG_BIN="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V | tail -n 1 || true)"
[ -n "$PG_BIN" ] || die "PostgreSQL server not installed (run deploy/install.sh)"

pg_ctl() { as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" "$@"; }
is_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }
psql_q() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -XAtq "$@"; }

init_cluster() {
    [ "$PG_DIR" = "$RUN_DIR/postgres" ] || log "the postgres user cannot reach $RUN_DIR; using $PG_DIR"
    mkdir -p "$PG_DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DIR"; fi
    as_pg test -w "$PG_DIR" || die "the postgres OS user cannot write $PG_DIR (check the permissions of its parent folders)"
    log "initdb in $PG_DATA"
    as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust \
        --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$PG_DIR/initdb.log" 2>&1 \
        || { log_tail "$PG_DIR/initdb.log"; die "initdb failed"; }
    as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null <<EOF

# --- memory-ledger test settings (deploy/postgres.sh) ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    as_pg tee "$PG_DATA/pg_hba.conf" >/dev/null <<EOF
# TYPE  DATABASE  USER  ADDRESS        METHOD
host    all       all   127.0.0.1/32   trust
host    all       all   ::1/128        trust
EOF
}

start() {
    [ -f "$PG_DATA/PG_VERSION" ] || init_cluster
    if pg_ctl status >/dev/null 2>&1; then
        log "already running"
    elif is_ready; then
        die "something else already answers on 127.0.0.1:$PG_PORT"
    else
        log "starting on 127.0.0.1:$PG_PORT"
        pg_ctl -l "$PG_LOG" -w -t 60 start >/dev/null \
            || { log_tail "$PG_LOG"; die "PostgreSQL did not start"; }
    fi
    local i
    for ((i = 0; i < 60; i++)); do is_ready && break; sleep 0.5; done
    is_ready || { log_tail "$PG_LOG"; die "pg_isready failed on 127.0.0.1:$PG_PORT"; }
    if [ "$(psql_q -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]; then
        psql_q -d postgres -c "CREATE DATABASE $PG_DB"
        log "created database $PG_DB"
    fi
    log "ready on 127.0.0.1:$PG_PORT"
}

stop() {
    if [ -f "$PG_DATA/PG_VERSION" ] && pg_ctl status >/dev/null 2>&1; then
        log "stopping"
        pg_ctl -m fast -w -t 60 stop >/dev/null
        log "stopped"
    else
        log "not running"
    fi
}

status() {
    if [ -f "$PG_DATA/PG_VERSION" ] && pg_ctl status >/dev/null 2>&1; then
        if is_ready; then echo "postgres: running on 127.0.0.1:$PG_PORT"
        else echo "postgres: running but not accepting connections"; return 1; fi
    else
        echo "postgres: stopped"; return 3
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
