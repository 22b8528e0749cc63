#!/usr/bin/env bash
# Persistence side by side with redis-server (Debian's /usr/bin/redis-server):
#
# 1. SAVE and start-up load of KEYS keys (DEBUG POPULATE: "key:N" ->
#    "value:N"): seconds, keys/s, file size. Servers are not pinned: Redis
#    saves and loads on one core by design, lattice-server uses every core.
# 2. Memory during BGSAVE under a SET load: DATASET_KEYS keys of VALUE_SIZE
#    bytes (written by redis-benchmark, so the load overwrites them), then BGSAVE while redis-benchmark (pinned to CLIENT_CPU)
#    overwrites random keys. The server's memory is sampled as PSS summed
#    over the server and its children (a forked Redis child shares pages with
#    its parent until they are written, and PSS counts each shared page once),
#    and the peak is divided by the PSS before the BGSAVE.
#
#   bench/persistence.sh
#   KEYS=1000000 DATASET_KEYS=500000 bench/persistence.sh     # quick
#
# Environment: KEYS (10000000), DATASET_KEYS (2500000), VALUE_SIZE (2000),
# CLIENT_CPU (1), SKIP_BUILD, SKIP_SAVELOAD, SKIP_BGSAVE.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KEYS="${KEYS:-10000000}"
DATASET_KEYS="${DATASET_KEYS:-2500000}"
VALUE_SIZE="${VALUE_SIZE:-2000}"
CLIENT_CPU="${CLIENT_CPU:-1}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENTS=50
KEYSPACE="$DATASET_KEYS"
REQUESTS=0
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

# launch NAME PORT: starts a server on $WORK (unpinned), sets SERVER_PID.
launch() {
    local name="$1" port="$2"
    if [[ "$name" == redis ]]; then
        "$REDIS_SERVER" --port "$port" --save "" --appendonly no --dir "$WORK" \
            --enable-debug-command yes --daemonize no >>"$WORK/redis.log" 2>&1 &
    else
        "$LATTICE" --port "$port" --save "" --appendonly no --dir "$WORK" \
            --enable-debug-command yes >>"$WORK/lattice.log" 2>&1 &
    fi
    SERVER_PID=$!
}

# ready PORT: waits until PING answers PONG (not LOADING); prints seconds waited.
ready() {
    local start end
    start=$(date +%s.%N)
    until [[ "$(redis-cli -p "$1" PING 2>/dev/null)" == PONG ]]; do sleep 0.02; done
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

secs() { local s; s=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $s" | bc; }

save_load() {
    local name="$1" port
    port=$(free_port)
    rm -f "$WORK/dump.rdb"
    launch "$name" "$port"
    ready "$port" >/dev/null
    redis-cli -p "$port" DEBUG POPULATE "$KEYS" >/dev/null
    local save_s size load_s
    save_s=$(secs redis-cli -p "$port" SAVE)
    size=$(stat -c %s "$WORK/dump.rdb")
    stop_server
    launch "$name" "$port"
    load_s=$(ready "$port")
    local loaded
    loaded=$(redis-cli -p "$port" DBSIZE)
    stop_server
    [[ "$loaded" == "$KEYS" ]] || { echo "$name loaded $loaded of $KEYS keys" >&2; exit 1; }
    printf '%-8s save %6.2f s (%5.2f M keys/s)   load %6.2f s (%5.2f M keys/s)   file %5d MB\n' \
        "$name" "$save_s" "$(echo "$KEYS / $save_s / 1000000" | bc -l)" \
        "$load_s" "$(echo "$KEYS / $load_s / 1000000" | bc -l)" "$((size / 1000000))"
    eval "${name}_save=$save_s; ${name}_load=$load_s"
}

# pss_kb PID: PSS of PID and its children, in kB.
pss_kb() {
    local total=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        local v
        v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

bgsave_memory() {
    local name="$1" port
    port=$(free_port)
    rm -f "$WORK/dump.rdb"
    launch "$name" "$port"
    ready "$port" >/dev/null
    # Fill the keyspace the load will overwrite (redis-benchmark's own key
    # names): 4 x DATASET_KEYS random SETs leave ~2% of the keys unwritten,
    # so the load below overwrites rather than grows the dataset.
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -q -t set -d "$VALUE_SIZE" \
        -r "$DATASET_KEYS" -n "$((4 * DATASET_KEYS))" -P 16 -c 50 >/dev/null 2>&1
    sleep 1
    local base peak now
    base=$(pss_kb "$SERVER_PID")
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -q -t set -d "$VALUE_SIZE" \
        -r "$DATASET_KEYS" -n 100000000 -P 16 -c 50 >/dev/null 2>&1 &
    local bench=$!
    sleep 1
    local start
    start=$(date +%s.%N)
    redis-cli -p "$port" BGSAVE >/dev/null
    peak=$base
    while [[ "$(redis-cli -p "$port" INFO persistence | tr -d '\r' |
        awk -F: '/^rdb_bgsave_in_progress/ {print $2}')" == 1 ]]; do
        now=$(pss_kb "$SERVER_PID")
        ((now > peak)) && peak=$now
        sleep 0.1
    done
    local took
    took=$(echo "$(date +%s.%N) - $start" | bc)
    kill "$bench" 2>/dev/null || true
    wait "$bench" 2>/dev/null || true
    local status
    status=$(redis-cli -p "$port" INFO persistence | tr -d '\r' | awk -F: '/^rdb_last_bgsave_status/ {print $2}')
    stop_server
    printf '%-8s dataset PSS %6d MB   peak during BGSAVE %6d MB   ratio %.2f   BGSAVE %5.1f s (%s)\n' \
        "$name" "$((base / 1024))" "$((peak / 1024))" "$(echo "$peak / $base" | bc -l)" "$took" "$status"
}

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release -q)
fi
echo "== persistence: $KEYS keys for save/load; $DATASET_KEYS x ${VALUE_SIZE}B for BGSAVE memory ($(nproc) cores)"
if [[ -z "${SKIP_SAVELOAD:-}" ]]; then
    save_load redis
    save_load lattice
    # shellcheck disable=SC2154
    printf 'ratio (redis time / lattice time): save %.2f   load %.2f\n' \
        "$(echo "$redis_save / $lattice_save" | bc -l)" "$(echo "$redis_load / $lattice_load" | bc -l)"
fi
if [[ -z "${SKIP_BGSAVE:-}" ]]; then
    bgsave_memory redis
    bgsave_memory lattice
fi
