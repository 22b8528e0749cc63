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
# to SERVER_CPU with --server-threads 1 (the pair's peer to PEER_CPU,
# SERVER_CPU unless set), redis-benchmark to CLIENT_CPU.
#
# Two measures per node (DECISIONS 202):
# - wall clock (plain/s, active/s, writer/s, x-plain, writer/lone): what
#   redis-benchmark saw. With the peer on the writer's core, the writer's
#   rate also pays for its peer applying each write (on a real deployment
#   another machine), so writer/lone near 0.5 can mean "applying costs as
#   much as writing";
# - CPU time (the k/cpu-s columns, cpu x-plain, cpu w/lone): requests per
#   CPU-second of the node's own process (all its threads: workers, the
#   feed that sends the stream, the link; bench/lib.sh cpu_ns), read before
#   the load and after it (the writer's once its feed sent the whole
#   stream, so the sending is counted); the node's own cost per write,
#   which the client and a peer sharing the core move far less. peer
#   us/w: the peer's CPU per write, read once it applied them all.
# The writer's numbers include its peer catching up (both nodes' DEBUG
# DIGEST agree before the next row).
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
PEER_CPU=${PEER_CPU:-$SERVER_CPU}
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
echo "== merge: -P 16 -c 50 -n $REQUESTS -r $KEYSPACE; servers on CPU $SERVER_CPU (1 thread; the pair's peer on CPU $PEER_CPU), redis-benchmark on CPU $CLIENT_CPU"
echo "   (wall clock: plain/s, active/s, writer/s, x-plain = active/plain, w/lone = writer/active;"
echo "    CPU: k/cpu-s = thousand requests per CPU-second of the node's process, the ratios alike;"
echo "    peer us/w: the peer's CPU per write it applied; asks: key states the peer asked for;"
echo "    wire: bytes the writer's stream sent per byte of the commands its clients sent)"
printf '%-8s %10s %10s %10s %7s %7s | %9s %9s %9s %7s %7s %7s | %5s %5s\n' command plain/s active/s writer/s \
    x-plain w/lone plain-k/s active-k/s writer-k/s x-plain w/lone peer-us asks wire
pl=$BASE; la=$((BASE + 1)); pa=$((BASE + 2)); pb=$((BASE + 3))
start_node $pl; pid_pl=${NODE_PIDS[-1]}
start_node $la --active-replica yes; pid_la=${NODE_PIDS[-1]}
start_node $pa --active-replica yes; pid_pa=${NODE_PIDS[-1]}
SERVER_CPU=$PEER_CPU start_node $pb --active-replica yes; pid_pb=${NODE_PIDS[-1]}
link $pa $pb; link $pb $pa; wait_up $pa 1; wait_up $pb 1
# Waits until the writer's feed sent its whole stream (the CPU reading
# then counts the sending, and not the DEBUG DIGESTs of converge, which
# cost a node tens of ms each), then until the peer applied it.
sent() { # writer
    for _ in $(seq 1200); do
        cli "$1" info replication | grep -qE '^feed0:.*lag_bytes=0' && return
        sleep 0.05
    done
}
applied() { # writer peer
    local end at
    end=$(cli "$1" info replication | grep -oE 'active_stream_offset:[0-9]+' | cut -d: -f2)
    for _ in $(seq 1200); do
        at=$(cli "$2" info replication | grep -oE 'offset=[0-9]+' | head -1 | cut -d= -f2)
        ((${at:-0} >= ${end:-0})) && return
        sleep 0.05
    done
}
per_cpu() { # requests ns: thousand requests per CPU-second
    echo "$REQUESTS * 1000000 / $2" | bc -l
}
for c in "${ORDER[@]}"; do
    read -r -a argv <<<"${CMDS[$c]}"
    c0=$(cpu_ns $pid_pl); a=$(rps $pl "${argv[@]}"); c1=$(cpu_ns $pid_pl); ka=$(per_cpu $REQUESTS $((c1 - c0)))
    c0=$(cpu_ns $pid_la); b=$(rps $la "${argv[@]}"); c1=$(cpu_ns $pid_la); kb=$(per_cpu $REQUESTS $((c1 - c0)))
    s0=$(sent_bytes $pa); q0=$(state_asks $pb)
    c0=$(cpu_ns $pid_pa); p0=$(cpu_ns $pid_pb)
    w=$(rps $pa "${argv[@]}")
    sent $pa; c1=$(cpu_ns $pid_pa); applied $pa $pb; p1=$(cpu_ns $pid_pb)
    converge $pa $pb >/dev/null; kw=$(per_cpu $REQUESTS $((c1 - c0)))
    s1=$(sent_bytes $pa); q1=$(state_asks $pb)
    cmdbytes=$(resp_bytes "${argv[@]}")
    printf '%-8s %10s %10s %10s %7.2f %7.2f | %9.1f %9.1f %9.1f %7.2f %7.2f %7.2f | %5s %5.2f\n' "$c" "$a" "$b" "$w" \
        "$(echo "$b / $a" | bc -l)" "$(echo "$w / $b" | bc -l)" "$ka" "$kb" "$kw" \
        "$(echo "$kb / $ka" | bc -l)" "$(echo "$kw / $kb" | bc -l)" \
        "$(echo "($p1 - $p0) / 1000 / $REQUESTS" | bc -l)" $((q1 - q0)) \
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
