# shellcheck shell=bash disable=SC2034
# deploy/common.sh — shared settings for the deploy/*.sh service scripts.
# Sourced, not run. Derives every path from this file's location, so the
# scripts work from any clone and any working directory.
#
#   MEMLEDGER_RUN_DIR   where service data, logs and pid files go
#                       (default: <repo>/.run, git-ignored)
#   DEPLOY_KAFKA_PORT, DEPLOY_KAFKA_CONTROLLER_PORT, DEPLOY_PG_PORT, DEPLOY_REDIS_PORT
#                       other ports, for a second set of services beside the
#                       first (another clone, its own MEMLEDGER_RUN_DIR)

DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$DEPLOY_DIR/.." && pwd)"
RUN_DIR="${MEMLEDGER_RUN_DIR:-$REPO_ROOT/.run}"

# Ports (loopback only; deliberately not the defaults).
KAFKA_PORT="${DEPLOY_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${DEPLOY_KAFKA_CONTROLLER_PORT:-19093}"
PG_PORT="${DEPLOY_PG_PORT:-55432}"
PG_DB=memledger
REDIS_PORT="${DEPLOY_REDIS_PORT:-16379}"

KAFKA_LIBS="$DEPLOY_DIR/.cache/kafka-libs"

log() { echo "[$(basename "$0" .sh)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Print the last lines of a log file to stderr (for failure messages).
log_tail() {
    [ -f "$1" ] || return 0
    echo "----- last lines of $1 -----" >&2
    tail -n "${2:-40}" "$1" >&2
    echo "-----" >&2
}

# The run dir must be traversable by the postgres OS user too.
make_run_dir() {
    mkdir -p "$RUN_DIR"
    chmod a+rx "$RUN_DIR" 2>/dev/null || true
}

# True if the pid in file $1 is a live process.
pid_alive() {
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Wait up to $2 seconds for pid $1 to exit; returns 1 if it is still alive.
wait_pid_gone() {
    local pid="$1" i
    for ((i = 0; i < $2 * 5; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    return 1
}

# Download the Kafka broker jars from Maven Central (once per version of
# deploy/kafka/pom.xml; atomically).
ensure_kafka_libs() {
    local stamp; stamp="$(cksum <"$DEPLOY_DIR/kafka/pom.xml")"
    [ "$(cat "$KAFKA_LIBS/.complete" 2>/dev/null)" = "$stamp" ] && return 0
    command -v mvn >/dev/null || die "mvn not found (run deploy/install.sh)"
    log "downloading Kafka jars with Maven into $KAFKA_LIBS"
    local tmp="$KAFKA_LIBS.tmp.$$" mvn_log="$DEPLOY_DIR/.cache/mvn.log"
    mkdir -p "$DEPLOY_DIR/.cache"
    rm -rf "$tmp"
    if ! mvn -B -Dstyle.color=never -f "$DEPLOY_DIR/kafka/pom.xml" \
            dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
        log_tail "$mvn_log"
        rm -rf "$tmp"
        die "Maven could not fetch the Kafka jars"
    fi
    echo "$stamp" >"$tmp/.complete"
    rm -rf "$KAFKA_LIBS"
    mv "$tmp" "$KAFKA_LIBS"
}
