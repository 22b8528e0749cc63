#!/usr/bin/env bash
# lattice-server builds side by side: the server's CPU per request
# (its threads' schedstat over a fixed number of requests) under
# redis-benchmark, for a change to the hot path measured against the build
# before it. Each server runs alone pinned to CPU 0 with one worker,
# redis-benchmark pinned to CPU 1; ROUNDS rounds alternate the builds, and
# every run prints its own line (plus the load average before it), so the
# spread is visible.
#
#   bash bench/ab-cpu.sh OLD_BIN NEW_BIN [MORE_BINS...]
#   TESTS="set get" PIPELINES="16 1" ROUNDS=5 bash bench/ab-cpu.sh A B
#
# A build is named by its file's name in the output (copy each build
# somewhere first: cargo replaces target/release/lattice-server).
#
# TESTS: redis-benchmark tests (set, get, sadd, hset, zadd, lpush, ...);
# REQUESTS (2000000 at pipeline 16, a tenth at pipeline 1), CLIENTS (50),
# KEYSPACE (-r, 100000). The keyspace is filled first (SET, HSET, SADD,
# ZADD of every key once) so reads find keys.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILDS=("$@")
TESTS="${TESTS:-set get}"
PIPELINES="${PIPELINES:-16 1}"
ROUNDS="${ROUNDS:-3}"
REQUESTS="${REQUESTS:-2000000}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
SERVER_CPU=0
CLIENT_CPU=1
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

bench() {
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$1" -c "$CLIENTS" -d 16 -r "$KEYSPACE" -q "${@:2}" >/dev/null
}

port=$(free_port)
printf '%-20s %-5s %-3s %-5s %10s %6s\n' build test P round "cpu ns/req" load1
for round in $(seq 1 "$ROUNDS"); do
    for LATTICE in "${BUILDS[@]}"; do
        build=$(basename "$LATTICE")
        start_server lattice "$port"
        bench "$port" -P 16 -n $((KEYSPACE * 4)) -t set,hset,sadd,zadd
        for p in $PIPELINES; do
            n=$REQUESTS
            [[ $p == 1 ]] && n=$((REQUESTS / 10))
            for t in $TESTS; do
                load=$(cut -d' ' -f1 /proc/loadavg)
                before=$(cpu_ns "$SERVER_PID")
                bench "$port" -P "$p" -n "$n" -t "$t"
                after=$(cpu_ns "$SERVER_PID")
                awk -v b="$build" -v t="$t" -v p="$p" -v r="$round" -v c=$((after - before)) \
                    -v n="$n" -v l="$load" \
                    'BEGIN { printf "%-20s %-5s %-3s %-5s %10.0f %6s\n", b, t, p, r, c / n, l }'
            done
        done
        stop_server
    done
done
