#!/usr/bin/env bash
# deploy/install.sh — install what the local test services need, idempotently
# and quietly: Debian packages (PostgreSQL, Redis, Chromium for the HTML report test,
# and Java/Maven if absent) only when missing, and the Kafka broker jars (Maven
# Central) when missing.
# Safe to run on every `services.sh up`; a no-op when all is in place.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

missing=()
for pkg in postgresql redis-server redis-tools; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' \
        || missing+=("$pkg")
done
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
# a headless browser for the test that opens the HTML erasure report (`memledger trace --html`)
command -v chromium >/dev/null || missing+=(chromium)

if ((${#missing[@]})); then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || die "need root to install: ${missing[*]}"
        sudo=(sudo)
    fi
    log "installing Debian packages: ${missing[*]}"
    apt_log="$(mktemp)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${sudo[@]}" apt-get update -qq &&
           "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
           >"$apt_log" 2>&1; then
        log_tail "$apt_log"
        die "apt-get failed"
    fi
    rm -f "$apt_log"
fi

ensure_kafka_libs
