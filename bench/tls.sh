#!/usr/bin/env bash
# GET/SET over TLS: lattice-server's tls-port (rustls) against redis-server's
# TLS (issue 26), at pipeline 1 and 16, each server alone on CPU 0 (lattice
# with one worker thread), redis-benchmark --tls on CPU 1. Certificates are
# made with the distribution's openssl; client certificates are required
# (tls-auth-clients yes, both servers' default). Rounds alternate the
# servers; the table shows each test's median rps and server CPU per request.
#
#   bench/tls.sh
#   ROUNDS=5 SKIP_BUILD=1 bench/tls.sh
#
# Environment: REQUESTS (pipelined, 400000), REQUESTS_P1 (100000), ROUNDS (3),
# CLIENTS (50), KEYSPACE (100000), SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQUESTS="${REQUESTS:-400000}"
REQUESTS_P1="${REQUESTS_P1:-100000}"
ROUNDS="${ROUNDS:-3}"
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

# Certificates (X.509 v3: rustls takes no v1 certificates).
(
    cd "$WORK"
    printf '[server]\nbasicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n[client]\nbasicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >ext.cnf
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=ca 2>/dev/null
    for who in server client; do
        openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who 2>/dev/null
        openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile ext.cnf -extensions $who -out $who.crt 2>/dev/null
    done
)
TLS_SERVER=(--tls-cert-file "$WORK/server.crt" --tls-key-file "$WORK/server.key"
    --tls-ca-cert-file "$WORK/ca.crt")
TLS_CLIENT=(--tls --cacert "$WORK/ca.crt" --cert "$WORK/client.crt" --key "$WORK/client.key")

# start NAME PORT: the server with a TLS port only, pinned; sets SERVER_PID.
start() {
    local bin="$REDIS_SERVER" extra=()
    [[ $1 == lattice ]] && bin="$LATTICE" extra=(--server-threads 1)
    taskset -c "$SERVER_CPU" "$bin" --port 0 --tls-port "$2" "${TLS_SERVER[@]}" --save "" \
        --appendonly no --dir "$WORK" "${extra[@]}" >"$WORK/$1.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 200); do
        redis-cli -p "$2" "${TLS_CLIENT[@]}" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "$1 did not start" >&2
    exit 1
}

declare -A RPS CPU
for round in $(seq 1 "$ROUNDS"); do
    for name in redis lattice; do
        port="$(free_port)"
        start "$name" "$port"
        for pipe in 1 16; do
            n=$REQUESTS
            [[ $pipe == 1 ]] && n=$REQUESTS_P1
            for t in set get; do
                c0="$(cpu_ns "$SERVER_PID")"
                v="$(taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" "${TLS_CLIENT[@]}" \
                    -c "$CLIENTS" -n "$n" -d 16 -r "$KEYSPACE" -P "$pipe" -t "$t" --csv -q 2>/dev/null |
                    awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }')"
                c1="$(cpu_ns "$SERVER_PID")"
                RPS[$name-$t-$pipe]+="$v " CPU[$name-$t-$pipe]+="$(((c1 - c0) / n)) "
            done
        done
        stop_server
    done
    echo "round $round done" >&2
done

printf '\n%-10s | %12s | %12s | %6s | %14s | %16s\n' test "redis rps" "lattice rps" ratio \
    "redis ns/req" "lattice ns/req"
printf '%s\n' "-----------+--------------+--------------+--------+----------------+-----------------"
for pipe in 1 16; do
    for t in set get; do
        r=$(median <<<"${RPS[redis-$t-$pipe]}") l=$(median <<<"${RPS[lattice-$t-$pipe]}")
        printf '%-10s | %12s | %12s | %6s | %14s | %16s\n' "${t^^} P=$pipe" "$r" "$l" \
            "$(awk -v a="$l" -v b="$r" 'BEGIN { printf "%.2f", (b>0 ? a/b : 0) }')" \
            "$(median <<<"${CPU[redis-$t-$pipe]}")" "$(median <<<"${CPU[lattice-$t-$pipe]}")"
    done
done
