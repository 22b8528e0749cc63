#!/usr/bin/env bash
# Merge semantics (issue 13 "Benchmark"): INCR and HSET throughput of a
# lone active node and of the writing node of an active pair (its peer
# merges every write's state: a state round trip per write, DECISIONS 58),
# with a plain lone node for reference; then memory per counter key
# incremented on one node and on all three nodes of a mesh.
#
# Load: redis-benchmark -P 16 -c 50 -n REQUESTS -r KEYSPACE, INCR
# counter:__rand_int__ and HSET h:__rand_int__ f __rand_int__ (small
# hashes); servers pinned to SERVER_CPU with --server-threads 1,
# redis-benchmark to CLIENT_CPU. Catch-up: seconds after the load until
# both nodes' DEBUG DIGEST agree.
# Memory: used_memory growth / keys after KEYS INCRs (node 1 only, then
# the same keys on nodes 2 and 3), against a plain node's growth.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-200000}
KEYSPACE=${KEYSPACE:-100000}
KEYS=${KEYS:-100000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7450}
DIR=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; rm -rf "$DIR"' EXIT

start() { # port extra...
    local p=$1; shift
    mkdir -p "$DIR/$p"
    taskset -c "$SERVER_CPU" "$BIN" --port "$p" --dir "$DIR/$p" --save "" --appendonly no \
        --server-threads 1 --enable-debug-command yes --node-slot $((p % 1000)) "$@" \
        >"$DIR/$p.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "server on $p did not start" >&2; exit 1
}
cli() { redis-cli -p "$@"; }
rps() { # port command...
    local p=$1; shift
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$p" -c 50 -P 16 -n "$REQUESTS" -r "$KEYSPACE" \
        -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1
}
converge() { # portA portB: seconds until the digests agree
    local t0; t0=$(date +%s.%N)
    for _ in $(seq 600); do
        [[ "$(cli "$1" debug digest)" == "$(cli "$2" debug digest)" ]] && break
        sleep 0.1
    done
    echo "$(date +%s.%N) - $t0" | bc
}
link() { cli "$1" replicaof 127.0.0.1 "$2" >/dev/null; }
wait_up() { # port peers
    for _ in $(seq 100); do
        [[ $(cli "$1" info replication | grep -c "state=connected") -ge $2 ]] && return
        sleep 0.1
    done
}

INCR=(INCR "counter:__rand_int__")
HSET=(HSET "h:__rand_int__" f "__rand_int__")
echo "== merge: -P 16 -c 50 -n $REQUESTS -r $KEYSPACE; servers on CPU $SERVER_CPU (1 thread), redis-benchmark on CPU $CLIENT_CPU"
printf '%-28s %12s %12s %10s\n' row INCR/s HSET/s catch-up
p=$BASE
start $p; a=$(rps $p "${INCR[@]}"); b=$(rps $p "${HSET[@]}")
printf '%-28s %12s %12s %10s\n' "lone plain node" "$a" "$b" -
p=$((BASE + 1))
start $p --active-replica yes; a=$(rps $p "${INCR[@]}"); b=$(rps $p "${HSET[@]}")
printf '%-28s %12s %12s %10s\n' "lone active node" "$a" "$b" -
pa=$((BASE + 2)); pb=$((BASE + 3))
start $pa --active-replica yes; start $pb --active-replica yes
link $pa $pb; link $pb $pa; wait_up $pa 1; wait_up $pb 1
a=$(rps $pa "${INCR[@]}"); ca=$(converge $pa $pb)
b=$(rps $pa "${HSET[@]}"); cb=$(converge $pa $pb)
printf '%-28s %12s %12s %10s\n' "pair, one node writing" "$a" "$b" "$ca/$cb s"
conflicts=$(cli $pb info replication | grep -oE 'conflicts=[0-9]+' | head -1)
echo "   the peer's state asks: $conflicts"

echo "== memory per counter key ($KEYS keys drawn at random): INCR against SET of the same keys"
mem() { cli "$1" info memory | grep '^used_memory:' | cut -d: -f2 | tr -d '\r'; }
load() { # port command...: KEYS requests over KEYS keys, then the bytes per key it grew by
    local p=$1 m0 n; shift
    cli "$p" flushall >/dev/null; sleep 0.5; m0=$(mem "$p")
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$p" -c 50 -P 16 -n "$KEYS" -r "$KEYS" -q "$@" >/dev/null 2>&1 || true
    n=$(cli "$p" dbsize)
    echo $(( ($(mem "$p") - m0) / n ))
}
p=$((BASE + 4)); start $p
echo "plain node:   SET $(load $p SET "cnt:__rand_int__" 1) B/key, INCR $(load $p INCR "cnt:__rand_int__") B/key"
m=( $((BASE + 5)) $((BASE + 6)) $((BASE + 7)) )
for x in "${m[@]}"; do start "$x" --active-replica yes --multi-master yes; done
for x in "${m[@]}"; do for y in "${m[@]}"; do [[ $x != "$y" ]] && link "$x" "$y"; done; done
for x in "${m[@]}"; do wait_up "$x" 2; done
# The stream's records count in used_memory on both rows alike.
s=$(load "${m[0]}" SET "cnt:__rand_int__" 1)
converge "${m[0]}" "${m[1]}" >/dev/null
i=$(load "${m[0]}" INCR "cnt:__rand_int__")
converge "${m[0]}" "${m[1]}" >/dev/null; converge "${m[0]}" "${m[2]}" >/dev/null
echo "3-mesh, one node incrementing: SET $s B/key, INCR $i B/key: a counter's state $((i - s)) B"
# The same keys incremented on the two other nodes too (node 1's memory).
m1=$(mem "${m[0]}"); n=$(cli "${m[0]}" dbsize)
for x in "${m[1]}" "${m[2]}"; do
    cli "${m[0]}" --scan --pattern 'cnt:*' | awk '{print "INCR " $1}' | cli "$x" >/dev/null || true
done
converge "${m[0]}" "${m[1]}" >/dev/null; converge "${m[0]}" "${m[2]}" >/dev/null
echo "3-mesh, all three incrementing each key: +$(( ($(mem "${m[0]}") - m1) / n )) B/key more on node 1"
