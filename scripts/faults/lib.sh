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

# audit NAME SOURCE REDIS_PORT [more audit arguments…]: 0 lost, 0 duplicated and every event
# acknowledged, or fail.
audit() {
    local name=$1 source=$2 port=$3
    shift 3
    if ! timeout 120 "$LOADGEN" audit --config "$FAULT_CONFIG" --source "$source" \
        --redis-url "redis://127.0.0.1:$port" --record "$WORK"/*.rec --json "$WORK/audit.json" \
        "$@" >"$WORK/audit.txt" 2>&1; then
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

# start_rabbitmq DIR: a RabbitMQ node of this scenario's own, Debian's rabbitmq-server in the
# foreground (as tests/it/support/rabbitmq.rs starts it), with its own node name, HOME, data and
# log directories in DIR, an AMQP port, a distribution port and an epmd on a port of its own, so
# that it meets no other node on the machine. Returns when the broker says it has started (5-20 s:
# an Erlang VM and the broker's boot steps). Sets RABBIT_PORT and RABBIT_URL (guest/guest, which
# RabbitMQ accepts from loopback only). Declaring an exchange and a queue is the caller's
# (`hookonce-loadgen amqp-declare`). Everything is stopped by PID: stop_rabbitmq, or the EXIT
# trap (cleanup_started).
start_rabbitmq() {
    local dir=$1 epmd_port dist_port deadline
    # Each step that can fail returns: callers may run this under `|| fail`, where set -e is off.
    need_file /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
    mkdir -p "$dir" || return 1
    RABBIT_DIR=$dir
    RABBIT_PORT=$(free_port)
    dist_port=$(free_port)
    epmd_port=$(free_port)
    RABBIT_URL="amqp://guest:guest@127.0.0.1:$RABBIT_PORT/%2f"
    # Started first, on its own port: the node would otherwise start an epmd of its own that
    # outlives it, or register with the machine's.
    epmd -port "$epmd_port" >"$dir/epmd.log" 2>&1 &
    EPMD_PID=$!
    STARTED_PIDS+=("$EPMD_PID")
    wait_port "$epmd_port" || return 1
    echo '[].' >"$dir/enabled_plugins"
    # No configuration files (paths that do not exist: /etc/rabbitmq belongs to the package's own
    # service, and a rabbitmq.conf costs seconds of translation at boot). The start script (not
    # /usr/sbin's wrapper, which switches to the rabbitmq user) forwards SIGTERM to the VM and
    # waits for it.
    (
        cd "$dir" || exit
        exec env HOME="$dir" RABBITMQ_NODENAME="hookonce-fault-$$@localhost" \
            RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$RABBIT_PORT" \
            RABBITMQ_DIST_PORT="$dist_port" ERL_EPMD_PORT="$epmd_port" \
            RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
            RABBITMQ_PID_FILE="$dir/node.pid" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
            RABBITMQ_CONFIG_FILE="$dir/none" RABBITMQ_ADVANCED_CONFIG_FILE="$dir/none.config" \
            RABBITMQ_CONF_ENV_FILE="$dir/none-env" \
            /usr/lib/rabbitmq/bin/rabbitmq-server
    ) >"$dir/server.log" 2>&1 &
    RABBIT_PID=$!
    STARTED_PIDS+=("$RABBIT_PID")
    # The AMQP port opens before the last boot steps; this line on stdout comes after them.
    deadline=$((SECONDS + ${RABBIT_BOOT_SECONDS:-90}))
    until grep -q 'Starting broker... completed' "$dir/server.log" 2>/dev/null; do
        if ! kill -0 "$RABBIT_PID" 2>/dev/null || ((SECONDS >= deadline)); then
            tail -n 20 "$dir/server.log" >&2
            echo "error: rabbitmq-server did not start (log in $dir/server.log)" >&2
            return 1
        fi
        sleep 0.1
    done
    wait_port "$RABBIT_PORT" || return 1
    # The VM as well, should the start script ever go before it.
    STARTED_PIDS+=("$(cat "$dir/node.pid")")
}

# stop_rabbitmq: the node (SIGTERM to the VM its pid file names and to the start script, which
# waits for the VM), then its epmd.
stop_rabbitmq() {
    stop_pid "$(cat "$RABBIT_DIR/node.pid")" TERM
    stop_pid "$RABBIT_PID" TERM
    stop_pid "$EPMD_PID" TERM
}
