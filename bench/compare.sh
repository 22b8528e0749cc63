#!/usr/bin/env bash
# Compares lattice-server with redis-server (Debian's /usr/bin/redis-server):
# throughput of SET/GET at pipeline 1 and 16 (requests per second, the
# server's CPU per request and redis-benchmark's p99 latency), and memory per
# key after loading 1,000,000 distinct keys with 16-byte values.
#
# Each server runs alone, pinned to CPU 0 (`taskset -c 0`; lattice with one
# worker thread), and redis-benchmark is pinned to CPU 1, so both servers get
# exactly one core. Usage:
#
#   bench/compare.sh                 # full run
#   ROUNDS=5 REQUESTS=200000 bench/compare.sh
#   SKIP_BUILD=1 SKIP_MEM=1 bench/compare.sh
#
# Environment: REQUESTS (per pipelined test, 400000), REQUESTS_P1 (100000),
# ROUNDS (3; the median is shown), CLIENTS (50), KEYSPACE
# (-r, 100000), KEYS (memory test, 1000000), SKIP_BUILD, SKIP_MEM, SKIP_RPS,
# SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
KEYS="${KEYS:-1000000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="${LATTICE:-$ROOT/target/release/lattice-server}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

# Writes the RESP stream that SETs KEYS distinct 16-byte keys to 16-byte values.
make_load_file() {
    python3 - "$KEYS" >"$WORK/load.resp" <<'EOF'
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
val = b"v" * 16
chunk = []
for i in range(n):
    k = b"key:%012d" % i
    chunk.append(b"*3\r\n$3\r\nSET\r\n$16\r\n%s\r\n$16\r\n%s\r\n" % (k, val))
    if len(chunk) == 10000:
        out.write(b"".join(chunk)); chunk = []
out.write(b"".join(chunk))
EOF
}

# mem NAME: loads the keys; writes "bytes_per_key peak_bytes_per_key" to
# $WORK/mem.NAME.
mem() {
    load_rss "$1" "$WORK/load.resp" "$KEYS"
    read -r before peak now <"$WORK/rss.$1"
    awk -v b="$before" -v a="$now" -v p="$peak" -v n="$KEYS" \
        'BEGIN { if (a == "nan") print "nan nan"; else printf "%.1f %.1f\n", (a-b)*1024/n, (p-b)*1024/n }' >"$WORK/mem.$1"
}

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi


TESTS="set get"

# one_test PORT TEST PIPELINE: "rps p99_ms" of one test on the running server.
one_test() { rps_p99 "$@"; }

if [[ -z "${SKIP_RPS:-}" ]]; then
    declare -A R L RC LC RP LP
    run_rounds
    rps_table 12
fi

if [[ -z "${SKIP_MEM:-}" ]]; then
    make_load_file
    mem redis
    mem lattice
    read -r rb rp <"$WORK/mem.redis"
    read -r lb lp <"$WORK/mem.lattice"
    printf '\nmemory, %s keys of 16-byte keys and values (RSS delta / keys)\n' "$KEYS"
    printf '%-10s | %14s | %22s\n' server "bytes per key" "peak bytes/key in load"
    printf '%-10s | %14s | %22s\n' redis "$rb" "$rp"
    printf '%-10s | %14s | %22s\n' lattice "$lb" "$lp"
fi
