#!/usr/bin/env bash
# Consumer-group facts (issue 25 item 5, DECISIONS 239-240): an active pair
# runs a job queue on one stream (per job: XADD, XREADGROUP GROUP g <worker>
# COUNT 1 STREAMS s >, XACK of what it read). For each row: the jobs each
# node's worker ran per second, and the key states the two links asked for
# (`asks`, INFO `conflicts=`: 0 where every write traveled as a fact). The
# pair must end with one stream (DEBUG DIGEST) and one XINFO GROUPS (with
# entries-read and lag) on both nodes.
#
# Rows: "one node at a time" (a's worker, then b's: no concurrency, every
# write's causal base is at the peer); "both at once" (both workers on the
# one group: reads of the same entries and the group's last ID race, which
# facts cannot order: those ask); "claims" (the recovery path, DECISIONS
# 254-255: a's worker reads its jobs and dies before acknowledging them;
# on b a recoverer makes a consumer, takes them over with XAUTOCLAIM COUNT
# 10, hands every other batch to a third consumer with XCLAIM, acknowledges
# them and deletes the dead worker; the rate is of claimed jobs); "noack,
# two streams" (DECISIONS 285: per job an XADD to each of s and t and one
# XREADGROUP ... NOACK COUNT 1 STREAMS s t > >, a's worker then b's); "key
# writes" (DECISIONS 282-286: per round on a, then on b, XSETID s with
# ENTRIESADDED, EXPIRE s, PERSIST s, DEL s, XGROUP CREATE s g $ MKSTREAM;
# the rate is of rounds); "made, TTL, renamed" (DECISIONS 297-300: per
# round on a, then on b, DEL s, XADD s (making it), EXPIRE s, XADD s,
# XGROUP CREATE s g $, XADD s, a NOACK read of s, RENAME s u and back,
# COPY s v REPLACE; the rate is of rounds).
#
# Workers are Python (redis-py), one connection each, no pipelining: the
# row measures asks, not throughput. BIN=<binary> compares another build.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
JOBS=${JOBS:-2000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7480}
# shellcheck source=bench/lib.sh
source bench/lib.sh

cli() { redis-cli -p "$@"; }
groups_of() { cli "$1" xinfo groups s | tr '\n' ' '; }
converge() {
    for _ in $(seq 600); do
        [[ "$(cli "$1" debug digest)" == "$(cli "$2" debug digest)" &&
           "$(groups_of "$1")" == "$(groups_of "$2")" ]] && return
        sleep 0.1
    done
    echo "the nodes did not converge" >&2; exit 1
}
worker() { # port name jobs [noack]: jobs per second (noack: a worker that
           # reads its jobs and dies before acknowledging them)
    taskset -c "$CLIENT_CPU" python3 - "$@" <<'PY'
import sys, time, redis
port, name, jobs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else ""
r = redis.Redis(port=port)
t = time.time()
for i in range(jobs):
    if mode == "noack2":
        r.xadd("s", {"job": i}); r.xadd("t", {"job": i})
        r.xreadgroup("g", name, {"s": ">", "t": ">"}, count=1, noack=True)
        continue
    r.xadd("s", {"job": i})
    got = r.xreadgroup("g", name, {"s": ">"}, count=1)
    for _, entries in got if mode != "noack" else []:
        r.xack("s", "g", *[e[0] for e in entries])
print(f"{jobs / (time.time() - t):.0f}")
PY
}
keywrites() { # port rounds: rounds per second
    taskset -c "$CLIENT_CPU" python3 - "$@" <<'PY'
import sys, time, redis
port, rounds = int(sys.argv[1]), int(sys.argv[2])
r = redis.Redis(port=port)
t = time.time()
for i in range(rounds):
    r.xadd("s", {"job": i})
    last = r.xinfo_stream("s")["last-generated-id"]
    r.execute_command("XSETID", "s", last, "ENTRIESADDED", 100 + i)
    r.expire("s", 1000); r.persist("s")
    r.delete("s")
    r.xgroup_create("s", "g", "$", mkstream=True)
print(f"{rounds / (time.time() - t):.0f}")
PY
}
keywrites2() { # port rounds: rounds per second (a stream made by XADD,
               # written under a TTL, renamed and copied)
    taskset -c "$CLIENT_CPU" python3 - "$@" <<'PY'
import sys, time, redis
port, rounds = int(sys.argv[1]), int(sys.argv[2])
r = redis.Redis(port=port)
t = time.time()
for i in range(rounds):
    r.delete("s")
    r.xadd("s", {"job": i})
    r.expire("s", 1000)
    r.xadd("s", {"job": i})
    r.xgroup_create("s", "g", "$")
    r.xadd("s", {"job": i})
    r.xreadgroup("g", "w", {"s": ">"}, count=1, noack=True)
    r.rename("s", "u"); r.rename("u", "s")
    r.copy("s", "v", replace=True)
print(f"{rounds / (time.time() - t):.0f}")
PY
}
recoverer() { # port name dead: claims the dead worker's jobs; claimed per second
    taskset -c "$CLIENT_CPU" python3 - "$@" <<'PY'
import sys, time, redis
port, name, dead = int(sys.argv[1]), sys.argv[2], sys.argv[3]
r = redis.Redis(port=port)
t, n, batch = time.time(), 0, 0
r.xgroup_createconsumer("s", "g", name)
while True:
    ids = r.xautoclaim("s", "g", name, 0, "0-0", count=10, justid=True)
    if not ids:
        break
    if batch % 2:
        r.xclaim("s", "g", name + "-2", 0, ids, justid=True)
    r.xack("s", "g", *ids)
    n, batch = n + len(ids), batch + 1
r.xgroup_delconsumer("s", "g", dead)
print(f"{n / (time.time() - t):.0f}")
PY
}

