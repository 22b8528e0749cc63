#!/usr/bin/env bash
# lattice-server against redis-server 7.0 (Debian's /usr/bin/redis-server)
# under memtier_benchmark, the second load generator of issue 29's table
# (redis-benchmark's side: bench/compare.sh, collections.sh, scripting.sh).
# Set up as those: each server alone pinned to CPU 0 (lattice with one
# worker thread), memtier pinned to CPU 1 with one thread and 50 clients,
# ROUNDS alternating rounds, medians shown. Per test and pipeline (1, 16):
# ops/s, the server's CPU ns per request (bench/lib.sh cpu_ns, from /proc),
# memtier's p99 latency, and the ratios.
#
# Tests (memtier --command, keys "key:1".."key:KEYSPACE" uniformly random,
# "n:1".. for the scripts, whose INCR needs keys SET has not filled with
# text; 16-byte values; one key per collection as redis-benchmark's -t tests):
#   set, get              SET __key__ __data__ / GET __key__
#   lpush, lpop           LPUSH mylist __data__ / LPOP mylist
#   sadd, hset, zadd      SADD myset __key__ / HSET myhash __key__ __data__ /
#                         ZADD myzset 1 __key__
#   lrange_100            LRANGE biglist 0 99 (a 600-element list made first)
#   evalsha-Ncmd          EVALSHA <sha> 1 __key__ 7 (bench/lib.sh SCRIPT_NCMD,
#                         loaded by SCRIPT LOAD; N = 1, 2, 3)
#   fcall-Ncmd            FCALL fN 1 __key__ 7 (FUNCTION LOAD of SCRIPT_LIBRARY)
#
#   MEMTIER=/tmp/memtier/memtier_benchmark bench/memtier.sh
#   MEMTIER=... ROUNDS=1 TESTS="get evalsha-1cmd" SKIP_BUILD=1 bench/memtier.sh
#
# memtier is not packaged for Debian 12 and not fetched by CI (docs/DECISIONS.md
# 331): build it once, outside this repository, from a checkout of
# https://github.com/RedisLabs/memtier_benchmark:
#
#   git clone https://github.com/RedisLabs/memtier_benchmark /tmp/memtier
#   sudo apt-get install -y build-essential autoconf automake libtool \
#       pkg-config libevent-dev libpcre3-dev libssl-dev zlib1g-dev
#   (cd /tmp/memtier && autoreconf -ivf && ./configure && make -j2)
#
# Environment: MEMTIER (required), ROUNDS (3), REQUESTS (pipeline 16,
# 400000; memtier's -n is REQUESTS / CLIENTS per client), REQUESTS_P1
# (100000), CLIENTS (50), KEYSPACE (100000), TESTS, SERVER_CPU (0),
# CLIENT_CPU (1), SKIP_BUILD, LATTICE (the binary).
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
LATTICE="${LATTICE:-$ROOT/target/release/lattice-server}"
TESTS="${TESTS:-set get lpush lpop sadd hset zadd lrange_100 evalsha-1cmd evalsha-3cmd fcall-1cmd fcall-3cmd}"
if [[ ! -x "${MEMTIER:-}" ]]; then
    echo "MEMTIER=/path/to/memtier_benchmark is required (this script's header says how to build one)" >&2
    exit 2
fi
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

# command TEST: the memtier --command of TEST.
command() {
    case $1 in
    set) echo "SET __key__ __data__" ;;
    get) echo "GET __key__" ;;
    lpush) echo "LPUSH mylist __data__" ;;
    lpop) echo "LPOP mylist" ;;
    sadd) echo "SADD myset __key__" ;;
    hset) echo "HSET myhash __key__ __data__" ;;
    zadd) echo "ZADD myzset 1 __key__" ;;
    lrange_100) echo "LRANGE biglist 0 99" ;;
    evalsha-*)
        local sha="SHA${1:8:1}"
        echo "EVALSHA ${!sha} 1 __key__ 7"
        ;;
    fcall-*) echo "FCALL f${1:6:1} 1 __key__ 7" ;;
    *) echo "unknown test $1" >&2 && exit 2 ;;
    esac
}

# one_test PORT TEST PIPELINE: "ops/s p99_ms" of one memtier run of
# REQUESTS requests.
one_test() {
    local port="$1" t="$2" pipe="$3" prefix=key:
    [[ $t == evalsha-* || $t == fcall-* ]] && prefix=n:
    taskset -c "$CLIENT_CPU" "$MEMTIER" -p "$port" --threads 1 --clients "$CLIENTS" \
        --pipeline "$pipe" --requests $((REQUESTS / CLIENTS)) --distinct-client-seed \
        --key-prefix "$prefix" --key-minimum 1 --key-maximum "$KEYSPACE" -d 16 \
        --command "$(command "$t")" --command-key-pattern R --hide-histogram \
        --json-out-file "$WORK/memtier.json" >"$WORK/memtier.out" 2>&1 ||
        { cat "$WORK/memtier.out" >&2 && exit 1; }
    python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["ALL STATS"]["Totals"]
print(t["Ops/sec"], t["Percentile Latencies"]["p99.00"])' "$WORK/memtier.json"
}

# prepare PORT: the scripts and the list LRANGE reads.
prepare() {
    load_scripts "$1"
    # shellcheck disable=SC2046
    redis-cli -p "$1" RPUSH biglist $(seq 1 600) >/dev/null
}

declare -A R L RC LC RP LP
run_rounds prepare
printf '\nmemtier_benchmark: 1 thread, -c %s, keys 1..%s, P=1 %s requests, P=16 %s; servers on CPU %s (lattice 1 thread), memtier on CPU %s; median of %s rounds\n' \
    "$CLIENTS" "$KEYSPACE" "$REQUESTS_P1" "$REQUESTS" "$SERVER_CPU" "$CLIENT_CPU" "$ROUNDS"
rps_table 17
