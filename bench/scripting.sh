#!/usr/bin/env bash
# Scripting throughput (issue 14 "Benchmark"): EVALSHA of a small script and
# FCALL of the same code as a function, against redis-server 7.0 side by side.
#
#   script:   redis.call('GET', KEYS[1]); return redis.call('INCR', KEYS[1])
#   command:  EVALSHA <sha> 1 key:__rand_int__   /   FCALL getincr 1 key:__rand_int__
#
# Each server runs alone pinned to SERVER_CPU (lattice with --server-threads
# 1), redis-benchmark pinned to CLIENT_CPU, at pipeline 1 and 16. ROUNDS
# rounds alternate the two servers and the table shows each figure's median
# (as bench/compare.sh), so a noisy neighbour on the shared cores hurts both
# alike; ratios are of those medians, all from the one run. "cpu ns/req" is the server's CPU time per request
# (bench/lib.sh cpu_ns): at pipeline 16 the one-threaded redis-benchmark can
# saturate first, and CPU per request is what it cannot cap. A last column
# (one measurement) runs lattice unpinned with MT_THREADS worker threads and redis-benchmark
# unpinned with --threads MT_CLIENT_THREADS (on a 2-core machine the client
# shares the cores with the server, so it shows that one node uses more than
# one core, not how far it scales).
#
#   bench/scripting.sh
#   REQUESTS=400000 REQUESTS_P1=100000 SKIP_BUILD=1 bench/scripting.sh
#
# INSTRUCTIONS=1: instead, user-space instructions per request of each
# server's whole process under callgrind (bench/instructions.sh; the
# figure to compare on this VM, whose timings move 10-20 % between runs),
# for EVALSHA and FCALL of a one-command script (INCR) and a three-command
# one (SET, INCR, GET), at pipeline 16 (IPIPES="1 16" for both): each run's
# total less that of an idle run (start-up and shutdown), over
# IREQUESTS (20000) requests, -c 50 -r 1000. ISKIP_REDIS=1 counts lattice
# only (redis-server's column shows "-"), for a step measured against a
# redis-server count taken earlier the same way.
#
# Environment: ROUNDS (3), REQUESTS (pipeline 16, 400000), REQUESTS_P1 (100000), CLIENTS
# (50), KEYSPACE (-r, 100000), SERVER_CPU (0), CLIENT_CPU (1), MT_THREADS
# (2), MT_CLIENT_THREADS (2), SKIP_BUILD, SKIP_MT, LATTICE (the binary).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-3}"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
MT_THREADS="${MT_THREADS:-2}"
MT_CLIENT_THREADS="${MT_CLIENT_THREADS:-2}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="${LATTICE:-$ROOT/target/release/lattice-server}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

SCRIPT="redis.call('GET', KEYS[1]); return redis.call('INCR', KEYS[1])"
LIBRARY="#!lua name=benchlib
redis.register_function('getincr', function(keys, args) redis.call('GET', keys[1]); return redis.call('INCR', keys[1]) end)"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

# resp ARGS...: one command in RESP.
resp() {
    printf '*%d\r\n' $#
    for a in "$@"; do printf '$%d\r\n%s\r\n' "$(printf %s "$a" | wc -c)" "$a"; done
}

# instructions: the INSTRUCTIONS=1 table (see the header).
instructions() {
    local s1="return redis.call('INCR', KEYS[1])"
    local s3="redis.call('SET', KEYS[1], ARGV[1]); redis.call('INCR', KEYS[1]); return redis.call('GET', KEYS[1])"
    local lib="#!lua name=ilib
redis.register_function('f1', function(keys, args) return redis.call('INCR', keys[1]) end)
redis.register_function('f3', function(keys, args) redis.call('SET', keys[1], args[1]); redis.call('INCR', keys[1]); return redis.call('GET', keys[1]) end)"
    local setup="$WORK/setup.resp" n="${IREQUESTS:-20000}" sha1 sha3 bin idle total pipe w
    { resp SCRIPT LOAD "$s1"; resp SCRIPT LOAD "$s3"; resp FUNCTION LOAD REPLACE "$lib"; } >"$setup"
    sha1="$(printf %s "$s1" | sha1sum | cut -c1-40)"
    sha3="$(printf %s "$s3" | sha1sum | cut -c1-40)"
    declare -A W=([evalsha-1cmd]="EVALSHA $sha1 1 k:__rand_int__"
        [evalsha-3cmd]="EVALSHA $sha3 1 k:__rand_int__ 7"
        [fcall-1cmd]="FCALL f1 1 k:__rand_int__" [fcall-3cmd]="FCALL f3 1 k:__rand_int__ 7")
    count() { # BINARY redis-benchmark args...: the run's instructions
        local b=$1; shift
        PORT="$(free_port)" SETUP_RESP="$setup" bash "$ROOT/bench/instructions.sh" "$b" -- "$@" |
            grep -oE '[0-9]+ instructions' | cut -d' ' -f1
    }
    printf '%-14s %4s %14s %14s %7s\n' workload pipe redis lattice ratio
    local bins=("$REDIS_SERVER" "$LATTICE")
    [[ -n "${ISKIP_REDIS:-}" ]] && bins=("$LATTICE")
    for bin in "${bins[@]}"; do
        idle="$(count "$bin" -c 50 -n 50 PING)"
        for pipe in ${IPIPES:-16}; do
            for w in evalsha-1cmd evalsha-3cmd fcall-1cmd fcall-3cmd; do
                # shellcheck disable=SC2086
                total="$(count "$bin" -c 50 -P "$pipe" -n "$n" -r 1000 ${W[$w]})"
                R[$w-$pipe-$bin]=$(((total - idle) / n))
            done
        done
    done
    for pipe in ${IPIPES:-16}; do
        for w in evalsha-1cmd evalsha-3cmd fcall-1cmd fcall-3cmd; do
            printf '%-14s %4s %14s %14s %7s\n' "$w" "$pipe" "${R[$w-$pipe-$REDIS_SERVER]:--}" \
                "${R[$w-$pipe-$LATTICE]}" "$(awk -v a="${R[$w-$pipe-$REDIS_SERVER]:-0}" \
                -v b="${R[$w-$pipe-$LATTICE]}" 'BEGIN { printf "%.2f", a / b }')"
        done
    done
    echo "(instructions per request, each server's whole process; ratio = redis / lattice, >1 means lattice does less)"
}
if [[ -n "${INSTRUCTIONS:-}" ]]; then
    declare -A R
    instructions
    exit 0