pa=$BASE; pb=$((BASE + 1))
start_node $pa --active-replica yes; start_node $pb --active-replica yes
cli $pa replicaof 127.0.0.1 $pb >/dev/null; cli $pb replicaof 127.0.0.1 $pa >/dev/null
for _ in $(seq 100); do
    [[ $(cli $pa info replication | grep -c state=connected) -ge 1 &&
       $(cli $pb info replication | grep -c state=connected) -ge 1 ]] && break
    sleep 0.1
done
echo "== $BIN: a job queue (XADD, XREADGROUP COUNT 1 >, XACK) on a pair; $JOBS jobs per worker"
printf '%-22s %8s %8s %6s %s\n' row a/s b/s asks "a's XINFO GROUPS"
row() { # name, "seq", "both", "claims", "noack2", "keys" or "keys2"
    cli $pa del s t >/dev/null
    cli $pa xgroup create s g '$' mkstream >/dev/null
    cli $pa xgroup create t g '$' mkstream >/dev/null; converge $pa $pb
    local q0=$(( $(state_asks $pa) + $(state_asks $pb) ))
    local ra=$WORK/ra rb=$WORK/rb
    if [[ $2 == seq ]]; then
        worker $pa wa "$JOBS" >"$ra"; converge $pa $pb
        worker $pb wb "$JOBS" >"$rb"
    elif [[ $2 == claims ]]; then
        worker $pa wa "$JOBS" noack >"$ra"; converge $pa $pb
        recoverer $pb wb wa >"$rb"
    elif [[ $2 == noack2 ]]; then
        worker $pa wa "$JOBS" noack2 >"$ra"; converge $pa $pb
        worker $pb wb "$JOBS" noack2 >"$rb"
    elif [[ $2 == keys ]]; then
        keywrites $pa $((JOBS / 10)) >"$ra"; converge $pa $pb
        keywrites $pb $((JOBS / 10)) >"$rb"
    elif [[ $2 == keys2 ]]; then
        keywrites2 $pa $((JOBS / 10)) >"$ra"; converge $pa $pb
        keywrites2 $pb $((JOBS / 10)) >"$rb"
    else
        worker $pa wa "$JOBS" >"$ra" & local j=$!
        worker $pb wb "$JOBS" >"$rb"; wait $j
    fi
    converge $pa $pb
    local q1=$(( $(state_asks $pa) + $(state_asks $pb) ))
    printf '%-22s %8s %8s %6s %s\n' "$1" "$(cat "$ra")" "$(cat "$rb")" $((q1 - q0)) "$(groups_of $pa)"
}
row "one node at a time" seq
row "both at once" both
row "claims" claims
row "noack, two streams" noack2
row "key writes" keys
row "made, TTL, renamed" keys2
