#!/usr/bin/env bash
# List edits on an active pair (issue 24, DECISIONS 220-224): LSET, LINSERT
# and LREM on one node of a pair, against a list of LEN elements; per
# command the writer's requests per second, the seconds until the peer's
# digest agrees, and the key states the peer asked for (INFO `conflicts=`).
# A benchmark, not a test. BIN=... picks the server (e.g. main's, to
# compare with edits travelling as states).
#   BIN=target/release/lattice-server REQUESTS=5000 LEN=10000 bash bench/list-edits.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/lattice-server}
REQUESTS=${REQUESTS:-5000}
LEN=${LEN:-10000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE=${BASE:-7480}
source bench/lib.sh

a=$BASE; b=$((BASE + 1))
start_node $a --active-replica yes
start_node $b --active-replica yes
link $a $b; link $b $a; wait_up $a 1; wait_up $b 1
python3 -c "
import sys
n=int(sys.argv[1]); out=sys.stdout
for i in range(0, n, 1000):
    vals=' '.join('v%d' % j for j in range(i, min(n, i+1000)))
    print('RPUSH l ' + vals)
" "$LEN" | cli $a >/dev/null
converge $a $b >/dev/null
printf '%-10s %12s %12s %10s\n' command rps converge_s asks
for c in "LSET l __rand__ x" "LINSERT l BEFORE v5000 y" "LREM l 1 y"; do
    before=$(state_asks $b)
    r=$(pipe $a $c)
    s=$(converge $a $b)
    printf '%-10s %12s %12.2f %10s\n' "${c%% *}" "$r" "$s" $(( $(state_asks $b) - before ))
done
