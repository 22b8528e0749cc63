#!/usr/bin/env bash
# Where a replicated SET goes on this box: the CPU time per request that the
# master and its replica each spend (perf stat task-clock over the run),
# Redis -> Redis against LatticeDB -> LatticeDB, with bench/replication.sh's
# arrangement (master on SERVER_CPU; redis-benchmark and the replica share
# CLIENT_CPU, so the replica's cost is taken from the load generator).
# CPU time per request moves much less with machine noise than throughput.
#
#   bench/replication-cpu.sh
#   REQUESTS=100000 bench/replication-cpu.sh
#
# Environment: REQUESTS (300000), VALUE_SIZE (8192), SERVER_CPU (0),
# CLIENT_CPU (1), SKIP_BUILD. Needs perf.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-300000}"
VALUE_SIZE="${VALUE_SIZE:-8192}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
LATTICE="$ROOT/target/release/lattice-server"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; cleanup' EXIT

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

# server KIND CPU PORT DIR [replicaof args]: starts one, prints its pid.
server() {
    local kind="$1" cpu="$2" port="$3" dir="$4"
    shift 4
    mkdir -p "$dir"
    if [[ "$kind" == redis ]]; then
        taskset -c "$cpu" "$REDIS_SERVER" --port "$port" --save "" --appendonly no \
            --dir "$dir" --daemonize no "$@" >"$dir/log" 2>&1 &
    else
        taskset -c "$cpu" "$LATTICE" --port "$port" --server-threads 1 --save "" \
            --dir "$dir" "$@" >"$dir/log" 2>&1 &
    fi
    echo $!
}

# us_per_request FILE: perf's task-clock (ms) over REQUESTS, in microseconds.
us_per_request() { awk -F, -v n="$REQUESTS" '/task-clock/ { printf "%.2f", $1 * 1000 / n }' "$1"; }

run() {
    local kind="$1" mport rport mp rp pm pr rps
    mport=$(free_port)
    mp=$(server "$kind" "$SERVER_CPU" "$mport" "$WORK/$kind-m")
    PIDS+=("$mp")
    wait_port "$mport"
    rport=$(free_port)
    rp=$(server "$kind" "$CLIENT_CPU" "$rport" "$WORK/$kind-r" --replicaof 127.0.0.1 "$mport")
    PIDS+=("$rp")
    wait_port "$rport"
    until redis-cli -p "$rport" INFO replication | grep -q 'master_link_status:up'; do sleep 0.1; done
    perf stat -x, -e task-clock -p "$mp" -o "$WORK/m.perf" &
    pm=$!
    perf stat -x, -e task-clock -p "$rp" -o "$WORK/r.perf" &
    pr=$!
    sleep 0.2
    rps=$(taskset -c "$CLIENT_CPU" redis-benchmark -p "$mport" -t set -d "$VALUE_SIZE" -c 50 \
        -n "$REQUESTS" -r 100000 --csv 2>/dev/null | awk -F'"' '/^"SET"/ { print $4 }')
    kill -INT "$pm" "$pr"
    wait "$pm" "$pr" 2>/dev/null || true
    printf '%-8s %9.0f SET/s   master %6s us/request   replica %6s us/request\n' \
        "$kind" "$rps" "$(us_per_request "$WORK/m.perf")" "$(us_per_request "$WORK/r.perf")"
    kill "$mp" "$rp" 2>/dev/null || true
    wait "$mp" "$rp" 2>/dev/null || true
}

echo "== replication CPU: SET $VALUE_SIZE B x $REQUESTS, 50 clients (master on CPU $SERVER_CPU, benchmark and replica on CPU $CLIENT_CPU)"
run redis
run lattice
