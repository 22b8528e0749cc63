#!/usr/bin/env bash
# Collections against redis-server (Debian's /usr/bin/redis-server), set up
# as bench/compare.sh (server pinned to CPU 0, lattice with one worker
# thread; redis-benchmark pinned to CPU 1; 50 clients; ROUNDS alternating
# rounds, medians shown):
#
# - throughput of LPUSH, LPOP, SADD, HSET, ZADD, LRANGE_100 (redis-benchmark's
#   own tests, 16-byte values, -r 100000; LRANGE_100 reads the first 100 of
#   a 600-element list redis-benchmark fills first) and ZRANGE zr 0 9
#   WITHSCORES on a 100-member sorted set, at pipeline 1 and 16, with the
#   server's CPU ns per request and redis-benchmark's p99 latency (TESTS
#   picks some: TESTS="lpush sadd");
# - memory of one 1,000,000-element list, hash, set and sorted set
#   (elements "e:%010d", hash values and scores from the index), loaded with
#   redis-cli --pipe: RSS delta per element, and the peak during the load.
#
#   bench/collections.sh
#   ROUNDS=1 SKIP_BUILD=1 SKIP_MEM=1 bench/collections.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
ELEMENTS="${ELEMENTS:-1000000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="${LATTICE:-$ROOT/target/release/lattice-server}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

TESTS="${TESTS:-lpush lpop sadd hset zadd lrange_100 zrange}"

# one_test PORT TEST PIPELINE: "rps p99_ms" of one test on the running server.
one_test() {
    local port="$1" t="$2" pipe="$3"
    if [[ $t == zrange ]]; then
        rps_p99_cmd "$port" "$pipe" ZRANGE zr 0 9 WITHSCORES
    else
        rps_p99 "$port" "$t" "$pipe"
    fi
}

# make_zr PORT: the 100-member sorted set ZRANGE reads.
make_zr() {
    for i in $(seq 1 100); do echo "ZADD zr $i m$i"; done | redis-cli -p "$1" >/dev/null
}

if [[ -z "${SKIP_RPS:-}" ]]; then
    declare -A R L RC LC RP LP
    run_rounds make_zr
    rps_table 15
fi

# make_load TYPE: the RESP stream building one ELEMENTS-element collection
# of TYPE in key "big", 1000 elements per command; prints the command count.
make_load() {
    python3 - "$1" "$ELEMENTS" >"$WORK/load.$1" <<'EOF'
import sys
kind, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
cmd = {"list": b"RPUSH", "hash": b"HSET", "set": b"SADD", "zset": b"ZADD"}[kind]
for start in range(0, n, 1000):
    args = [cmd, b"big"]
    for i in range(start, min(n, start + 1000)):
        e = b"e:%010d" % i
        if kind == "hash":
            args += [e, b"v:%010d" % i]
        elif kind == "zset":
            args += [b"%d" % i, e]
        else:
            args.append(e)
    out.write(b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args))
EOF
}

if [[ -z "${SKIP_MEM:-}" ]]; then
    printf '\nmemory, one collection of %s elements (RSS delta / element; peak in load)\n' "$ELEMENTS"
    printf '%-6s | %12s | %12s | %6s | %12s | %12s\n' type "redis B/el" "lattice B/el" ratio \
        "redis peak" "lattice peak"
    replies=$(((ELEMENTS + 999) / 1000))
    for kind in list hash set zset; do
        make_load "$kind"
        declare -A B P
        for name in redis lattice; do
            load_rss "$name" "$WORK/load.$kind" "$replies"
            read -r before peak now <"$WORK/rss.$name"
            B[$name]=$(awk -v b="$before" -v a="$now" -v n="$ELEMENTS" 'BEGIN { printf "%.1f", (a-b)*1024/n }')
            P[$name]=$(awk -v b="$before" -v a="$peak" -v n="$ELEMENTS" 'BEGIN { printf "%.1f", (a-b)*1024/n }')
        done
        printf '%-6s | %12s | %12s | %6s | %12s | %12s\n' "$kind" "${B[redis]}" "${B[lattice]}" \
            "$(awk -v a="${B[lattice]}" -v b="${B[redis]}" 'BEGIN { printf "%.2f", (b>0 ? a/b : 0) }')" \
            "${P[redis]}" "${P[lattice]}"
    done
    echo "(ratio = lattice / redis; <= 1 means lattice uses no more memory)"
fi
