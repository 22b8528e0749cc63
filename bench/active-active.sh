#!/usr/bin/env bash
# Active-active replication (issue 12 "Benchmark"): SET throughput of a lone
# node, of each node of a pair, a 3-node and a 4-node full mesh while every
# node takes writes; bytes replicated per byte written; the catch-up time
# and peak RSS of a node killed and restarted empty after SIZE_MB of data
# was written to its peer.
#
# Rows: a lone plain node; a lone active node with no peer (the cost of
# writing the stream); a pair where one node takes writes (the other one's
# CPU per write it applied is the apply cost); a pair, a 3-mesh and a
# 4-mesh (multi-master) where every node takes writes.
#
# Load: redis-benchmark -t set -d VALUE_SIZE (100) -P 16 -c 50 -r KEYSPACE
# (1,000,000), REQUESTS (500,000) per node; with several nodes one
# redis-benchmark per node, all started at once (the key ranges overlap).
# Every server is pinned to SERVER_CPU (0), every redis-benchmark to
# CLIENT_CPU (1), each node with --server-threads 1: on this 2-core box all
# nodes share one core, so a node's "x lone" is mostly that sharing; the
# server CPU time per client write is the per-core measure.
#
# Columns: SET/s of the node's redis-benchmark; x lone: that / the lone
# plain node's; cpu us/w: the node's CPU time (all its threads, schedstat)
# per write its clients made, from the start of the load until every link
# has caught up (for a node without clients: per peer write it applied);
# cpu x: the lone node's cpu us/w / this node's, the throughput ratio to
# expect with a core per node when the server is the bottleneck; catch-up:
# seconds from the end of the load until every link has read its peers'
# streams; digests: DEBUG DIGEST equal on every node after that (yes, or
# never within WAIT_MAX). Each row is the median of ROUNDS rounds on the
# same nodes.
#
# Bytes replicated per byte written (all nodes writing at once): the sum
# over nodes of the growth of INFO active_sent_bytes (what the feeds wrote
# to their peers' sockets: records, seals, markers), divided by the bytes of the SET requests the
# clients sent, computed as requests x the request's size (*3 SET, 16-byte
# key, VALUE_SIZE value: 144 bytes at -d 100). Ideal: N-1. Printed beside
# it as checks: INFO total_net_input_bytes (the measured request bytes),
# the sum of what the links consumed (peerN: offset=), the conflicts
# (LATTICE.STATE asks, answered in the stream) and resyncs (snapshots after
# the first link, from the logs: their bytes are not in the stream).
#
# Restart: a linked pair; A is killed -9; SIZE_MB of LOAD_VALUE-byte values
# (distinct keys, redis-cli --pipe) is written to B; A restarts empty (no
# RDB/AOF) and REPLICAOF B: the time until A's DBSIZE, then DEBUG DIGEST,
# equal B's, and A's peak RSS (VmHWM) as a multiple of the dataset's
# used_memory: A's once caught up (B's also counts its active stream, a
# `repl-backlog-size` of it, more while a peer lags). B's RSS is sampled too.
#
# Every wait is bounded (WAIT_MAX); what does not converge prints "never".
#
#   bench/active-active.sh                        # everything, SIZE_MB=256
#   SIZE_MB=1024 SKIP_BUILD=1 bench/active-active.sh restart   # 1 GB restart only
#   REQUESTS=100000 ROUNDS=1 bench/active-active.sh lone pair  # some phases, quick
#
# Phases (arguments, default all): lone pair mesh3 mesh4 restart.
# Environment: REQUESTS (500000), VALUE_SIZE (100), KEYSPACE (1000000),
# PIPELINE (16), ROUNDS (3), SIZE_MB (256), LOAD_VALUE (1024), WAIT_MAX
# (120 s; the restart waits WAIT_MAX + SIZE_MB/4 s), SERVER_CPU (0),
# CLIENT_CPU (1), PEER_CPU (where nodes without clients run: SERVER_CPU;
# CLIENT_CPU keeps the applying node's cache and wake-ups off the writer's
# core, so "pair, one writer" shows the writer's own cost), SKIP_BUILD,
# KEEP_WORK (keep the servers' logs).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-500000}"
VALUE_SIZE="${VALUE_SIZE:-100}"
KEYSPACE="${KEYSPACE:-1000000}"
PIPELINE="${PIPELINE:-16}"
ROUNDS="${ROUNDS:-3}"
SIZE_MB="${SIZE_MB:-256}"
LOAD_VALUE="${LOAD_VALUE:-1024}"
WAIT_MAX="${WAIT_MAX:-120}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
PEER_CPU="${PEER_CPU:-$SERVER_CPU}"
CLIENTS=50
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
NODE_PIDS=()
trap 'kill -9 "${NODE_PIDS[@]}" 2>/dev/null || true; cleanup' EXIT

