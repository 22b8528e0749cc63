#!/usr/bin/env bash
# Streams against redis-server (Debian's /usr/bin/redis-server), set up as
# bench/hll-geo.sh (server pinned to CPU 0, lattice with one worker thread;
# redis-benchmark pinned to CPU 1; 50 clients; ROUNDS alternating rounds,
# medians shown).
#
# Memory: MEMORY_ENTRIES (1,000,000) pipelined XADDs into one stream, INFO
# used_memory before and after, per entry, for two shapes:
# - small:  XADD s * f v
# - sensor: XADD s * sensor <random int> temp <random int>
#
# Throughput at pipeline 1 and 16, with the server's CPU ns per request:
# - XADD x * f v (auto IDs, one growing stream);
# - XREAD COUNT 10 STREAMS big <random ID> over a stream of KEYSPACE
#   entries with IDs 1-0 .. KEYSPACE-0;
# - XREADGROUP GROUP g c COUNT 1 STREAMS q > over a stream long enough for
#   every request to get an entry, then XACK q g <random ID> of it.
#
# The box must be quiet: on cores shared with compilers the rps columns
# measure the neighbours (docs/STREAMS-HLL-GEO.md).
#
#   bench/streams.sh
#   ROUNDS=1 SKIP_BUILD=1 bench/streams.sh
#   ONLY=memory bench/streams.sh     # or ONLY=throughput
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
MEMORY_ENTRIES="${MEMORY_ENTRIES:-1000000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet --bin lattice-server)
fi

used_memory() {
    redis-cli -p "$1" INFO memory | awk -F: '/^used_memory:/ { gsub(/\r/, "", $2); print $2 }'
}

# memory NAME SHAPE: bytes per entry of MEMORY_ENTRIES XADDs of SHAPE.
memory() {
    local name="$1" shape="$2" port before after len
    port="$(free_port)"
    start_server "$name" "$port"
    before="$(used_memory "$port")"
    local args=(XADD s '*' f v)
    [[ $shape == sensor ]] && args=(XADD s '*' sensor __rand_int__ temp __rand_int__)
    REQUESTS=$MEMORY_ENTRIES rps_cmd "$port" 16 "${args[@]}" >/dev/null
    after="$(used_memory "$port")"
    len="$(redis-cli -p "$port" XLEN s)"
    stop_server
    awk -v a="$after" -v b="$before" -v n="$len" 'BEGIN { printf "%.1f", (a - b) / n }'
}

run_memory() {
    printf '\n%-8s | %14s | %16s | %s\n' shape "redis B/entry" "lattice B/entry" "lattice/redis"
    printf '%s\n' "---------+----------------+------------------+--------------"
    for shape in small sensor; do
        r="$(memory redis "$shape")"
        l="$(memory lattice "$shape")"
        printf '%-8s | %14s | %16s | %s\n' "$shape" "$r" "$l" \
            "$(awk -v a="$l" -v b="$r" 'BEGIN { printf "%.2f", a / b }')"
    done
    echo "($MEMORY_ENTRIES entries, INFO used_memory after minus before, per entry)"
}

TESTS="xadd xread10 xreadgroup xack"

# The streams the read tests run on, as RESP for redis-cli --pipe: `big`
# (KEYSPACE entries), `q` (enough for every XREADGROUP) and its group.
setup_resp() {
    python3 - "$KEYSPACE" "$((REQUESTS + REQUESTS_P1 + 1000))" <<'PY'
import sys
out = sys.stdout.buffer
def cmd(*args):
    args = [str(a).encode() for a in args]
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
big, q = int(sys.argv[1]), int(sys.argv[2])
for i in range(1, big + 1):
    cmd("XADD", "big", "%d-0" % i, "f", "v%d" % i)
for i in range(1, q + 1):
    cmd("XADD", "q", "%d-0" % i, "f", "v%d" % i)
cmd("XGROUP", "CREATE", "q", "g", "0")
PY
}

one_test() {
    local port="$1" t="$2" pipe="$3"
    case $t in
    xadd) rps_cmd "$port" "$pipe" XADD x '*' f v ;;
    xread10) rps_cmd "$port" "$pipe" XREAD COUNT 10 STREAMS big __rand_int__ ;;
    xreadgroup) rps_cmd "$port" "$pipe" XREADGROUP GROUP g c COUNT 1 STREAMS q '>' ;;
    xack) KEYSPACE=$((REQUESTS + REQUESTS_P1)) rps_cmd "$port" "$pipe" XACK q g __rand_int__ ;;
    esac
}

run_throughput() {
    setup_resp >"$WORK/setup.resp"
    local replies=$((KEYSPACE + REQUESTS + REQUESTS_P1 + 1001))
    declare -A R L RC LC
    for round in $(seq 1 "$ROUNDS"); do
        for name in redis lattice; do
            port="$(free_port)"
            start_server "$name" "$port"
            redis-cli -p "$port" --pipe <"$WORK/setup.resp" >"$WORK/pipe.log" 2>&1
            grep -q "errors: 0, replies: $replies" "$WORK/pipe.log" ||
                { echo "$name: setup failed" >&2; cat "$WORK/pipe.log" >&2; exit 1; }
            measure_round "$name" "$port"
            stop_server
        done
        echo "round $round done" >&2
    done
    rps_table 16
}

[[ ${ONLY:-memory} == memory ]] && run_memory
[[ ${ONLY:-throughput} == throughput ]] && run_throughput
true
