#!/usr/bin/env bash
# Stream facts (issue 25 item 5, DECISIONS 165-168): both nodes of an active
# pair XADD to ONE stream at the same time, so each node's key keeps moving
# through its own XADDs while the peer's arrive. For each row: the XADDs/s
# each node served, the key states the two links asked for (`asks`, INFO
# `conflicts=`: 0 where every write travels as a fact), and the bytes both
# nodes' streams sent per byte of the commands their clients sent (`wire`).
# The stream ends with the same entries on both (DEBUG DIGEST) and XLEN is
# checked against the adds (rows without trims).
#
# Load: two redis-benchmark runs at once, one per node, -P 16 -c 50 -n
# REQUESTS; servers pinned to SERVER_CPU with --server-threads 1, the
# clients to CLIENT_CPU. BIN=<binary> compares another build (main's).
# Stream facts are on since the twentieth session (`merge::stream::
# STREAM_FACTS`, DECISIONS 182); the nineteenth session's numbers in
# docs/STATUS.md were taken with the switch flipped by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-100000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7470}
# shellcheck source=bench/lib.sh
source bench/lib.sh

cli() { redis-cli -p "$@"; }
bench() { # port command...: requests per second
    local p=$1; shift
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$p" -c 50 -P 16 -n "$REQUESTS" -r 1000000 \
        -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE '[0-9.]+ requests per second' | tail -1 | cut -d' ' -f1
}
converge() {
    for _ in $(seq 600); do
        [[ "$(cli "$1" debug digest)" == "$(cli "$2" debug digest)" ]] && return
        sleep 0.1
    done
    echo "the nodes did not converge" >&2; exit 1
}

pa=$BASE; pb=$((BASE + 1))
start_node $pa --active-replica yes; start_node $pb --active-replica yes
cli $pa replicaof 127.0.0.1 $pb >/dev/null; cli $pb replicaof 127.0.0.1 $pa >/dev/null
for _ in $(seq 100); do
    [[ $(cli $pa info replication | grep -c state=connected) -ge 1 &&
       $(cli $pb info replication | grep -c state=connected) -ge 1 ]] && break
    sleep 0.1
done
echo "== $BIN: both nodes XADD to one stream at once; -P 16 -c 50 -n $REQUESTS per node"
printf '%-28s %10s %10s %6s %6s %8s\n' row a/s b/s asks wire xlen
row() { # name, then the command
    local name=$1; shift
    cli $pa del s >/dev/null; cli $pa xadd s '*' f first >/dev/null; converge $pa $pb
    local s0=$(( $(sent_bytes $pa) + $(sent_bytes $pb) )) q0=$(( $(state_asks $pa) + $(state_asks $pb) ))
    local ra=$WORK/ra rb=$WORK/rb
    bench $pa "$@" >"$ra" & local j=$!
    bench $pb "$@" >"$rb"; wait $j
    converge $pa $pb
    local s1=$(( $(sent_bytes $pa) + $(sent_bytes $pb) )) q1=$(( $(state_asks $pa) + $(state_asks $pb) ))
    local bytes; bytes=$(resp_bytes "$@")
    printf '%-28s %10s %10s %6s %6.2f %8s\n' "$name" "$(cat "$ra")" "$(cat "$rb")" $((q1 - q0)) \
        "$(echo "($s1 - $s0) / (2 * $REQUESTS * $bytes)" | bc -l)" "$(cli $pa xlen s)"
}
row "XADD *" XADD s '*' f __rand_int__
row "XADD MAXLEN ~ 1000 *" XADD s MAXLEN '~' 1000 '*' f __rand_int__
row "XADD MAXLEN 1000 *" XADD s MAXLEN 1000 '*' f __rand_int__
