#!/usr/bin/env bash
# A replica frozen (SIGSTOP) for FREEZE seconds under a steady load of 8 KB
# SETs (redis-benchmark -t set -d 8192 -c 20), for redis-server and for
# LatticeDB with each lag policy (issue 10):
#   redis     Redis 7.0 -> Redis 7.0 (drops the replica, full sync after);
#   throttle  LatticeDB, repl-lag-policy throttle (writers slowed);
#   spill     LatticeDB, repl-lag-policy spill, the default (bytes to disk).
# The master is pinned to SERVER_CPU; the replica and redis-benchmark share
# CLIENT_CPU. The master's write rate is read from total_commands_processed
# once a second: the medians before, during and after the freeze and the
# slowest second of it are printed, with the most disk the spill used, the
# replica's catch-up time after SIGCONT (until its offset passes the
# master's offset at SIGCONT), the master's full syncs (1 is the initial
# one) and whether DEBUG DIGEST is equal once the load stops.
#
#   bench/replica-freeze.sh                   # all three, 60 s freeze
#   FREEZE=20 bench/replica-freeze.sh spill   # one, shorter
#
# Environment: FREEZE (60), BEFORE (10), AFTER (20), WAIT_MAX (120), KEYSPACE (20000),
# DISK_SIZE (repl-backlog-disk-size for spill: 32gb), SERVER_CPU (0),
# CLIENT_CPU (1), SKIP_BUILD.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FREEZE="${FREEZE:-60}"
# How long to wait for the replica to catch up, then to match (s): a replica that
# never does (Redis in a full-sync loop under this load) is reported "never".
WAIT_MAX="${WAIT_MAX:-120}"
BEFORE="${BEFORE:-10}"
AFTER="${AFTER:-20}"
KEYSPACE="${KEYSPACE:-20000}"
DISK_SIZE="${DISK_SIZE:-32gb}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
CLIENTS=20
REQUESTS=0
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
REPLICA_PID=""
LOAD_PID=""
trap 'kill -CONT $REPLICA_PID 2>/dev/null; kill $LOAD_PID $REPLICA_PID $SERVER_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet --bin lattice-server)
fi

field() { redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'; }

# start NAME ROLE PORT [MASTER_PORT] [POLICY]: a master pinned to
# SERVER_CPU, or a replica pinned to CLIENT_CPU.
start() {
    local name=$1 role=$2 port=$3 master=${4:-} policy=${5:-} cpu=$SERVER_CPU
    local args=(--port "$port" --save "" --appendonly no --dir "$WORK/$role"
        --enable-debug-command yes)
    mkdir -p "$WORK/$role"
    if [[ $role == replica ]]; then
        cpu=$CLIENT_CPU
        args+=(--replicaof 127.0.0.1 "$master")
    fi
    if [[ $name == redis ]]; then
        taskset -c "$cpu" "$REDIS_SERVER" "${args[@]}" --daemonize no >"$WORK/$role.log" 2>&1 &
    else
        [[ $role == master ]] && args+=(--repl-lag-policy "$policy" --repl-backlog-disk-size "$DISK_SIZE")
        taskset -c "$cpu" "$LATTICE" "${args[@]}" --server-threads 1 >"$WORK/$role.log" 2>&1 &
    fi
    echo $!
}

# sample PORT SECONDS: one line a second: the master's writes in it, and
# the bytes its backlog holds on disk (0 for Redis).
sample() {
    local port=$1 secs=$2 last now i
    last=$(field "$port" stats total_commands_processed)
    for ((i = 0; i < secs; i++)); do
        sleep 1
        now=$(field "$port" stats total_commands_processed)
        echo "$((now - last)) $(field "$port" replication repl_backlog_disk_bytes)"
        last=$now
    done
}

# stat: "median slowest" of the first column.
stat() { sort -n | awk '{a[NR]=$1} END {printf "%d %d\n", a[int((NR+1)/2)], a[1]}'; }
# peak_mb: the largest second column, in MB.
peak_mb() { awk '$2 > m {m = $2} END {printf "%d", m / 1048576}'; }

run() {
    local name=$1 policy=${2:-} mport rport
    mport=$(free_port)
    rport=$(free_port)
    SERVER_PID=$(start "$name" master "$mport" "" "$policy")
    wait_port "$mport"
    REPLICA_PID=$(start "$name" replica "$rport" "$mport")
    wait_port "$rport"
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$mport" -t set -d 8192 -c "$CLIENTS" \
        -r "$KEYSPACE" -n 2000000000 -q >/dev/null 2>&1 &
    LOAD_PID=$!
    local waited=0
    until [[ "$(field "$rport" replication master_link_status)" == up ]]; do
        sleep 0.2
        waited=$((waited + 1))
        if ((waited > WAIT_MAX * 5)); then
            # Redis at this load: the replica is dropped for its output buffer
            # during every full sync and never gets in sync.
            printf '%-9s never in sync in %ss: %s full syncs\n' "${policy:-$name}" "$WAIT_MAX" \
                "$(field "$mport" stats sync_full)"
            kill "$LOAD_PID" "$REPLICA_PID" "$SERVER_PID" 2>/dev/null || true
            wait "$LOAD_PID" "$REPLICA_PID" "$SERVER_PID" 2>/dev/null || true
            SERVER_PID="" REPLICA_PID=""
            return
        fi
    done
    read -r before _ < <(sample "$mport" "$BEFORE" | stat)
    kill -STOP "$REPLICA_PID"
    local freeze_samples disk_peak
    freeze_samples=$(sample "$mport" "$FREEZE")
    disk_peak=$(echo "$freeze_samples" | peak_mb)
    kill -CONT "$REPLICA_PID"
    local target resumed=$SECONDS caught=""
    target=$(field "$mport" replication master_repl_offset)
    read -r during slowest < <(echo "$freeze_samples" | stat)
    local after_samples
    after_samples=$(sample "$mport" "$AFTER")
    read -r after _ < <(echo "$after_samples" | stat)
    for _ in $(seq 1 "$WAIT_MAX"); do
        if [[ "$(field "$rport" replication master_link_status)" == up ]] &&
            (($(field "$rport" replication master_repl_offset) >= target)); then
            caught=$((SECONDS - resumed))
            break
        fi
        sleep 1
    done
    kill "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
    local equal=no
    for _ in $(seq 1 "$WAIT_MAX"); do
        if [[ "$(field "$rport" replication master_link_status)" == up ]] &&
            [[ "$(field "$rport" replication master_repl_offset)" == "$(field "$mport" replication master_repl_offset)" ]]; then
            [[ "$(redis-cli -p "$mport" DEBUG DIGEST)" == "$(redis-cli -p "$rport" DEBUG DIGEST)" ]] && equal=yes
            break
        fi
        sleep 1
    done
    printf '%-9s %8s %8s %8s %8s %10s %8s %6s %6s\n' "${policy:-$name}" "$before" "$during" \
        "$slowest" "$after" "${disk_peak}MB" "${caught:-never}" \
        "$(field "$mport" stats sync_full)" "$equal"
    kill "$REPLICA_PID" "$SERVER_PID" 2>/dev/null || true
    wait "$REPLICA_PID" "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    REPLICA_PID=""
    rm -rf "${WORK:?}"/master "${WORK:?}"/replica
}

echo "replica frozen ${FREEZE}s under SET -d 8192 -c $CLIENTS; writes/s of the master"
printf '%-9s %8s %8s %8s %8s %10s %8s %6s %6s\n' kind before during slowest after \
    disk catchup_s fulls equal
for which in "${@:-redis throttle spill}"; do
    for w in $which; do
        case $w in
            redis) run redis ;;
            throttle | spill | disconnect) run lattice "$w" ;;
            *) echo "unknown: $w" >&2 ;;
        esac
    done
done
