#!/usr/bin/env bash
# In-process scaling (issue 29 item 4): benches/inproc.rs drives the
# command path from 1 and 2 threads over one keyspace, no sockets, uniform
# and Zipf-skewed keys, plain and active-replica; prints throughput per
# thread, its ratio to the 1-thread run (1.00 = linear) and the shard
# locks that found their mutex held. Run it on a quiet box: another
# process on a core shows up as a "scaling" loss and as long lock waits
# (a holder descheduled mid-command). docs/PERFORMANCE.md, "Scaling".
#
#   bash bench/inproc.sh [inproc args...]    e.g. --ops 500000 --cmd set,incr
set -euo pipefail
cd "$(dirname "$0")/.."
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo bench --bench inproc -- "$@"
