# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by its callers
# Shared helpers of bench/run and scripts/faults/*: tools, free ports, processes we started.
# Sourced, not run. Every process started here is recorded by PID and killed by PID on exit;
# nothing is ever killed by name.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# HOOKONCE_PROFILE=debug lets the fault scenarios reuse the test suite's debug build (their
# checks do not depend on speed); benchmarks are always measured on release builds.
PROFILE=${HOOKONCE_PROFILE:-release}
HOOKONCE="$ROOT/target/$PROFILE/hookonce"
LOADGEN="$ROOT/target/$PROFILE/hookonce-loadgen"
BASELINE="$ROOT/target/baseline/release/hookonce-baseline"
# need_command, need_file: Debian packages when a tool is missing (and /usr/sbin on PATH).
# shellcheck source=scripts/lib/install.sh
source "$ROOT/scripts/lib/install.sh"
need_command python3 python3 # free_port and the scenarios' JSON checks

STARTED_PIDS=()
cleanup_started() {
    local pid
    for pid in "${STARTED_PIDS[@]}"; do
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${STARTED_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap cleanup_started EXIT

log() { printf '==> %s\n' "$*" >&2; }

build_release() { # hookonce and the load generator (tools/loadgen) in $PROFILE, one cargo build
    local flags=(--locked --workspace --bin hookonce --bin hookonce-loadgen)
    [[ $PROFILE == release ]] && flags+=(--release)
    log "cargo build ${flags[*]}"
    (cd "$ROOT" && cargo build "${flags[@]}") >&2
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_port() { # wait_port PORT [SECONDS]: until something accepts on 127.0.0.1:PORT
    local port=$1 deadline=$((SECONDS + ${2:-10}))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            echo "error: nothing listens on port $port" >&2
            return 1
        fi
        sleep 0.05
    done
}

# start_redis DIR PORT [extra redis-server arguments…]: sets REDIS_PID
start_redis() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' \
        --appendonly no --daemonize no "$@" >>"$dir/redis.log" 2>&1 &
    REDIS_PID=$!
    STARTED_PIDS+=("$REDIS_PID")
    wait_port "$port"
}

# start_hookonce CONFIG PORT METRICS_PORT REDIS_PORT LOG: sets HOOKONCE_PID
start_hookonce() {
    HOOKONCE__SERVER__LISTEN="127.0.0.1:$2" HOOKONCE__SERVER__METRICS_LISTEN="127.0.0.1:$3" \
        HOOKONCE__STORE__REDIS_URL="redis://127.0.0.1:$4" \
        "$HOOKONCE" serve --config "$1" --log-format json >>"$5" 2>&1 &
    HOOKONCE_PID=$!
    STARTED_PIDS+=("$HOOKONCE_PID")
    wait_port "$2"
}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
