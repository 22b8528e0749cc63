#!/usr/bin/env bash
# In-process scaling (issue 29 item 4): benches/inproc.rs drives a
# connection's command path (the dispatch a connection calls, no socket)
# from 1, 2 and 4 threads over one keyspace of 1M keys, uniform and
# Zipf-skewed, with the node's writes leaving it three ways (plain, a
# replica's backlog, the active stream); prints throughput per thread, its
# ratio to the 1-thread run (1.00 = linear) and the locks that found
# their mutex held (shard, backlog, active stream), with the load average
# before and after each line. Run it on a quiet box: another process on a
# core shows up as a "scaling" loss and as long lock waits (a holder
# descheduled mid-command). docs/SCALING.md reads its numbers.
#
#   bash bench/inproc.sh [inproc args...]    e.g. --threads 1,2 --cmd set,incr --pin
set -euo pipefail
cd "$(dirname "$0")/.."
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo bench --bench inproc -- "$@"
