#!/usr/bin/env bash
# Removes and moves on an active pair (issue 24, DECISIONS 233-237): ZPOPMIN,
# ZREMRANGEBYRANK, SPOP, SMOVE, LTRIM, RPOPLPUSH and LMOVE l l on one node of a pair,
# against a sorted set, a set and a list of LEN members; per command the
# writer's requests per second, the seconds until the peer's digest agrees,
# and the key states the peer asked for (INFO `conflicts=`). A benchmark,
# not a test. BIN=... picks the server (e.g. main's, to compare with these
# writes travelling as states).
#   BIN=target/release/lattice-server REQUESTS=2000 LEN=10000 bash bench/removes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-5000}
LEN=${LEN:-10000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7490}
source bench/lib.sh

a=$BASE; b=$((BASE + 1))
start_node $a --active-replica yes
start_node $b --active-replica yes
link $a $b; link $b $a; wait_up $a 1; wait_up $b 1
python3 -c "
import sys
n=int(sys.argv[1]); out=sys.stdout
for i in range(0, n, 1000):
    js=range(i, min(n, i+1000))
    print('RPUSH l ' + ' '.join('v%d' % j for j in js))
    print('SADD s ' + ' '.join('m%d' % j for j in js))
    print('ZADD z ' + ' '.join('%d m%d' % (j, j) for j in js))
" "$LEN" | cli $a >/dev/null
converge $a $b >/dev/null
printf '%-16s %12s %12s %10s\n' command rps converge_s asks
for c in "ZPOPMIN z" "ZREMRANGEBYRANK z 0 0" "SPOP s" "SMOVE s t m__rand__" "LTRIM l 1 -2" "RPOPLPUSH l m" "LMOVE l l LEFT RIGHT"; do
    before=$(state_asks $b)
    r=$(pipe $a $c)
    s=$(converge $a $b)
    printf '%-16s %12s %12.2f %10s\n' "${c%% *}" "$r" "$s" $(( $(state_asks $b) - before ))
done
