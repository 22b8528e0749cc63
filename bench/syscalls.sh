#!/usr/bin/env bash
# The kernel path per request: syscalls by kind, context switches and CPU
# time per request, lattice-server (one worker) beside redis-server 7.0.
#
# Each server runs alone pinned to CPU 0, redis-benchmark is pinned to CPU 1
# (as bench/compare.sh). For every client count and test, two runs:
#   - one under `perf stat -e 'raw_syscalls:sys_enter,syscalls:sys_enter_*'`
#     (all of the server's threads): syscalls per request, by kind;
#   - one without perf (its tracepoints cost CPU on every syscall): CPU time
#     per request (schedstat ns; utime/stime split from /proc/PID/stat) and
#     context switches per request (voluntary / involuntary, summed over the
#     server's threads from /proc/PID/task/*/status).
#
# Usage:
#   bench/syscalls.sh                         # release build must exist
#   CLIENT_LIST="1 10 50" TESTS="get set" REQUESTS=200000 PIPE=1 bench/syscalls.sh
#   SERVERS="lattice" LATTICE=/path/to/lattice-server bench/syscalls.sh
#   LATTICE_ARGS="--hz 10" bench/syscalls.sh        # extra lattice arguments
#   SERVERS="redis lattice lattice-uring"   # lattice-uring: $LATTICE with
#       `--io-uring yes` (server/uring.rs); lattice: `--io-uring no` (epoll)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-200000}"
CLIENT_LIST="${CLIENT_LIST:-1 10 50}"
TESTS="${TESTS:-get set}"
PIPE="${PIPE:-1}"
SERVERS="${SERVERS:-redis lattice}"
KEYSPACE="${KEYSPACE:-100000}"
CLIENTS=50 # lib.sh's default; each run passes its own -c
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="${LATTICE:-$ROOT/target/release/lattice-server}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

# ctx PID: "voluntary involuntary" context switches over all its threads.
ctx() {
    cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt/ { v += $2 } /^nonvoluntary_ctxt/ { n += $2 } END { print v, n }'
}

# ticks PID: "utime stime" in clock ticks (the whole process).
ticks() { awk '{ print $14, $15 }' /proc/"$1"/stat; }

bench_run() {
    local port="$1" c="$2" t="$3"
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -c "$c" -n "$REQUESTS" -d 16 \
        -r "$KEYSPACE" -P "$PIPE" -t "$t" --csv -q 2>/dev/null |
        awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }'
}

# syscalls NAME PORT C TEST: the run under perf; prints "total kinds", kinds
# being "name=per_request" for every syscall of at least 0.005 per request.
syscalls() {
    local name="$1" port="$2" c="$3" t="$4" f="$WORK/perf.$1.$3.$4" perf_pid ack
    rm -f "$WORK/ctl" "$WORK/ack"
    mkfifo "$WORK/ctl" "$WORK/ack"
    # Events start disabled and are enabled through the control fifo; the ack
    # says they count (opening ~700 events per thread takes seconds on a
    # loaded machine, and a SIGINT during that set-up is lost).
    perf stat -x, -o "$f" -D -1 --control "fifo:$WORK/ctl,$WORK/ack" \
        -e 'raw_syscalls:sys_enter,syscalls:sys_enter_*' -p "$SERVER_PID" 2>/dev/null &
    perf_pid=$!
    exec 8>"$WORK/ctl" 9<"$WORK/ack"
    echo enable >&8
    read -r ack <&9
    bench_run "$port" "$c" "$t" >/dev/null
    echo disable >&8
    read -r ack <&9
    exec 8>&- 9<&-
    while kill -0 "$perf_pid" 2>/dev/null; do
        kill -INT "$perf_pid" 2>/dev/null || true
        sleep 0.2
    done
    wait "$perf_pid" || true
    awk -F, -v n="$REQUESTS" '
        $3 == "raw_syscalls:sys_enter" { total = $1 / n }
        $3 ~ /^syscalls:sys_enter_/ && $1 / n >= 0.005 {
            k = $3; sub(/^syscalls:sys_enter_/, "", k); kinds = kinds sprintf(" %s=%.3f", k, $1 / n)
        }
        END { printf "%.3f%s\n", total, kinds }' "$f"
}

# clean NAME PORT C TEST: the run without perf; prints
# "rps cpu_us_per_req sys_share vol_per_req invol_per_req".
clean() {
    local port="$2" c="$3" t="$4" c0 c1 x0 x1 k0 k1 rps
    c0="$(cpu_ns "$SERVER_PID")" x0="$(ctx "$SERVER_PID")" k0="$(ticks "$SERVER_PID")"
    rps="$(bench_run "$port" "$c" "$t")"
    c1="$(cpu_ns "$SERVER_PID")" x1="$(ctx "$SERVER_PID")" k1="$(ticks "$SERVER_PID")"
    awk -v n="$REQUESTS" -v rps="$rps" -v c0="$c0" -v c1="$c1" -v x0="$x0" -v x1="$x1" \
        -v k0="$k0" -v k1="$k1" 'BEGIN {
        split(x0, a, " "); split(x1, b, " "); split(k0, u, " "); split(k1, w, " ")
        us = w[1] - u[1]; sy = w[2] - u[2]
        printf "%s %.2f %.0f%% %.3f %.3f\n", rps, (c1 - c0) / n / 1000,
            (us + sy > 0 ? 100 * sy / (us + sy) : 0), (b[1] - a[1]) / n, (b[2] - a[2]) / n
    }'
}

printf '| server | -c | test | rps | CPU us/req | kernel share | vol cs/req | invol cs/req | syscalls/req | by kind (per request) |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for c in $CLIENT_LIST; do
    for t in $TESTS; do
        for name in $SERVERS; do
            port="$(free_port)"
            if [[ $name == lattice* ]]; then
                uring=no
                [[ $name == lattice-uring ]] && uring=yes
                # shellcheck disable=SC2086
                taskset -c "$SERVER_CPU" "$LATTICE" --port "$port" --io-uring "$uring" \
                    --server-threads 1 --save "" --appendonly no --dir "$WORK" \
                    ${LATTICE_ARGS:-} >"$WORK/lattice.log" 2>&1 &
                SERVER_PID=$!
                wait_port "$port"
            else
                start_server "$name" "$port"
            fi
            read -r rps cpu sys vol invol <<<"$(clean "$name" "$port" "$c" "$t")"
            read -r total kinds <<<"$(syscalls "$name" "$port" "$c" "$t")"
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$c" \
                "${t^^}" "$rps" "$cpu" "$sys" "$vol" "$invol" "$total" "$kinds"
            stop_server
        done
    done
done
