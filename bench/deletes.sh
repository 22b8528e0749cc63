#!/usr/bin/env bash
# Whole-key deletes and overwrites on an active pair (issue 24 item 1,
# DECISIONS 242-247): REQUESTS rounds of a delete or overwrite and a write
# that makes the key again, through redis-cli --pipe on one node of a pair;
# per phase the writer's rounds per second, the seconds until the peer's
# digest agrees, and the key states the peer asked for (INFO `conflicts=`).
# A benchmark, not a test. BIN=... picks the server (e.g. main's, whose
# deletes and overwrites travelled as states asked for).
#   BIN=target/release/lattice-server REQUESTS=2000 bash bench/deletes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-2000}
LEN=${LEN:-100}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7470}
source bench/lib.sh

a=$BASE; b=$((BASE + 1))
start_node $a --active-replica yes
start_node $b --active-replica yes
link $a $b; link $b $a; wait_up $a 1; wait_up $b 1
cli $a sadd t $(seq -f 'm%g' 1 "$LEN") >/dev/null
cli $a sadd u x y >/dev/null
converge $a $b >/dev/null

# rounds "CMD1|CMD2": REQUESTS rounds of both commands, key i of LEN
# (__k__) in round i; rounds per second.
rounds() {
    python3 -c "
import sys
n, top, cmds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split('|')
out = []
for i in range(n):
    for c in cmds:
        a = c.replace('__k__', str(i % top)).split(' ')
        out.append('*%d\r\n' % len(a) + ''.join('\$%d\r\n%s\r\n' % (len(x), x) for x in a))
sys.stdout.write(''.join(out))
" "$REQUESTS" "$LEN" "$1" >"$WORK/cmds"
    local t0; t0=$(date +%s.%N)
    taskset -c "$CLIENT_CPU" redis-cli -p "$a" --pipe <"$WORK/cmds" >/dev/null
    echo "$REQUESTS / ($(date +%s.%N) - $t0)" | bc
}

printf '%-34s %10s %12s %8s\n' rounds rounds/s converge_s asks
for c in "SADD s__k__ a b c|DEL s__k__" "HSET h__k__ f 1|UNLINK h__k__" "INCR n__k__|GETDEL n__k__" \
         "RPUSH l__k__ a b|DEL l__k__" "SADD d__k__ x|SUNIONSTORE d__k__ t u" \
         "ZADD z__k__ 1 a|ZUNIONSTORE z__k__ 1 t" "SADD r__k__ x|RENAME r__k__ q__k__"; do
    before=$(state_asks $b)
    r=$(rounds "$c")
    s=$(converge $a $b)
    printf '%-34s %10s %12.2f %8s\n' "$c" "$r" "$s" $(( $(state_asks $b) - before ))
done
