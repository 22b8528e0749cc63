#!/usr/bin/env bash
# Seed 000's table on this box: SET of 8 KB values (redis-benchmark -d 8192
# -t set, 50 clients, as fast as it goes) against a master with no replica,
# and with one replica of its own kind (Redis -> Redis, LatticeDB ->
# LatticeDB) on the same machine.
#
# The master is pinned to SERVER_CPU; redis-benchmark and the replica share
# CLIENT_CPU (two cores: the replica has to live somewhere, and both kinds
# get the same arrangement). LatticeDB runs one worker thread, as Redis.
# During the load the replica's lag in bytes (master_repl_offset minus the
# replica's) is sampled every 100 ms; after it, the time for the replica to
# catch up, the master's sync_full count (1 is the initial sync: anything
# more is a resync), whether the link stayed up, and DEBUG DIGEST equality.
#
#   bench/replication.sh
#   REQUESTS=200000 bench/replication.sh         # quick
#
# Environment: REQUESTS (1000000), KEYSPACE (100000), VALUE_SIZE (8192),
# SERVER_CPU (0), CLIENT_CPU (1), SKIP_BUILD.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-1000000}"
KEYSPACE="${KEYSPACE:-100000}"
VALUE_SIZE="${VALUE_SIZE:-8192}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
CLIENTS=50
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
REPLICA_PID=""
trap 'kill $REPLICA_PID $SERVER_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

# start_replica NAME PORT MASTER_PORT: pinned to CLIENT_CPU, sets REPLICA_PID.
start_replica() {
    local name="$1" port="$2" master="$3"
    if [[ "$name" == redis ]]; then
        taskset -c "$CLIENT_CPU" "$REDIS_SERVER" --port "$port" --save "" --appendonly no \
            --dir "$WORK" --dbfilename replica.rdb --daemonize no \
            --enable-debug-command yes --replicaof 127.0.0.1 "$master" \
            >"$WORK/replica.log" 2>&1 &
    else
        taskset -c "$CLIENT_CPU" "$LATTICE" --port "$port" --server-threads 1 --save "" \
            --appendonly no --dir "$WORK" --dbfilename replica.rdb \
            --enable-debug-command yes --replicaof 127.0.0.1 "$master" \
            >"$WORK/replica.log" 2>&1 &
    fi
    REPLICA_PID=$!
    wait_port "$port"
    until [[ "$(info_field "$port" master_link_status)" == up ]]; do sleep 0.1; done
}

info_field() { redis-cli -p "$1" INFO replication | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'; }

# sample_lag MASTER REPLICA OUT: appends the lag in bytes every 100 ms.
sample_lag() {
    while true; do
        local m r
        # The replica first: the master's offset read after it is never behind it.
        r=$(info_field "$2" master_repl_offset)
        m=$(info_field "$1" master_repl_offset)
        [[ -n "$m" && -n "$r" ]] && echo $((m - r)) >>"$3"
        sleep 0.1
    done
}

# p99 FILE: the 99th percentile of the numbers in FILE.
p99() { sort -n "$1" | awk '{ a[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; print a[i] + 0 }'; }

run() {
    local name="$1" replicated="$2" port rport rps lag catchup fulls link same
    port=$(free_port)
    start_server "$name" "$port"
    if [[ "$replicated" == yes ]]; then
        rport=$(free_port)
        start_replica "$name" "$rport" "$port"
        : >"$WORK/lag"
        sample_lag "$port" "$rport" "$WORK/lag" &
        local sampler=$!
    fi
    rps=$(taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -t set -d "$VALUE_SIZE" \
        -c "$CLIENTS" -n "$REQUESTS" -r "$KEYSPACE" --csv 2>/dev/null |
        awk -F'"' '/^"SET"/ { print $4 }')
    if [[ "$replicated" == yes ]]; then
        kill "$sampler" 2>/dev/null || true
        local start end
        start=$(date +%s.%N)
        until [[ "$(info_field "$port" master_repl_offset)" == "$(info_field "$rport" master_repl_offset)" ]]; do
            sleep 0.05
        done
        end=$(date +%s.%N)
        catchup=$(echo "$end - $start" | bc)
        lag=$(p99 "$WORK/lag")
        fulls=$(redis-cli -p "$port" INFO stats | tr -d '\r' | awk -F: '$1 == "sync_full" { print $2 }')
        link=$(info_field "$rport" master_link_status)
        same=no
        [[ "$(redis-cli -p "$port" DEBUG DIGEST)" == "$(redis-cli -p "$rport" DEBUG DIGEST)" ]] && same=yes
        printf '%-8s replica   %9.0f SET/s   lag p99 %7.1f MB   catch-up %5.2f s   sync_full %s   link %s   digest equal %s\n' \
            "$name" "$rps" "$(echo "$lag / 1048576" | bc -l)" "$catchup" "$fulls" "$link" "$same"
        kill "$REPLICA_PID" 2>/dev/null || true
        wait "$REPLICA_PID" 2>/dev/null || true
        REPLICA_PID=""
    else
        printf '%-8s alone     %9.0f SET/s\n' "$name" "$rps"
    fi
    stop_server
    echo "$rps" >"$WORK/rps-$name-$replicated"
}

echo "== replication: SET $VALUE_SIZE B x $REQUESTS, $CLIENTS clients, keyspace $KEYSPACE (master on CPU $SERVER_CPU, benchmark and replica on CPU $CLIENT_CPU)"
for name in redis lattice; do
    run "$name" no
    run "$name" yes
done
for name in redis lattice; do
    echo "$name replicated / alone: $(echo "scale=2; $(cat "$WORK/rps-$name-yes") / $(cat "$WORK/rps-$name-no")" | bc)"
done
