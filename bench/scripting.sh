#!/usr/bin/env bash
# Scripting throughput (issues 14 and 29, "Benchmark"): EVALSHA of small
# scripts and FCALL of the same code as functions, against redis-server 7.0
# side by side. The scripts (bench/lib.sh SCRIPT_*), on KEYS[1]:
#
#   1cmd:  INCR                 2cmd:  GET, INCR           3cmd:  SET ARGV[1], INCR, GET
#   command:  EVALSHA <sha> 1 key:__rand_int__ 7   /   FCALL f1|f2|f3 1 key:__rand_int__ 7
#
# Each server runs alone pinned to SERVER_CPU (lattice with --server-threads
# 1), redis-benchmark pinned to CLIENT_CPU, at pipeline 1 and 16. ROUNDS
# rounds alternate the two servers and the table shows each figure's median
# (as bench/compare.sh), so a noisy neighbour on the shared cores hurts both
# alike; ratios are of those medians, all from the one run; p99 is
# redis-benchmark's. "cpu ns/r" is the server's CPU time per request
# (bench/lib.sh cpu_ns): at pipeline 16 the one-threaded redis-benchmark can
# saturate first, and CPU per request is what it cannot cap. A last table
# (one measurement, the 2-command script) runs lattice unpinned with
# MT_THREADS worker threads and redis-benchmark unpinned with --threads MT_CLIENT_THREADS (on a 2-core machine the client
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
# (2), MT_CLIENT_THREADS (2), SKIP_BUILD, SKIP_MT, LATTICE (the binary),
# TESTS (some of evalsha-1cmd ... fcall-3cmd).
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
    local s1="$SCRIPT_1CMD" s3="$SCRIPT_3CMD" lib="$SCRIPT_LIBRARY"
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

TESTS="${TESTS:-evalsha-1cmd evalsha-2cmd evalsha-3cmd fcall-1cmd fcall-2cmd fcall-3cmd}"

# one_test PORT TEST PIPELINE: "rps p99_ms" of one script test.
one_test() {
    local port="$1" t="$2" pipe="$3" sha
    case $t in
    evalsha-*)
        sha="SHA${t:8:1}"
        rps_p99_cmd "$port" "$pipe" EVALSHA "${!sha}" 1 'key:__rand_int__' 7
        ;;
    fcall-*) rps_p99_cmd "$port" "$pipe" FCALL "f${t:6:1}" 1 'key:__rand_int__' 7 ;;
    esac
}

declare -A R L RC LC RP LP
run_rounds load_scripts
printf '\nscripting: -c %s -r %s, P=1 %s requests, P=16 %s; servers on CPU %s (lattice 1 thread), redis-benchmark on CPU %s; median of %s rounds\n' \
    "$CLIENTS" "$KEYSPACE" "$REQUESTS_P1" "$REQUESTS" "$SERVER_CPU" "$CLIENT_CPU" "$ROUNDS"
rps_table 17

if [[ -z "${SKIP_MT:-}" ]]; then
    port="$(free_port)"
    "$LATTICE" --port "$port" --server-threads "$MT_THREADS" --save "" --appendonly no \
        --dir "$WORK" >"$WORK/lattice-mt.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$port"
    load_scripts "$port"
    printf '\nlattice unpinned, %s worker threads, redis-benchmark --threads %s (one run):\n' \
        "$MT_THREADS" "$MT_CLIENT_THREADS"
    for pipe in 1 16; do
        n=$REQUESTS
        [[ $pipe == 1 ]] && n=$REQUESTS_P1
        for t in evalsha-2cmd fcall-2cmd; do
            cmd=(EVALSHA "$SHA2" 1 'key:__rand_int__')
            [[ $t == fcall-2cmd ]] && cmd=(FCALL f2 1 'key:__rand_int__')
            printf '%-17s | %12s rps\n' "${t^^} P=$pipe" "$(redis-benchmark -p "$port" -c "$CLIENTS" \
                -n "$n" -r "$KEYSPACE" -P "$pipe" --threads "$MT_CLIENT_THREADS" --csv -q \
                "${cmd[@]}" 2>/dev/null | bench_csv | cut -d' ' -f1)"
        done
    done
    stop_server
fi
