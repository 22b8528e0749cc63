#!/usr/bin/env bash
# Member TTL writes on an active pair (issue 28, DECISIONS 326-327): sets,
# hashes and sorted sets whose members take TTLs (EXPIREMEMBER, HEXPIRE,
# HPERSIST...), and writes on keys with member TTLs (SADD, HSET, EXPIRE).
# For each phase, the key states the peer asked for (INFO `conflicts=`:
# before DECISIONS 326 every write on a key with a member TTL was a state
# round trip), the writer's rate, and the seconds until the peer has it all
# (DEBUG DIGESTs agree). As bench/ttl-asks.sh, whose shape it takes.
#
# Load: redis-benchmark -P 16 -c 50 -n REQUESTS -r KEYSPACE; servers pinned
# to SERVER_CPU with --server-threads 1, redis-benchmark to CLIENT_CPU.
# BIN: the server binary (main's for "before").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-100000}
KEYSPACE=${KEYSPACE:-10000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7480}
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
echo "== member-ttl-asks: $BIN; -P 16 -c 50 -n $REQUESTS -r $KEYSPACE"
printf '%-40s %10s %8s %8s\n' phase writer/s asks settle-s
phase() { # name command...
    local name=$1; shift
    local q0 w q1 t
    q0=$(state_asks $pb)
    w=$(bench $pa "$@")
    t=$(converge $pa $pb)
    q1=$(state_asks $pb)
    printf '%-40s %10s %8s %8.2f\n' "$name" "$w" $((q1 - q0)) "$t"
}
phase 'SADD s m n (no member TTL yet)' SADD s:__rand_int__ m n
phase 'EXPIREMEMBER s m 100' EXPIREMEMBER s:__rand_int__ m 100
phase 'EXPIREMEMBER s m 200000 ms' EXPIREMEMBER s:__rand_int__ m 200000 ms
phase 'SADD s v (under member TTLs)' SADD s:__rand_int__ __rand_int__
phase 'EXPIRE s 1000 (the key TTL)' EXPIRE s:__rand_int__ 1000
phase 'PERSIST s m' PERSIST s:__rand_int__ m
phase 'HSET h f v g v' HSET h:__rand_int__ f __rand_int__ g 1
phase 'HEXPIRE h 100 FIELDS 1 f' HEXPIRE h:__rand_int__ 100 FIELDS 1 f
phase 'HPEXPIRE h 200000 FIELDS 1 f' HPEXPIRE h:__rand_int__ 200000 FIELDS 1 f
phase 'HSET h g v (under member TTLs)' HSET h:__rand_int__ g __rand_int__
phase 'HINCRBY h g 1 (under member TTLs)' HINCRBY h:__rand_int__ g 1
phase 'HPERSIST h FIELDS 1 f' HPERSIST h:__rand_int__ FIELDS 1 f
phase 'ZADD z 1 a 2 b' ZADD z:__rand_int__ 1 a 2 b
phase 'PEXPIREMEMBERAT z a 4000000000000' PEXPIREMEMBERAT z:__rand_int__ a 4000000000000
phase 'ZINCRBY z 1 b (under member TTLs)' ZINCRBY z:__rand_int__ 1 b
