#!/usr/bin/env bash
# Writes on keys with a TTL on an active pair (issue 24 item 1, DECISIONS
# 228-230): the cache pattern, a hash per key written, given a TTL, then
# written again under it; also a set, and a counter made with a TTL; a
# list's TTL writes and writes under them, and a counter's resets (SET,
# EXPIRE, APPEND, GETSET on a counter; DECISIONS 248-251). For each phase, the key states the
# peer asked for (INFO `conflicts=`: with TTL facts off, every such write
# is a state round trip), the writer's rate, and the seconds until the
# peer has it all (DEBUG DIGESTs agree).
#
# Load: redis-benchmark -P 16 -c 50 -n REQUESTS -r KEYSPACE; servers pinned
# to SERVER_CPU with --server-threads 1, redis-benchmark to CLIENT_CPU.
# BIN: the server binary (a build with `fact::TTL_FACTS`, `RESET_FACTS` or
# `LIST_TTL_FACTS` off for "before").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-100000}
KEYSPACE=${KEYSPACE:-10000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7470}
# shellcheck source=bench/lib.sh
source bench/lib.sh

bench() { # port command...: requests per second
    local p=$1; shift
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$p" -c 50 -P 16 -n "$REQUESTS" -r "$KEYSPACE" \
        -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1
}
pa=$BASE; pb=$((BASE + 1))
start_node $pa --active-replica yes
start_node $pb --active-replica yes
cli $pa replicaof 127.0.0.1 $pb >/dev/null; cli $pb replicaof 127.0.0.1 $pa >/dev/null
wait_up $pa 1; wait_up $pb 1
echo "== ttl-asks: $BIN; -P 16 -c 50 -n $REQUESTS -r $KEYSPACE"
printf '%-34s %10s %8s %8s\n' phase writer/s asks settle-s
phase() { # name command...
    local name=$1; shift
    local q0 w q1 t
    q0=$(state_asks $pb)
    w=$(bench $pa "$@")
    t=$(converge $pa $pb)
    q1=$(state_asks $pb)
    printf '%-34s %10s %8s %8.2f\n' "$name" "$w" $((q1 - q0)) "$t"
}
# Another script's phases on the same pair (bench/member-ttl-asks.sh).
if [[ -n ${PHASES_FROM:-} ]]; then source "$PHASES_FROM"; exit 0; fi
phase 'HSET h f v (no TTL yet)' HSET h:__rand_int__ f __rand_int__
phase 'EXPIRE h 100' EXPIRE h:__rand_int__ 100
phase 'HSET h g v (under the TTL)' HSET h:__rand_int__ g __rand_int__
phase 'SADD s m' SADD s:__rand_int__ __rand_int__
phase 'PEXPIRE s 100000' PEXPIRE s:__rand_int__ 100000
phase 'SADD s m (under the TTL)' SADD s:__rand_int__ __rand_int__
phase 'PERSIST s' PERSIST s:__rand_int__
phase 'SET c 0 EX 1000 (a counter)' SET c:__rand_int__ 0 EX 1000
phase 'INCR c (under the TTL)' INCR c:__rand_int__
phase 'RPUSH l v (a list)' RPUSH l:__rand_int__ __rand_int__
phase 'EXPIRE l 100 (a list)' EXPIRE l:__rand_int__ 100
phase 'RPUSH l v (under the TTL)' RPUSH l:__rand_int__ __rand_int__
phase 'PEXPIRE l 200000' PEXPIRE l:__rand_int__ 200000
phase 'LPOP l (under the TTL)' LPOP l:__rand_int__
phase 'PERSIST l' PERSIST l:__rand_int__
phase 'INCR n (a counter)' INCR n:__rand_int__
phase 'SET n 5 (a reset)' SET n:__rand_int__ 5
phase 'INCR n (after the reset)' INCR n:__rand_int__
phase 'EXPIRE n 100 (a reset)' EXPIRE n:__rand_int__ 100
phase 'APPEND n 1 (a reset)' APPEND n:__rand_int__ 1
phase 'GETSET n 0 (a reset)' GETSET n:__rand_int__ 0
echo "keys with a TTL on the peer: $(cli $pb info keyspace | grep -oE 'expires=[0-9]+')"
