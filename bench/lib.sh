# Shared by bench/*.sh: starting each server pinned to its CPU, reading its
# RSS and CPU time, and running redis-benchmark pinned to the other CPU.
# Expects REDIS_SERVER, LATTICE, SERVER_CPU, CLIENT_CPU, CLIENTS, KEYSPACE
# and REQUESTS to be set by the sourcing script.

WORK="$(mktemp -d /tmp/lattice-bench.XXXXXX)"
SERVER_PID=""
NODE_PIDS=() # start_node's servers

# KEEP_WORK=1 keeps the servers' logs and files in $WORK (printed at exit).
cleanup() {
    if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    if ((${#NODE_PIDS[@]})); then kill "${NODE_PIDS[@]}" 2>/dev/null || true; fi
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

# bench_csv: "rps p99_ms" of redis-benchmark --csv's last result line (a
# test that fills a key first, as lrange_100's LPUSH, prints that line first).
bench_csv() {
    awk -F'","' '!/^"test"/ { gsub(/"/, "", $2); gsub(/"/, "", $7); last = $2 " " $7 }
        END { if (last != "") print last }'
}

# rps_p99 PORT TEST PIPELINE: "rps p99_ms" of one redis-benchmark test (-t).
rps_p99() {
    local port="$1" test="$2" pipe="$3"
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
        -d 16 -r "$KEYSPACE" -P "$pipe" -t "$test" --csv -q 2>/dev/null | bench_csv
}

# rps_p99_cmd PORT PIPELINE ARGS...: "rps p99_ms" of one custom command.
rps_p99_cmd() {
    local port="$1" pipe="$2"
    shift 2
    taskset -c "$CLIENT_CPU" redis-benchmark -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
        -r "$KEYSPACE" -P "$pipe" --csv -q "$@" 2>/dev/null | bench_csv
}

# rps PORT TEST PIPELINE / rps_cmd PORT PIPELINE ARGS...: requests per
# second alone.
rps() { rps_p99 "$@" | cut -d' ' -f1; }
rps_cmd() { rps_p99_cmd "$@" | cut -d' ' -f1; }

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

# measure_round NAME PORT: for pipelines 1 and 16 and each test of $TESTS,
# runs `one_test PORT TEST PIPE` (the sourcing script's; it prints rps, or
# "rps p99_ms") with REQUESTS requests (REQUESTS_P1 at pipeline 1), and
# appends the rps and the server's CPU ns per request to R and RC (NAME
# redis) or L and LC (lattice), and the p99 to RP or LP when one_test gives
# one: associative arrays the caller declares (bash scoping is dynamic).
measure_round() {
    local name="$1" port="$2" pipe n t c0 c1 v p ns
    for pipe in 1 16; do
        n=$REQUESTS
        [[ $pipe == 1 ]] && n=$REQUESTS_P1
        for t in $TESTS; do
            c0="$(cpu_ns "$SERVER_PID")"
            read -r v p <<<"$(REQUESTS=$n one_test "$port" "$t" "$pipe")"
            c1="$(cpu_ns "$SERVER_PID")"
            ns=$(((c1 - c0) / n))
            if [[ $name == redis ]]; then
                R[$t-$pipe]+="$v " RC[$t-$pipe]+="$ns "
                [[ -n $p ]] && RP[$t-$pipe]+="$p "
            else
                L[$t-$pipe]+="$v " LC[$t-$pipe]+="$ns "
                [[ -n $p ]] && LP[$t-$pipe]+="$p "
            fi
        done
    done
}

# run_rounds [PREPARE]: ROUNDS rounds alternating redis and lattice: each
# server started alone, `PREPARE PORT` run on it (a function of the
# sourcing script's, e.g. loading scripts), then measure_round, then
# stopped; so a noisy neighbour hurts both alike.
run_rounds() {
    local prepare="${1:-}" round name port
    for round in $(seq 1 "$ROUNDS"); do
        for name in redis lattice; do
            port="$(free_port)"
            start_server "$name" "$port"
            if [[ -n $prepare ]]; then "$prepare" "$port"; fi
            measure_round "$name" "$port"
            stop_server
        done
        echo "round $round done" >&2
    done
}

# rps_table WIDTH: the medians measure_round collected, per test and
# pipeline, lattice against redis (WIDTH: the test column's), with the
# p99 columns when p99s were collected.
rps_table() {
    local w="$1" pipe t r l rc lc rp lp p99=""
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b>0 ? a/b : 0) }'; }
    [[ -n "$(declare -p RP 2>/dev/null)" ]] && ((${#RP[@]})) && p99=1
    printf "\n%-${w}s | %12s | %12s | %6s | %14s | %16s | %9s" test "redis rps" \
        "lattice rps" ratio "redis cpu ns/r" "lattice cpu ns/r" "cpu ratio"
    [[ -n $p99 ]] && printf ' | %13s | %15s' "redis p99 ms" "lattice p99 ms"
    printf '\n%s+--------------+--------------+--------+----------------+------------------+----------' \
        "$(printf '%*s' $((w + 1)) '' | tr ' ' -)"
    [[ -n $p99 ]] && printf -- '-+---------------+----------------'
    echo
    for pipe in 1 16; do
        for t in $TESTS; do
            r=$(median <<<"${R[$t-$pipe]}") l=$(median <<<"${L[$t-$pipe]}")
            rc=$(median <<<"${RC[$t-$pipe]}") lc=$(median <<<"${LC[$t-$pipe]}")
            printf "%-${w}s | %12s | %12s | %6s | %14s | %16s | %9s" "${t^^} P=$pipe" \
                "$r" "$l" "$(ratio "$l" "$r")" "$rc" "$lc" "$(ratio "$rc" "$lc")"
            if [[ -n $p99 ]]; then
                rp=$(median <<<"${RP[$t-$pipe]:-}") lp=$(median <<<"${LP[$t-$pipe]:-}")
                printf ' | %13s | %15s' "${rp:--}" "${lp:--}"
            fi
            echo
        done
    done
    echo "(ratio = lattice / redis rps; cpu ratio = redis / lattice ns per request: > 1 means lattice spends less)"
    [[ -z $p99 ]] || echo "(p99: the load generator's 99th percentile latency, ms; medians of the rounds' p99s)"
}

# Nodes of an active pair or mesh (bench/merge.sh, bench/stream-facts.sh).
# start_node PORT EXTRA...: $BIN on PORT, pinned, one thread, its slot the
# port's last three digits, its files in $WORK/PORT; killed at exit.
start_node() {
    local p=$1
    shift
    mkdir -p "$WORK/$p"
    taskset -c "$SERVER_CPU" "$BIN" --port "$p" --dir "$WORK/$p" --save "" --appendonly no \
        --server-threads 1 --enable-debug-command yes --node-slot $((p % 1000)) "$@" \
        >"$WORK/$p.log" 2>&1 &
    NODE_PIDS+=($!)
    wait_port "$p"
}

# The bytes a node's active stream sent, and the key states its links asked
# for (INFO replication `conflicts=`).
sent_bytes() { redis-cli -p "$1" info replication | grep -oE 'active_sent_bytes:[0-9]+' | cut -d: -f2; }
state_asks() { redis-cli -p "$1" info replication | grep -oE 'conflicts=[0-9]+' | head -1 | cut -d= -f2; }

# resp_bytes ARGS...: the bytes of one command as a client sends it (RESP),
# __rand_int__ as 12 digits.
resp_bytes() {
    python3 -c "import sys; a=[x.replace('__rand_int__','0'*12) for x in sys.argv[1:]]; print(len('*%d\r\n'%len(a))+sum(len('\$%d\r\n%s\r\n'%(len(x),x)) for x in a))" "$@"
}

# Pairs of active nodes (bench/list-edits.sh, bench/removes.sh): a client,
# linking, waiting for the links, for convergence, and a replayable load
# through redis-cli --pipe (uses REQUESTS, LEN, WORK and CLIENT_CPU).
cli() { redis-cli -p "$@"; }
link() { cli "$1" replicaof 127.0.0.1 "$2" >/dev/null; }
wait_up() { # port peers
    for _ in $(seq 100); do
        [[ $(cli "$1" info replication | grep -c "state=connected") -ge $2 ]] && return
        sleep 0.1
    done
}
converge() { # portA portB: seconds until the digests agree
    local t0; t0=$(date +%s.%N)
    for _ in $(seq 1200); do
        [[ "$(cli "$1" debug digest)" == "$(cli "$2" debug digest)" ]] && break
        sleep 0.1
    done
    echo "$(date +%s.%N) - $t0" | bc
}
pipe() { # port command...: REQUESTS of the command (__rand__: a random
    # index below LEN) through redis-cli --pipe; requests per second.
    local p=$1; shift
    python3 -c "
import random, sys
n, top, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
random.seed(1)
out = []
for _ in range(n):
    a = [x.replace('__rand__', str(random.randrange(top))) for x in args]
    out.append('*%d\\r\\n' % len(a) + ''.join('\$%d\\r\\n%s\\r\\n' % (len(x), x) for x in a))
sys.stdout.write(''.join(out))
" "$REQUESTS" "$LEN" "$@" >"$WORK/cmds"
    local t0; t0=$(date +%s.%N)
    taskset -c "$CLIENT_CPU" redis-cli -p "$p" --pipe <"$WORK/cmds" >/dev/null
    echo "$REQUESTS / ($(date +%s.%N) - $t0)" | bc
}

# The scripts of issue 29's table (bench/scripting.sh, bench/memtier.sh):
# one, two and three commands on KEYS[1], as EVAL scripts and as the
# functions f1, f2, f3 of one library. load_scripts PORT loads them into
# the running server, checks one call of each, and sets SHA1, SHA2, SHA3.
SCRIPT_1CMD="return redis.call('INCR', KEYS[1])"
SCRIPT_2CMD="redis.call('GET', KEYS[1]); return redis.call('INCR', KEYS[1])"
SCRIPT_3CMD="redis.call('SET', KEYS[1], ARGV[1]); redis.call('INCR', KEYS[1]); return redis.call('GET', KEYS[1])"
SCRIPT_LIBRARY="#!lua name=benchlib
redis.register_function('f1', function(keys, args) return redis.call('INCR', keys[1]) end)
redis.register_function('f2', function(keys, args) redis.call('GET', keys[1]); return redis.call('INCR', keys[1]) end)
redis.register_function('f3', function(keys, args) redis.call('SET', keys[1], args[1]); redis.call('INCR', keys[1]); return redis.call('GET', keys[1]) end)"
load_scripts() {
    local port="$1" i sha got
    for i in 1 2 3; do
        local var="SCRIPT_${i}CMD"
        sha="$(redis-cli -p "$port" SCRIPT LOAD "${!var}")"
        printf -v "SHA$i" %s "$sha"
    done
    redis-cli -p "$port" FUNCTION LOAD REPLACE "$SCRIPT_LIBRARY" >/dev/null
    for i in 1 2 3; do
        local var="SHA$i"
        got="$(redis-cli -p "$port" EVALSHA "${!var}" 1 probe$i 7)$(redis-cli -p "$port" FCALL f$i 1 probe$i 7)"
        [[ "$got" =~ ^[0-9]+$ ]] || { echo "script $i failed: $got" >&2; exit 1; }
    done
}
