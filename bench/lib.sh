# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by its callers
# Shared helpers of the bench/ scripts, scripts/soak and scripts/faults/*: tools, free ports, and
# the processes we started.
# Sourced, not run. Every process started here is recorded by PID and killed by PID on exit;
# nothing is ever killed by name.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# HOOKONCE_PROFILE=debug lets the fault scenarios reuse the test suite's debug build (their
# checks do not depend on speed); benchmarks are always measured on release builds.
PROFILE=${HOOKONCE_PROFILE:-release}
HOOKONCE="$ROOT/target/$PROFILE/hookonce"
LOADGEN="$ROOT/target/$PROFILE/hookonce-loadgen"
BASELINE="$ROOT/target/baseline/release/hookonce-baseline"
# The bare handler: HMAC + one SET NX/XADD script, nothing else (bench/baseline/src/bin/bare.rs).
BARE="$ROOT/target/baseline/release/hookonce-bare"
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

build_release() { # hookonce, the load generator and the Kafka mock (tools/loadgen) in $PROFILE, one cargo build
    if [[ -n ${BENCH_NO_BUILD:-} && -x $HOOKONCE && -x $LOADGEN ]]; then
        log "BENCH_NO_BUILD: measuring the binaries already built"
    else
        local flags=(--locked --workspace --bin hookonce --bin hookonce-loadgen --bin hookonce-kafka-mock)
        [[ $PROFILE == release ]] && flags+=(--release)
        log "cargo build ${flags[*]}"
        (cd "$ROOT" && cargo build "${flags[@]}") >&2
    fi
    [[ $PROFILE == release ]] && warn_stale_order "$HOOKONCE" "$ROOT/build/hot-functions.txt"
    return 0
}

# warn_stale_order BINARY ORDER: a warning when BINARY defines less than nine tenths of the hot
# functions ORDER lists (build.rs hands ORDER to the linker; a toolchain or dependency update
# renames functions, and a build measured with a stale order is slower than the project's);
# bench/hot-functions, which writes the order, sets HOT_FUNCTIONS_WRITING to skip it.
warn_stale_order() {
    [[ -z ${HOT_FUNCTIONS_WRITING:-} && -f $2 ]] || return 0
    python3 "$ROOT/bench/hot_functions.py" check "$1" "$2" 0.9 >/dev/null || true
}

# build_baseline: bench/baseline's hookonce-baseline and hookonce-bare (release), unless
# BENCH_NO_BUILD is set and both are built already.
build_baseline() {
    if [[ -n ${BENCH_NO_BUILD:-} && -x $BASELINE && -x $BARE ]]; then
        return 0
    fi
    log "cargo build --release (bench/baseline)"
    (cd "$ROOT/bench/baseline" && cargo build --release --locked) >&2
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

# wrk with every request a new signed delivery: bench/wrk-signed.lua over a file of requests that
# `hookonce-loadgen requests` signed (wrk's Lua cannot sign fast enough).
WRK_SCRIPT="$ROOT/bench/wrk-signed.lua"
WRK_THREADS=${BENCH_WRK_THREADS:-2}
# BENCH_WRK_CLOSE=1: every request says `Connection: close` (a new connection per request).
WRK_CLOSE=
if [[ ${BENCH_WRK_CLOSE:-0} == 1 ]]; then WRK_CLOSE=close; fi

# make_requests SOURCE COUNT FILE [BODY_BYTES]: COUNT unique signed requests for SOURCE of
# bench/hookonce.toml (Stripe's are signed for now: use them within its 300 s tolerance).
make_requests() {
    timeout 300 "$LOADGEN" requests --config "$ROOT/bench/hookonce.toml" --source "$1" \
        --count "$2" --body-size "${4:-1500}" --out "$3" >&2
}

# seconds_of 10s|2m|30: whole seconds of a duration as the scripts write them
seconds_of() {
    case $1 in
        *ms) echo 1 ;;
        *m) echo $((${1%m} * 60)) ;;
        *s) echo "${1%s}" ;;
        *) echo "$1" ;;
    esac
}

# children_cpu FILE: sets CHILDREN_CPU to the CPU seconds (user + system) of this shell's children
# that have ended so far, from the `times` builtin. It must run in this shell, not in a $(…)
# subshell, whose children are its own; FILE is scratch. The difference around one client run is
# that client's own CPU time.
children_cpu() {
    times >"$1"
    CHILDREN_CPU=$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] } printf "%.3f", s }' "$1")
}

# wrk_run URL REQUESTS DURATION CONNECTIONS OUT_PREFIX [PATH]: one bounded wrk run with --latency;
# wrk's text in OUT_PREFIX.txt, the script's JSON line in OUT_PREFIX.json, wrk's CPU seconds in
# OUT_PREFIX.client.
wrk_run() {
    local url=$1 requests=$2 duration=$3 connections=$4 out=$5 path=${6:-} before
    children_cpu "$out.times"
    before=$CHILDREN_CPU
    timeout $(($(seconds_of "$duration") + 60)) wrk -t"$WRK_THREADS" -c"$connections" -d"$duration" \
        --latency -s "$WRK_SCRIPT" "$url" -- "$requests" "$WRK_THREADS" "$path" ${WRK_CLOSE:+"$WRK_CLOSE"} >"$out.txt" 2>&1
    children_cpu "$out.times"
    python3 -c "print(round($CHILDREN_CPU - $before, 3))" >"$out.client"
    rm -f "$out.times"
    grep '^{"client":"wrk"' "$out.txt" >"$out.json"
}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# Instructions counted by callgrind (bench/instructions, bench/proxy/instructions,
# bench/redis-instructions).
# callgrind_command DIR: sets CALLGRIND to the valgrind command line that runs a server with its
# counters written into DIR (each dump a callgrind.out.N there).
callgrind_command() {
    CALLGRIND=(valgrind --tool=callgrind --callgrind-out-file="$1/callgrind.out" --dump-instr=no
        --separate-threads=no ${INSTR_CACHE:+--cache-sim=yes})
}

# callgrind_window PID SECONDS NAME COUNT_COMMAND…: zeroes the counters of PID (a process under
# callgrind), lets it run SECONDS, then dumps them as NAME; sets COUNTED to what COUNT_COMMAND
# printed after, less what it printed before (the requests or events of the window).
callgrind_window() {
    local pid=$1 seconds=$2 name=$3 before after
    shift 3
    before=$("$@")
    callgrind_control --zero "$pid" >/dev/null
    sleep "$seconds"
    callgrind_control --dump="$name" "$pid" >/dev/null
    after=$("$@")
    COUNTED=$((after - before))
}

# newest_dump DIR: the callgrind dump written last in DIR
newest_dump() {
    find "$1" -maxdepth 1 -name 'callgrind.out.*' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-
}
