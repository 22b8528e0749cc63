#!/usr/bin/env bash
# DEBUG DIGEST's cost (issue 29 item 3), side by side with redis-server:
# each server pinned to SERVER_CPU, filled by DEBUG POPULATE with KEYS
# string keys of SIZE bytes (default 100,000 x 8 KB: ~800 MB), then
# DEBUG DIGEST timed ROUNDS times (redis-cli on CLIENT_CPU); prints each
# round's seconds, the median, and lattice/redis. The two digests must be
# equal (Redis's scheme, same data).
#   bash bench/digest.sh
#   KEYS=1000000 SIZE=16 bash bench/digest.sh      # many small keys
set -euo pipefail
cd "$(dirname "$0")/.."
LATTICE=${LATTICE:-target/release/lattice-server}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server)}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
KEYS=${KEYS:-100000}
SIZE=${SIZE:-8192}
ROUNDS=${ROUNDS:-3}
# shellcheck source=bench/lib.sh
source bench/lib.sh
[[ -n "${SKIP_BUILD:-}" ]] || cargo build --release --bin lattice-server >/dev/null

digest_secs() { # port: seconds of one DEBUG DIGEST
    local t0 t1
    t0=$(date +%s.%N)
    taskset -c "$CLIENT_CPU" redis-cli -p "$1" debug digest >"$WORK/digest.$1"
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
}

declare -A MED DIG
for name in redis lattice; do
    port=$(free_port)
    start_server "$name" "$port"
    redis-cli -p "$port" debug populate "$KEYS" key "$SIZE" >/dev/null
    times=()
    for _ in $(seq "$ROUNDS"); do times+=("$(digest_secs "$port")"); done
    MED[$name]=$(echo "${times[*]}" | median)
    DIG[$name]=$(cat "$WORK/digest.$port")
    echo "$name: ${KEYS} keys x ${SIZE} B, DEBUG DIGEST seconds: ${times[*]} (median ${MED[$name]})"
    stop_server
done
[[ "${DIG[redis]}" == "${DIG[lattice]}" ]] || { echo "digests differ: ${DIG[redis]} ${DIG[lattice]}" >&2; exit 1; }
echo "digests equal (${DIG[lattice]}); lattice/redis time: $(echo "scale=2; ${MED[lattice]} / ${MED[redis]}" | bc)"
