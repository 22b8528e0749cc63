#!/usr/bin/env bash
# Runs Redis 7.0's Tcl test suite (external mode) against target/release/lattice-server.
#   bash ci/tcl.sh                          # every unit not skipped whole in ci/tcl-skiplist.txt
#   bash ci/tcl.sh unit/type/string unit/expire   # just these units
#   LATTICE_SERVER=/usr/bin/redis-server bash ci/tcl.sh   # check the machinery
#   bash ci/tcl.sh --spawn integration/aof      # units that start their own servers
#   bash ci/tcl.sh --spawn --tls unit/tls       # the suite's TLS mode (ci/gen-test-certs.sh)
# Per-unit logs: .ci/cache/logs/tcl/. See ci/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 ci/lib/tcl.py "$@"
