#!/usr/bin/env bash
# Merge semantics (issues 13 and 24 "Benchmark"): for INCR, HSET, HINCRBY,
# SADD, ZINCRBY and LPUSH, the throughput of a lone plain node, a lone
# active node, and the writing node of an active pair (its peer applies
# each write's fact, or asks for the key's state: `asks`), with the bytes
# the writer's stream sent per byte its clients sent; then SADD of one
# member to a set of 10 and to a set of BIG (1,000,000) members on the
# pair's writer; then memory per counter key incremented on one node and
# on all three nodes of a mesh.
#
# Load: redis-benchmark -P 16 -c 50 -n REQUESTS -r KEYSPACE; servers pinned
# to SERVER_CPU with --server-threads 1, redis-benchmark to CLIENT_CPU. The
# writer's numbers include its peer catching up (both nodes' DEBUG DIGEST
# agree before the next row).
# Memory: used_memory growth / keys after KEYS INCRs (node 1 only, then
# the same keys on nodes 2 and 3), against a plain node's growth.
# ONLY=memory runs the memory rows alone, ONLY=throughput the command rows
# alone; COMMANDS="LPUSH SADD" picks the command rows.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-200000}
KEYSPACE=${KEYSPACE:-100000}
KEYS=${KEYS:-100000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7450}
# shellcheck source=bench/lib.sh
source bench/lib.sh

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

# The merging writes of issue 24's benchmark, each over KEYSPACE keys.
declare -A CMDS=(
    [INCR]='INCR counter:__rand_int__'
    [HSET]='HSET h:__rand_int__ f __rand_int__'
    [HINCRBY]='HINCRBY hi:__rand_int__ f 1'
    [SADD]='SADD s:__rand_int__ __rand_int__'
    [ZINCRBY]='ZINCRBY z:__rand_int__ 1 m'
    [LPUSH]='LPUSH l:__rand_int__ x'
)
read -r -a ORDER <<<"${COMMANDS:-INCR HSET HINCRBY SADD ZINCRBY LPUSH}" # COMMANDS="LPUSH": those rows alone
if [[ ${ONLY:-} != memory ]]; then # ONLY=memory: the memory rows alone
echo "== merge: -P 16 -c 50 -n $REQUESTS -r $KEYSPACE; servers on CPU $SERVER_CPU (1 thread), redis-benchmark on CPU $CLIENT_CPU"
echo "   (writer/lone: the pair's writer against a lone active node; asks: key states its peer asked for;"
echo "    wire: bytes its stream sent per byte of the commands its clients sent)"
printf '%-8s %12s %12s %12s %8s %8s %8s %9s\n' command plain/s active/s writer/s x-plain writer/lone asks wire
pl=$BASE; la=$((BASE + 1)); pa=$((BASE + 2)); pb=$((BASE + 3))
start_node $pl; start_node $la --active-replica yes
start_node $pa --active-replica yes; start_node $pb --active-replica yes
link $pa $pb; link $pb $pa; wait_up $pa 1; wait_up $pb 1
for c in "${ORDER[@]}"; do
    read -r -a argv <<<"${CMDS[$c]}"
    a=$(rps $pl "${argv[@]}"); b=$(rps $la "${argv[@]}")
    s0=$(sent_bytes $pa); q0=$(state_asks $pb)
    w=$(rps $pa "${argv[@]}"); converge $pa $pb >/dev/null
    s1=$(sent_bytes $pa); q1=$(state_asks $pb)
    cmdbytes=$(resp_bytes "${argv[@]}")
    printf '%-8s %12s %12s %12s %8.2f %8.2f %8s %9.2f\n' "$c" "$a" "$b" "$w" \
        "$(echo "$b / $a" | bc -l)" "$(echo "$w / $b" | bc -l)" $((q1 - q0)) \
        "$(echo "($s1 - $s0) / ($REQUESTS * $cmdbytes)" | bc -l)"
done

[[ ${ONLY:-} == throughput ]] && exit 0 # ONLY=throughput: the rows above alone
# SADD of one member to a set of 10 and to a set of BIG members, on the pair's writer.
BIG=${BIG:-1000000}
python3 - "$BIG" <<'PY' | cli $pa --pipe >/dev/null
import sys
n = int(sys.argv[1]); step = 10000
for start in range(0, n, step):
    members = ["m%d" % i for i in range(start, min(n, start + step))]
    args = ["SADD", "big"] + members
    sys.stdout.write("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args))
args = ["SADD", "small"] + ["m%d" % i for i in range(10)]
sys.stdout.write("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args))
PY
t=$(converge $pa $pb)
echo "== a set of $(cli $pb scard big) members built on the writer (SADDs of 10,000) reached its peer ${t}s after"
q0=$(state_asks $pb)
small=$(rps $pa SADD small "n__rand_int__"); converge $pa $pb >/dev/null
big=$(rps $pa SADD big "n__rand_int__"); converge $pa $pb >/dev/null
printf 'SADD of one member on the pair writer: to a set of 10 %s/s, to a set of %s %s/s (%.2fx); peer asks %s\n' \
    "$small" "$(cli $pa scard big)" "$big" "$(echo "$big / $small" | bc -l)" $(( $(state_asks $pb) - q0 ))

fi
echo "== memory per counter key ($KEYS keys drawn at random): INCR against SET of the same keys"
mem() { cli "$1" info memory | grep '^used_memory:' | cut -d: -f2 | tr -d '\r'; }
load() { # port command...: KEYS requests over KEYS keys, then the bytes per key it grew by
    local p=$1 m0 n; shift
    cli "$p" flushall >/dev/null; sleep 0.5; m0=$(mem "$p")
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$p" -c 50 -P 16 -n "$KEYS" -r "$KEYS" -q "$@" >/dev/null 2>&1 || true
    n=$(cli "$p" dbsize)
    echo $(( ($(mem "$p") - m0) / n ))
}
p=$((BASE + 4)); start_node $p
echo "plain node:   SET $(load $p SET "cnt:__rand_int__" 1) B/key, INCR $(load $p INCR "cnt:__rand_int__") B/key"
m=( $((BASE + 5)) $((BASE + 6)) $((BASE + 7)) )
for x in "${m[@]}"; do start_node "$x" --active-replica yes --multi-master yes; done
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
# Sets: one set of about KEYS * 0.63 members, SADDed on node 1; used_memory
# growth per member on node 1 (the writer), node 2 (a peer applying the
# facts) and a plain node.
per_member() { # port m0: bytes per member of set s since m0
    echo $(( ($(mem "$1") - $2) / $(cli "$1" scard s) ))
}
cli "$p" flushall >/dev/null; cli "${m[0]}" flushall >/dev/null
converge "${m[0]}" "${m[1]}" >/dev/null; sleep 0.5
p0=$(mem "$p"); w0=$(mem "${m[0]}"); r0=$(mem "${m[1]}")
for x in "$p" "${m[0]}"; do
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$x" -c 50 -P 16 -n "$KEYS" -r "$KEYS" -q \
        SADD s "m__rand_int__" >/dev/null 2>&1 || true
done
converge "${m[0]}" "${m[1]}" >/dev/null
echo "set members ($(cli "${m[0]}" scard s)): writer $(per_member "${m[0]}" "$w0") B, peer $(per_member "${m[1]}" "$r0") B, plain node $(per_member "$p" "$p0") B per member"
