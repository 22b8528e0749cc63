#!/usr/bin/env bash
# The cost of ACL checks (issue 26): GET/SET as a restricted user
# (`~app:* +@read +@write`, every command checked against its command bit
# and its key against the pattern) against the default user (all-permissive:
# the check is skipped), on one lattice-server.
#
# The server runs pinned to CPU 0 with one worker thread, redis-benchmark
# to CPU 1 (`taskset`), as bench/compare.sh. Both users run the same
# commands on the same keys (`app:<rand>`); rounds alternate the users and
# the table shows each test's median rps and server CPU per request.
#
#   bench/acl.sh
#   ROUNDS=5 REQUESTS=400000 SKIP_BUILD=1 bench/acl.sh
#
# Environment: REQUESTS (per pipelined test, 400000), REQUESTS_P1 (100000),
# ROUNDS (5), CLIENTS (50), KEYSPACE (100000), SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-5}"
CLIENTS="${CLIENTS:-50}"
KEYSPACE="${KEYSPACE:-100000}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"
LATTICE="$ROOT/target/release/lattice-server"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi

port="$(free_port)"
start_server lattice "$port"
redis-cli -p "$port" ACL SETUSER app on '>apppass' '~app:*' '+@read' '+@write' >/dev/null

# bench USER PIPELINE CMD...: rps and server CPU ns per request.
bench() {
    local user="$1" pipe="$2" n auth=()
    shift 2
    n=$REQUESTS
    [[ $pipe == 1 ]] && n=$REQUESTS_P1
    [[ $user == app ]] && auth=(--user app -a apppass)
    local c0 c1 v
    c0="$(cpu_ns "$SERVER_PID")"
    v="$(REQUESTS=$n rps_cmd "$port" "$pipe" "${auth[@]}" "$@")"
    c1="$(cpu_ns "$SERVER_PID")"
    echo "$v $(((c1 - c0) / n))"
}

declare -A RPS CPU
for round in $(seq 1 "$ROUNDS"); do
    for user in default app; do
        for pipe in 1 16; do
            read -r v ns < <(bench "$user" "$pipe" SET 'app:__rand_int__' vvvvvvvvvvvvvvvv)
            RPS[$user-set-$pipe]+="$v " CPU[$user-set-$pipe]+="$ns "
            read -r v ns < <(bench "$user" "$pipe" GET 'app:__rand_int__')
            RPS[$user-get-$pipe]+="$v " CPU[$user-get-$pipe]+="$ns "
        done
    done
    echo "round $round done" >&2
done
stop_server

printf '\n%-10s | %13s | %13s | %9s | %15s | %15s | %9s\n' test "default rps" "app rps" \
    "rps cost" "default ns/req" "app ns/req" "cpu cost"
printf '%s\n' "-----------+---------------+---------------+-----------+-----------------+-----------------+----------"
# pct X BASE: (X - BASE) / BASE, in percent.
pct() { awk -v x="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (b>0 ? (x-b)*100/b : 0) }'; }
for pipe in 1 16; do
    for t in set get; do
        d=$(median <<<"${RPS[default-$t-$pipe]}") a=$(median <<<"${RPS[app-$t-$pipe]}")
        dc=$(median <<<"${CPU[default-$t-$pipe]}") ac=$(median <<<"${CPU[app-$t-$pipe]}")
        printf '%-10s | %13s | %13s | %9s | %15s | %15s | %9s\n' "${t^^} P=$pipe" "$d" "$a" \
            "$(awk -v d="$d" -v a="$a" 'BEGIN { printf "%.1f%%", (d>0 ? (d-a)*100/d : 0) }')" \
            "$dc" "$ac" "$(pct "$ac" "$dc")"
    done
done
echo "(rps cost: how much lower the restricted user's rps is; cpu cost: how much more server CPU a request takes)"
