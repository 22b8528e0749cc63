#!/usr/bin/env bash
# lattice-server on one worker thread (`--server-threads 1`), for the Tcl units whose checks read
# CLIENT LIST right after another connection's write, an order that Redis's single event loop
# gives and connections on different workers do not (ci/test-all.sh, docs/DECISIONS.md 343).
# ci/lib/tcl.py links it as src/redis-server; `exec -a` keeps that argv[0], which its
# leftover-server cleanup matches.
root="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
exec -a "$0" "$root/target/release/lattice-server" "$@" --server-threads 1
