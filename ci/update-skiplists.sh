#!/usr/bin/env bash
# Regenerates the "failing at introduction; triage" entries of both skip lists:
# builds the release binary, runs each peer suite with only the hand-written
# entries of its skip list (entries with any other reason), and writes every
# test that fails now back with the reason "failing at introduction; triage".
# Give an entry a real reason to keep it across runs. Review with `git diff ci/`.
#   bash ci/update-skiplists.sh            # both suites
#   bash ci/update-skiplists.sh redis-py   # or: tcl
#   LATTICE_SERVER=/path/to/lattice-server bash ci/update-skiplists.sh   # no build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which=${1:-all}
# generous limits: a unit cut short by a limit is skipped whole
export TCL_BUDGET=${TCL_BUDGET:-1800} REDIS_PY_TIMEOUT=${REDIS_PY_TIMEOUT:-1800}
if [ -z "${LATTICE_SERVER:-}" ]; then   # else: use that binary as is
    cargo build --release --bin lattice-server
fi
if [ "$which" = all ] || [ "$which" = redis-py ]; then
    python3 ci/lib/redis_py.py --update-skiplist
fi
if [ "$which" = all ] || [ "$which" = tcl ]; then
    python3 ci/lib/tcl.py --update-skiplist
fi
git --no-pager diff --stat -- ci/redis-py-skiplist.txt ci/tcl-skiplist.txt || true
