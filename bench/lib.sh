# Shared by bench/*.sh: starting each server pinned to its CPU, reading its
# RSS and CPU time, and running redis-benchmark pinned to the other CPU.
# Expects REDIS_SERVER, LATTICE, SERVER_CPU, CLIENT_CPU, CLIENTS, KEYSPACE
# and REQUESTS to be set by the sourcing script.

WORK="$(mktemp -d /tmp/lattice-bench.XXXXXX)"
SERVER_PID=""

# KEEP_WORK=1 keeps the servers' logs and files in $WORK (printed at exit).
cleanup() {
    if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    if [[ -n "${KEEP_WORK:-}" ]]; then
        echo "kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    for _ in $(seq 1 200); do
        if redis-cli -p "$1" PING >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    echo "server on port $1 did not start" >&2
    exit 1
}

# start_server NAME PORT: starts it pinned, sets SERVER_PID.
start_server() {
    local name="$1" port="$2"
    if [[ "$name" == redis ]]; then
        taskset -c "$SERVER_CPU" "$REDIS_SERVER" --port "$port" --save "" \
            --appendonly no --dir "$WORK" --daemonize no --enable-debug-command yes \
            >"$WORK/redis.log" 2>&1 &
    else
        taskset -c "$SERVER_CPU" "$LATTICE" --port "$port" --server-threads 1 \
            --save "" --appendonly no --dir "$WORK" --enable-debug-command yes \
            >"$WORK/lattice.log" 2>&1 &
    fi
    SERVER_PID=$!
    wait_port "$port"
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# cpu_ns PID: CPU time the server's threads have run, in ns (schedstat).
# At pipeline 16 the single-threaded redis-benchmark saturates before either
# server does, so rps alone understates the server's per-core speed; CPU
# time per request is the server-side measure that the client cannot cap.
# A busy thread's counter is only brought up to date when it is descheduled,
# so each reading waits for the server to go idle first.
cpu_ns() { sleep 0.2; cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }

# rps PORT TEST PIPELINE: requests per second from redis-benchmark --csv.
rps() {
    local port="$1" test="$2" pipe="$3"
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
        -d 16 -r "$KEYSPACE" -P "$pipe" -t "$test" --csv -q 2>/dev/null |
        awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }'
}


# rps_cmd PORT PIPELINE ARGS...: requests per second of one custom command.
rps_cmd() {
    local port="$1" pipe="$2"
    shift 2
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
        -r "$KEYSPACE" -P "$pipe" --csv -q "$@" 2>/dev/null |
        awk -F'","' 'NR>1 || !/^"test"/ { gsub(/"/, "", $2); print $2; exit }'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# load_rss NAME FILE REPLIES: starts server NAME, pipes the RESP in FILE
# with redis-cli --pipe (which must count REPLIES replies, no errors), and
# writes "rss_before_kb peak_kb after_kb" to $WORK/rss.NAME (after = "nan"
# if the load failed). RSS is sampled every 20 ms during the load. Written
# to a file, not via $(...), so the EXIT trap still sees SERVER_PID.
load_rss() {
    local name="$1" file="$2" replies="$3" port before peak=0 now
    port="$(free_port)"
    start_server "$name" "$port"
    before="$(rss_kb "$SERVER_PID")"
    taskset -c "$CLIENT_CPU" redis-cli -p "$port" --pipe <"$file" >"$WORK/pipe.log" 2>&1 &
    local loader=$!
    while kill -0 "$loader" 2>/dev/null; do
        now="$(rss_kb "$SERVER_PID")"
        ((now > peak)) && peak=$now
        sleep 0.02
    done
    wait "$loader"
    if ! grep -q "errors: 0, replies: $replies" "$WORK/pipe.log"; then
        echo "$name: load failed" >&2
        cat "$WORK/pipe.log" >&2
        echo "$before nan nan" >"$WORK/rss.$name"
        stop_server
        return
    fi
    sleep 0.3
    now="$(rss_kb "$SERVER_PID")"
    ((now > peak)) && peak=$now
    stop_server
    echo "$before $peak $now" >"$WORK/rss.$name"
}
