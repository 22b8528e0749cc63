#!/usr/bin/env bash
# HyperLogLog and geo against redis-server (Debian's /usr/bin/redis-server),
# set up as bench/compare.sh (server pinned to CPU 0, lattice with one
# worker thread; redis-benchmark pinned to CPU 1; 50 clients; ROUNDS
# alternating rounds, medians shown), at pipeline 1 and 16, with the
# server's CPU ns per request:
#
# - PFADD hll <random element> (-r 100000: the sketch turns dense early);
# - PFCOUNT over 3 keys, each a dense sketch of 20,000 elements (the
#   union is recomputed every call, no cache);
# - GEOADD geo <random point near 13.x,38.x> <random member>;
# - GEOSEARCH over an index of 100,000 points spread over 1 x 1 degree,
#   FROMLONLAT 13.5 38.5 BYRADIUS 2 km (about 40 matches) ASC.
#
#   bench/hll-geo.sh
#   ROUNDS=1 SKIP_BUILD=1 bench/hll-geo.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet --bin lattice-server)
fi

TESTS="pfadd pfcount3 geoadd geosearch"

# The data the read tests run on, as RESP for redis-cli --pipe.
python3 - >"$WORK/setup.resp" <<'PY'
import random, sys
out = sys.stdout.buffer
def cmd(*args):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
for k in (1, 2, 3):
    for start in range(0, 20000, 1000):
        cmd("PFADD", "h%d" % k, *["e%d:%d" % (k, i) for i in range(start, start + 1000)])
random.seed(1)
for start in range(0, 100000, 1000):
    args = []
    for i in range(start, start + 1000):
        args += ["%.6f" % (13 + random.random()), "%.6f" % (38 + random.random()), "p%d" % i]
    cmd("GEOADD", "idx", *args)
PY

one_test() {
    local port="$1" t="$2" pipe="$3"
    case $t in
    pfadd) rps_cmd "$port" "$pipe" PFADD hll __rand_int__ ;;
    pfcount3) rps_cmd "$port" "$pipe" PFCOUNT h1 h2 h3 ;;
    geoadd) rps_cmd "$port" "$pipe" GEOADD geo 13.__rand_int__ 38.__rand_int__ m:__rand_int__ ;;
    geosearch) rps_cmd "$port" "$pipe" GEOSEARCH idx FROMLONLAT 13.5 38.5 BYRADIUS 2 km ASC ;;
    esac
}

declare -A R L RC LC
for round in $(seq 1 "$ROUNDS"); do
    for name in redis lattice; do
        port="$(free_port)"
        start_server "$name" "$port"
        redis-cli -p "$port" --pipe <"$WORK/setup.resp" >/dev/null
        measure_round "$name" "$port"
        stop_server
    done
    echo "round $round done" >&2
done
rps_table 14