PHASES=("$@")
((${#PHASES[@]})) || PHASES=(lone pair mesh3 mesh4 restart)
want() { [[ " ${PHASES[*]} " == *" $1 "* ]]; }

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet --bin lattice-server)
fi

# A redis-cli that cannot hang the script on a stuck server.
rc() { timeout 60 redis-cli -p "$@"; }
field() { rc "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2; exit }'; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# node NAME PORT ARGS...: starts lattice-server in $WORK/NAME pinned to
# SERVER_CPU; its pid goes in NODE_PID and NODE_PIDS.
node() {
    local name="$1" port="$2"
    shift 2
    mkdir -p "$WORK/$name"
    taskset -c "${NODE_CPU:-$SERVER_CPU}" "$LATTICE" --port "$port" --server-threads 1 --save "" \
        --appendonly no --dir "$WORK/$name" --enable-debug-command yes "$@" \
        >>"$WORK/$name/log" 2>&1 &
    NODE_PID=$!
    NODE_PIDS+=("$NODE_PID")
    wait_port "$port"
}

stop_nodes() {
    kill "${NODE_PIDS[@]}" 2>/dev/null || true
    wait "${NODE_PIDS[@]}" 2>/dev/null || true
    NODE_PIDS=()
}

# linked PORT PEERS: every peer link of the node connected and PEERS peers
# reading its stream.
linked() {
    local info
    info="$(rc "$1" INFO replication | tr -d '\r')"
    [[ "$(grep -c '^peer[0-9]*:.*state=connected' <<<"$info")" == "$2" ]] &&
        grep -qx "active_feeds:$2" <<<"$info"
}

# mesh PORTS...: every node REPLICAOF every other; waits until all links
# are up (bounded). Returns non-zero if they never were.
mesh() {
    local p q n=$(($# - 1)) i
    for p in "$@"; do
        for q in "$@"; do
            [[ $p == "$q" ]] || rc "$p" REPLICAOF 127.0.0.1 "$q" >/dev/null
        done
    done
    for ((i = 0; i < WAIT_MAX * 10; i++)); do
        local all=1
        for p in "$@"; do linked "$p" "$n" || { all=0; break; }; done
        ((all)) && return 0
        sleep 0.1
    done
    echo "links never all up" >&2
    return 1
}

# caught_up PORTS...: seconds until every link has read its peer's whole
# stream (peerN offset= reaches the peer's active_stream_offset), or "never"
# after WAIT_MAX. Cheap to poll, unlike DEBUG DIGEST, which would add its
# own CPU time to the nodes' (measured right after).
caught_up() {
    local t0 i p ok line
    t0=$(now)
    for ((i = 0; i < WAIT_MAX * 10; i++)); do
        ok=1
        declare -A ends=()
        for p in "$@"; do ends[$p]=$(field "$p" replication active_stream_offset); done
        for p in "$@"; do
            while read -r line; do
                [[ -z $line ]] && continue
                local q o
                q=$(sed 's/.*,port=\([0-9]*\),.*/\1/' <<<"$line")
                o=$(sed 's/.*,offset=\([0-9]*\),.*/\1/' <<<"$line")
                # >=: the peer's cron may have added a PING since we read its end.
                ((o >= ${ends[$q]:-0})) || { ok=0; break; }
            done < <(rc "$p" INFO replication | tr -d '\r' | grep '^peer[0-9]*:')
            ((ok)) || break
        done
        if ((ok)); then printf '%.1f' "$(since "$t0")"; return; fi
        sleep 0.1
    done
    echo never
}

# converge PORTS...: seconds until every DEBUG DIGEST is equal, or "never"
# after WAIT_MAX (prints it).
converge() {
    local t0 d first p ok i
    t0=$(now)
    for ((i = 0; i < WAIT_MAX * 5; i++)); do
        ok=1 first=""
        for p in "$@"; do
            d="$(rc "$p" DEBUG DIGEST 2>/dev/null || echo "?$p")"
            [[ -z $first ]] && first=$d
            [[ $d == "$first" ]] || { ok=0; break; }
        done
        if ((ok)); then printf '%.1f' "$(since "$t0")"; return; fi
        sleep 0.2
    done
    echo never
}

# The bytes of one SET request redis-benchmark sends (16-byte key with -r).
req_bytes() {
    local d=$VALUE_SIZE
    echo $((4 + 4 + 5 + 5 + 16 + 2 + 1 + ${#d} + 2 + d + 2))
}
REQ_BYTES=$(req_bytes)

# bench_all PORTS...: one redis-benchmark per node, all at once, pinned to
# CLIENT_CPU; SET/s of each in $WORK/rps.<port>, the wall time in WALL.
bench_all() {
    local p pids=() t0
    t0=$(now)
    for p in "$@"; do
        taskset -c "$CLIENT_CPU" timeout 900 redis-benchmark -p "$p" -c "$CLIENTS" \
            -n "$REQUESTS" -d "$VALUE_SIZE" -r "$KEYSPACE" -P "$PIPELINE" -t set --csv -q \
            2>/dev/null | awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }' \
            >"$WORK/rps.$p" &
        pids+=($!)
    done
    wait "${pids[@]}"
    WALL=$(since "$t0")
}

sum_field() { # PORT SECTION FIELD... over ports given in PORTS
    local s=0 p sect="$1" f="$2"
    for p in "${PORTS[@]}"; do s=$((s + $(field "$p" "$sect" "$f"))); done
    echo "$s"
}
# Bytes the feeds wrote to peers (INFO active_sent_bytes), summed over PORTS.
stream_bytes() {
    local s=0 p
    for p in "${PORTS[@]}"; do
        s=$((s + $(field "$p" replication active_sent_bytes)))
    done
    echo "$s"
}
# FIELD of every peerN: line (offset=, conflicts=), summed over PORTS.
peer_sum() {
    local s=0 p
    for p in "${PORTS[@]}"; do
        s=$((s + $(rc "$p" INFO replication | tr -d '\r' |
            awk -F"$1=" '/^peer[0-9]+:/ { split($2, a, ","); s += a[1] } END { print s + 0 }')))
    done
    echo "$s"
}
link_bytes() { peer_sum offset; } # what the links consumed
conflicts() { peer_sum conflicts; }
snapshots() { cat "$WORK"/n*/log 2>/dev/null | grep -c 'takes a snapshot' || true; }

LONE_RPS="" LONE_CPU=""
row() { printf '%-24s %-5s %9s %7s %9s %6s %9s %7s %s\n' "$@"; }

# group LABEL NODES WRITERS FLAGS...: NODES nodes (1 = lone), linked in a
# full mesh; the first WRITERS of them take writes, all at once.
group() {
    local label="$1" n="$2" w="$3" i p
    shift 3
    PORTS=() PIDS_G=()
    rm -rf "$WORK"/n*
    for ((i = 0; i < n; i++)); do
        p=$(free_port)
        NODE_CPU=$SERVER_CPU
        ((i < w)) || NODE_CPU=$PEER_CPU
        node "n$i" "$p" "$@"
        PORTS+=("$p") PIDS_G+=("$NODE_PID")
    done
    if ((n > 1)); then mesh "${PORTS[@]}" || { row "$label" - "links never up"; stop_nodes; return; }; fi
    local snaps0 sb0=0 lb0=0 in0 cpu0=() cpu1=() conv="" same=yes round walls="" rps=() uss=() div
    snaps0=$(snapshots)
    ((n > 1)) && sb0=$(stream_bytes) lb0=$(link_bytes)
    in0=$(sum_field stats total_net_input_bytes)
    for ((round = 0; round < ROUNDS; round++)); do
        for i in "${!PIDS_G[@]}"; do cpu0[i]=$(cpu_ns "${PIDS_G[i]}"); done
        bench_all "${PORTS[@]:0:w}"
        walls+=" $(echo "$w * $REQUESTS / $WALL" | bc)"
        if ((n > 1)); then conv+=" $(caught_up "${PORTS[@]}")"; fi
        for i in "${!PIDS_G[@]}"; do cpu1[i]=$(cpu_ns "${PIDS_G[i]}"); done
        if ((n > 1)) && [[ "$(converge "${PORTS[@]}")" == never ]]; then same=never; fi
        for i in "${!PIDS_G[@]}"; do
            # A node that takes no writes: CPU per peer write it applied.
            div=$REQUESTS
            ((i < w)) || div=$((REQUESTS * w))
            uss[i]+=" $(echo "scale=3; (${cpu1[i]} - ${cpu0[i]}) / $div / 1000" | bc)"
            ((i < w)) && rps[i]+=" $(cat "$WORK/rps.${PORTS[i]}")"
        done
    done
    # Medians over the rounds; "never" if any round did not converge.
    if [[ -z $conv ]]; then conv=-; elif [[ $conv == *never* ]]; then conv=never; else conv=$(median <<<"$conv"); fi
    ((n > 1)) || same=-
    local sum=0 r us x cx
    for i in "${!PORTS[@]}"; do
        us=$(median <<<"${uss[i]}")
        if ((i >= w)); then
            row "$label" "n$i" - - "$(printf %.2f "$us")" - "$conv" "$same" "(no clients: CPU per peer write applied)"
            continue
        fi
        r=$(median <<<"${rps[i]}")
        if [[ -z $LONE_RPS ]]; then LONE_RPS=$r LONE_CPU=$us; fi
        x=$(echo "scale=2; $r / $LONE_RPS" | bc)
        cx=$(echo "scale=2; $LONE_CPU / $us" | bc)
        row "$label" "n$i" "$(printf %.0f "$r")" "$x" "$(printf %.2f "$us")" "$cx" "$conv" "$same"
        sum=$(echo "$sum + $r" | bc)
    done
    if ((w > 1)); then
        row "$label" sum "$(printf %.0f "$sum")" "$(echo "scale=2; $sum / $LONE_RPS" | bc)" "" "" "" "" \
            "(all requests / wall time: $(median <<<"$walls") SET/s)"
    fi
    if ((n > 1)); then
        local sb lb in written
        sb=$(($(stream_bytes) - sb0)) lb=$(($(link_bytes) - lb0))
        in=$(($(sum_field stats total_net_input_bytes) - in0))
        written=$((ROUNDS * w * REQUESTS * REQ_BYTES))
        BYTES_LINES+=("$(printf '%-24s %5.2f (ideal %d)   sent to peers %d B / client SETs %d B (%d x %d B); links consumed %d B; total_net_input_bytes %d B; conflicts %d; resyncs %d' \
            "$label" "$(echo "scale=4; $sb / $written" | bc)" $((n - 1)) "$sb" "$written" \
            $((ROUNDS * w * REQUESTS)) "$REQ_BYTES" "$lb" "$in" "$(conflicts)" $(($(snapshots) - snaps0)))")
    fi
    stop_nodes
}

# The restart: see the header.
restart() {
    local pa pb a b keys t0 i dbs_t="never" dig_t="never" hwm used_a used_b rss_b0 rss_b peak_b=0
    pa=$(free_port) pb=$(free_port)
    rm -rf "$WORK"/n*
    node n0 "$pa" --active-replica yes
    a=$NODE_PID
    node n1 "$pb" --active-replica yes
    b=$NODE_PID
    PORTS=("$pa" "$pb")
    mesh "$pa" "$pb" || { echo "restart: links never up"; stop_nodes; return; }
    kill -9 "$a"
    wait "$a" 2>/dev/null || true
    keys=$((SIZE_MB * 1048576 / LOAD_VALUE))
    taskset -c "$CLIENT_CPU" python3 - "$keys" "$LOAD_VALUE" <<'EOF' | taskset -c "$CLIENT_CPU" timeout 1800 redis-cli -p "$pb" --pipe >"$WORK/pipe.log" 2>&1
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
val = b"v" * size
head = b"*3\r\n$3\r\nSET\r\n$16\r\n"
tail = b"\r\n$%d\r\n%s\r\n" % (size, val)
out = sys.stdout.buffer
buf = []
for i in range(n):
    buf.append(head + b"key:%012d" % i + tail)
    if len(buf) == 10000:
        out.write(b"".join(buf))
        buf = []
out.write(b"".join(buf))
EOF
    if ! grep -q "errors: 0, replies: $keys" "$WORK/pipe.log"; then
        echo "restart: the load into B failed:" >&2
        cat "$WORK/pipe.log" >&2
        stop_nodes
        return
    fi
    used_b=$(field "$pb" memory used_memory)
    rss_b0=$(rss_kb "$b")
    local dbs
    dbs=$(rc "$pb" DBSIZE)
    rm -rf "$WORK/n0"
    node n0 "$pa" --active-replica yes
    a=$NODE_PID
    t0=$(now)
    rc "$pa" REPLICAOF 127.0.0.1 "$pb" >/dev/null
    local limit=$(((WAIT_MAX + SIZE_MB / 4) * 10))
    for ((i = 0; i < limit; i++)); do
        rss_b=$(rss_kb "$b")
        ((rss_b > peak_b)) && peak_b=$rss_b
        if [[ $dbs_t == never ]]; then
            [[ "$(rc "$pa" DBSIZE)" == "$dbs" ]] && dbs_t="$(printf %.1f "$(since "$t0")") s"
        else
            # The time the check began: a DEBUG DIGEST of a large dataset
            # takes seconds itself (its duration is printed).
            local t1 t2
            t1=$(since "$t0")
            if [[ "$(rc "$pa" DEBUG DIGEST)" == "$(rc "$pb" DEBUG DIGEST)" ]]; then
                t2=$(since "$t0")
                dig_t="$(printf %.1f "$t1") s (the two DEBUG DIGESTs took $(printf %.1f "$(echo "$t2 - $t1" | bc)") s)"
                break
            fi
        fi
        sleep 0.1
    done
    hwm=$(hwm_kb "$a")
    used_a=$(field "$pa" memory used_memory)
    printf 'restart of an empty node after %d MB (%d keys x %d B) written to its peer:\n' \
        "$SIZE_MB" "$keys" "$LOAD_VALUE"
    printf '  catch-up: DBSIZE equal after %s; DEBUG DIGEST equal when checked at %s\n' "$dbs_t" "$dig_t"
    printf '  restarted node A: peak RSS (VmHWM) %d MB = %.2f x the dataset'"'"'s used_memory (%d MB: A'"'"'s once caught up)\n' \
        $((hwm / 1024)) "$(echo "scale=4; $hwm * 1024 / $used_a" | bc)" $((used_a / 1048576))
    printf '  serving peer B: used_memory %d MB (the dataset and its active stream), RSS %d MB before, peak %d MB while sending; B'"'"'s VmHWM (loaded by clients) %d MB = %.2f x A'"'"'s used_memory\n' \
        $((used_b / 1048576)) $((rss_b0 / 1024)) $((peak_b / 1024)) $(($(hwm_kb "$b") / 1024)) \
        "$(echo "scale=4; $(hwm_kb "$b") * 1024 / $used_a" | bc)"
    stop_nodes
}

BYTES_LINES=()
if want lone || want pair || want mesh3 || want mesh4; then
    echo "== active-active: SET -d $VALUE_SIZE -P $PIPELINE -c $CLIENTS -r $KEYSPACE, $REQUESTS requests per node and round, median of $ROUNDS rounds, one redis-benchmark per node at once; servers on CPU $SERVER_CPU, redis-benchmark on CPU $CLIENT_CPU"
    row setup node SET/s "x lone" "cpu us/w" "cpu x" catch-up digests
fi
want lone && group "lone (plain)" 1 1
want lone && group "lone, active, no peer" 1 1 --active-replica yes
if [[ -z $LONE_RPS ]] && { want pair || want mesh3 || want mesh4; }; then
    LONE_RPS=1 LONE_CPU=1
    echo "(no lone phase: the x lone columns are against 1)"
fi
want pair && group "pair, one writer" 2 1 --active-replica yes
want pair && group "pair" 2 2 --active-replica yes
want mesh3 && group "3-mesh" 3 3 --active-replica yes --multi-master yes
want mesh4 && group "4-mesh" 4 4 --active-replica yes --multi-master yes
if ((${#BYTES_LINES[@]})); then
    echo
    echo "bytes replicated per byte written (all nodes writing):"
    printf '  %s\n' "${BYTES_LINES[@]}"
fi
if want restart; then
    echo
    restart
fi
