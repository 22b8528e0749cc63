#!/usr/bin/env bash
# Runs redis-py's test suite against target/release/lattice-server.
#   bash ci/redis-py.sh                     # the CI run (skip list applied)
#   bash ci/redis-py.sh -k test_get --tb=short   # extra args go to pytest
#   LATTICE_SERVER=/usr/bin/redis-server bash ci/redis-py.sh   # check the machinery
# See ci/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 ci/lib/redis_py.py "$@"
