#!/usr/bin/env bash
# deploy/services.sh up|down|status|env — the local services the tests use:
# PostgreSQL 127.0.0.1:55432, Redis 127.0.0.1:16379, Kafka 3.9 127.0.0.1:19092 (other ports:
# DEPLOY_*_PORT, see deploy/common.sh).
#   up      install what is missing (deploy/install.sh), then start all three
#   down    stop all three (each one even if another fails)
#   status  one line per service; non-zero if any is not running
#   env     print `export` lines for the tests:  eval "$(bash deploy/services.sh env)"
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SERVICES=(postgres redis kafka)

up() {
    bash "$DEPLOY_DIR/install.sh"
    local s
    for s in "${SERVICES[@]}"; do bash "$DEPLOY_DIR/$s.sh" start; done
}

down() {
    local s rc=0
    for s in kafka redis postgres; do bash "$DEPLOY_DIR/$s.sh" stop || rc=1; done
    return $rc
}

status() {
    local s rc=0
    for s in "${SERVICES[@]}"; do bash "$DEPLOY_DIR/$s.sh" status || rc=1; done
    return $rc
}

env_lines() {
    cat <<EOF
export MEMLEDGER_TEST_KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
export MEMLEDGER_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$PG_PORT/$PG_DB
export MEMLEDGER_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
EOF
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    env) env_lines ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