fi

# prepare PORT: loads the script and the library, sets SHA.
prepare() {
    SHA="$(redis-cli -p "$1" SCRIPT LOAD "$SCRIPT")"
    redis-cli -p "$1" FUNCTION LOAD REPLACE "$LIBRARY" >/dev/null
    [[ "$(redis-cli -p "$1" EVALSHA "$SHA" 1 probe)" == 1 ]] || { echo "EVALSHA failed" >&2; exit 1; }
    [[ "$(redis-cli -p "$1" FCALL getincr 1 probe)" == 2 ]] || { echo "FCALL failed" >&2; exit 1; }
}

# measure NAME PORT: fills V[NAME-test-pipe] (rps) and C[...] (cpu ns/req).
declare -A V C
measure() {
    local name="$1" port="$2" pipe n c0 c1 v
    for pipe in 1 16; do
        n=$REQUESTS
        [[ $pipe == 1 ]] && n=$REQUESTS_P1
        for t in evalsha fcall; do
            c0="$(cpu_ns "$SERVER_PID")"
            if [[ $t == evalsha ]]; then
                v="$(REQUESTS=$n rps_cmd "$port" "$pipe" EVALSHA "$SHA" 1 'key:__rand_int__')"
            else
                v="$(REQUESTS=$n rps_cmd "$port" "$pipe" FCALL getincr 1 'key:__rand_int__')"
            fi
            c1="$(cpu_ns "$SERVER_PID")"
            V[$name-$t-$pipe]+="$v "
            C[$name-$t-$pipe]+="$(((c1 - c0) / n)) "
        done
    done
}

for round in $(seq 1 "$ROUNDS"); do
    for name in redis lattice; do
        port="$(free_port)"
        start_server "$name" "$port"
        prepare "$port"
        measure "$name" "$port"
        stop_server
    done
    echo "round $round done" >&2
done

if [[ -z "${SKIP_MT:-}" ]]; then
    port="$(free_port)"
    "$LATTICE" --port "$port" --server-threads "$MT_THREADS" --save "" --appendonly no \
        --dir "$WORK" >"$WORK/lattice-mt.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$port"
    prepare "$port"
    for pipe in 1 16; do
        n=$REQUESTS
        [[ $pipe == 1 ]] && n=$REQUESTS_P1
        for t in evalsha fcall; do
            if [[ $t == evalsha ]]; then
                cmd=(EVALSHA "$SHA" 1 'key:__rand_int__')
            else
                cmd=(FCALL getincr 1 'key:__rand_int__')
            fi
            V[mt-$t-$pipe]+="$(redis-benchmark -p "$port" -c "$CLIENTS" -n "$n" -r "$KEYSPACE" \
                -P "$pipe" --threads "$MT_CLIENT_THREADS" --csv -q "${cmd[@]}" 2>/dev/null |
                awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }') "
        done
    done
    stop_server
    echo "lattice (unpinned) done" >&2
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b>0 ? a/b : 0) }'; }
printf '\nscripting: -c %s -r %s, P=1 %s requests, P=16 %s; servers on CPU %s (lattice 1 thread), redis-benchmark on CPU %s; median of %s rounds\n' \
    "$CLIENTS" "$KEYSPACE" "$REQUESTS_P1" "$REQUESTS" "$SERVER_CPU" "$CLIENT_CPU" "$ROUNDS"
printf '%-12s | %10s | %11s | %5s | %10s | %11s | %9s | %18s\n' test "redis rps" "lattice rps" ratio \
    "redis ns/r" "lattice ns/r" "cpu ratio" "lattice ${MT_THREADS}t unpinned"
printf '%s\n' "-------------+------------+-------------+-------+------------+--------------+-----------+-------------------"
for t in evalsha fcall; do
    for pipe in 1 16; do
        r=$(median <<<"${V[redis-$t-$pipe]}") l=$(median <<<"${V[lattice-$t-$pipe]}")
        rc=$(median <<<"${C[redis-$t-$pipe]}") lc=$(median <<<"${C[lattice-$t-$pipe]}")
        mt=$(median <<<"${V[mt-$t-$pipe]:-}")
        printf '%-12s | %10s | %11s | %5s | %10s | %12s | %9s | %18s\n' "${t^^} P=$pipe" "$r" "$l" \
            "$(ratio "$l" "$r")" "$rc" "$lc" "$(ratio "$rc" "$lc")" "${mt:--}"
    done
done
echo "(ratio = lattice rps / redis rps; cpu ratio = redis CPU per request / lattice CPU per request, >1 means lattice does more per core)"
