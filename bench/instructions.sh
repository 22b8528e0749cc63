#!/usr/bin/env bash
# Instructions a workload costs the server, counted by callgrind: the
# figure to compare two builds by on this VM, which has no hardware
# counters and whose timings move by 10-20 % between runs
# (docs/PERFORMANCE.md, "Refactors: counting instructions, not time").
# Start-up and shutdown are included; the count moves by ~1-2 % between
# runs of one binary (the cron's ticks fall differently), so compare
# differences larger than that.
#
#   bench/instructions.sh BINARY [server args...] -- redis-benchmark args...
#   bench/instructions.sh target/release/lattice-server --active-replica yes \
#       -- -c 50 -P 16 -n 20000 -r 1000 INCR 'counter:__rand_int__'
#
# SETUP: a redis-cli command line run before the load, e.g.
#   SETUP="ACL SETUSER app on >p ~app:* +@read +@write" bench/instructions.sh BIN -- \
#       --user app -a p -c 50 -P 16 -n 20000 -r 1000 -t get
#
# SETUP_RESP: a file of RESP commands fed through redis-cli --pipe before
# the load (after SETUP), e.g. the data sets of bench/hll-geo.sh.
#
# A redis-server binary (its name ends in redis-server) is started without
# lattice's --server-threads, so both servers run the same command line.
#
# INCLUSIVE: a regex of function names (callgrind_annotate's file:function
# lines); each match is printed with its inclusive count, which, unlike the
# total, does not move with the cron's ticks between runs, e.g.
#   INCLUSIVE='conn::lookup_and_check \[|conn::process_input::\{\{closure\}\} \['
# (divide by the request count; a restricted user's AUTHs are apart).
#
# OUT: a path to keep callgrind's output at (for callgrind_annotate).
#
# PEER=1: an active peer (the same binary, not under callgrind, on the
# other CPU's time) pulls the measured server's stream for the whole load,
# so the server pays for recording its writes and feeding them to the peer
# (issue 24's pair writer); the peer's own work is not counted. The server
# needs --active-replica yes. Waits until the feed sent the whole stream
# before the shutdown, so the feed thread's work is all counted (in the
# total, apart from conn::dispatch's: INCLUSIVE='serve::serve::' shows it).
#
# Prints `<binary>: <instructions> instructions`.
set -euo pipefail
bin=$1; shift
server=(); while [[ $# -gt 0 && $1 != -- ]]; do server+=("$1"); shift; done
shift || true
port=${PORT:-7491}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
threads=(--server-threads 1)
[[ $bin == *redis-server ]] && threads=()
valgrind --tool=callgrind --callgrind-out-file="$dir/out" "$bin" --port "$port" --dir "$dir" \
    --save "" --appendonly no "${threads[@]}" "${server[@]}" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 600); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
peer_pid=""
if [[ -n ${PEER:-} ]]; then
    peer_port=$((port + 1))
    mkdir -p "$dir/peer"
    "$bin" --port "$peer_port" --dir "$dir/peer" --save "" --appendonly no --server-threads 1 \
        --active-replica yes >"$dir/peer.log" 2>&1 &
    peer_pid=$!
    trap 'kill "$peer_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
    for _ in $(seq 600); do redis-cli -p "$peer_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$peer_port" replicaof 127.0.0.1 "$port" >/dev/null
    for _ in $(seq 600); do
        redis-cli -p "$port" info replication | grep -q '^feed0:' && break
        sleep 0.1
    done
fi
if [[ -n ${SETUP:-} ]]; then
    # shellcheck disable=SC2086
    redis-cli -p "$port" $SETUP >/dev/null
fi
if [[ -n ${SETUP_RESP:-} ]]; then
    redis-cli -p "$port" --pipe <"$SETUP_RESP" >/dev/null
fi
redis-benchmark -p "$port" -q "$@" >/dev/null 2>&1
if [[ -n $peer_pid ]]; then
    # Until the feed sent the whole stream (an INFO a second: a few
    # thousand instructions, against the load's tens of millions).
    for _ in $(seq 120); do
        sleep 1
        redis-cli -p "$port" info replication | grep -q '^feed0:.*lag_bytes=0' && break
    done
    kill "$peer_pid" 2>/dev/null || true
fi
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$pid" || true
[[ -n ${OUT:-} ]] && cp "$dir/out" "$OUT"
total=$(callgrind_annotate "$dir/out" 2>/dev/null | grep -m1 -E 'PROGRAM TOTALS' | grep -oE '^[0-9,]+' | tr -d , || true)
echo "$bin: $total instructions"
if [[ -n ${INCLUSIVE:-} ]]; then
    callgrind_annotate --inclusive=yes --threshold=100 "$dir/out" 2>/dev/null | grep -E -- "$INCLUSIVE" |
        grep -v '=>' | sed -E 's/^ *([0-9,]+) +\([^)]*\) +[^ ]*\.rs:([^ ]+).*/  \1 \2/' || true
fi
