# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by its callers
# Shared by scripts/faults/*: a Redis, hookonce and the load generator on free loopback ports,
# and the audit that decides pass or fail. Sourced, not run. Builds nothing: run
# `cargo build --release --bin hookonce --bin hookonce-loadgen` first (scripts/faults/all does).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../bench/lib.sh"
FAULT_CONFIG="$ROOT/scripts/faults/hookonce.toml"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hookonce-fault.XXXXXX")

# stop_pid PID [SIGNAL]: signal one process we started, reap it, and forget it.
stop_pid() {
    local pid=$1 signal=${2:-TERM} kept=() p
    kill "-$signal" "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${STARTED_PIDS[@]}"; do
        [[ $p == "$pid" ]] || kept+=("$p")
    done
    STARTED_PIDS=("${kept[@]}")
}

# load_bg NAME [loadgen run arguments…]: the generator in the background (LOAD_PID), with its
# record and summary in $WORK/NAME.rec and $WORK/NAME.json.
load_bg() {
    local name=$1
    shift
    "$LOADGEN" run --config "$FAULT_CONFIG" --record "$WORK/$name.rec" --json "$WORK/$name.json" \
        --progress 5s "$@" >"$WORK/$name.txt" 2>"$WORK/$name.err" &
    LOAD_PID=$!
    STARTED_PIDS+=("$LOAD_PID")
}

# probe SOURCE PORT: one delivery; prints "STATUS LATENCY_MS"
probe() {
    local out="$WORK/probe-$RANDOM$RANDOM"
    "$LOADGEN" run --config "$FAULT_CONFIG" --source "$1" --url "http://127.0.0.1:$2" \
        --events 1 --concurrency 1 --timeout 5s --progress 0s --record "$out.rec" \
        --json "$out.json" >/dev/null 2>&1
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(max(j["statuses"], key=int), j["latency_us"]["max"] / 1000)' "$out.json"
}

# audit NAME SOURCE REDIS_PORT: 0 lost, 0 duplicated and every event acknowledged, or fail.
audit() {
    local name=$1 source=$2 port=$3
    if ! timeout 120 "$LOADGEN" audit --config "$FAULT_CONFIG" --source "$source" \
        --redis-url "redis://127.0.0.1:$port" --record "$WORK"/*.rec --json "$WORK/audit.json" \
        >"$WORK/audit.txt" 2>&1; then
        cat "$WORK/audit.txt" >&2
        fail "$name: the audit found lost or duplicated events"
    fi
    local unacked
    unacked=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["unacknowledged"])' "$WORK/audit.json")
    sed -n 1,2p "$WORK/audit.txt" >&2
    ((unacked == 0)) || fail "$name: $unacked events were never acknowledged despite retries"
}

fail() {
    echo "FAIL $*" >&2
    echo "  (logs in $WORK)" >&2
    exit 1
}

pass() {
    echo "PASS $*"
    rm -rf "$WORK"
}
