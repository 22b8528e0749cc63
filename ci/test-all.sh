#!/usr/bin/env bash
# Runs every test LatticeDB has, in order:
#   1. cargo fmt --check
#   2. the layering of src/ (ci/layers.py, docs/ARCHITECTURE.md "Layers"), and no `pub fn`
#      that nothing names (ci/unused.py: what the facade makes public, which rustc counts as used)
#   3. cargo clippy --all-targets -- -D warnings (with every module but the facade private,
#      rustc's dead-code lint makes an unused item an error here)
#   4. cargo test (unit, integration and doc tests)
#   5. cargo build --release, then the simulator optimised (cargo test --release --test simulator)
#   6. redis-py's test suite against the release binary   (ci/redis-py.sh)
#   7. Redis 7.0's Tcl test suite against the release binary (ci/tcl.sh), some units
#      spawning their own servers (--spawn), some of them over TLS (--tls)
#   8. KeyDB's own active-replica, multi-master and KEYDB.CRON Tcl tests against it
#      (ci/keydb-active.sh; skipped without a KeyDB checkout, DECISIONS 111)
#   9. real client libraries (redis-py, ioredis, node-redis, Jedis) against it (ci/clients.sh)
#  10. redis_exporter's metric names against redis-server's (ci/exporter.py; where installed)
# Every step runs even if an earlier one failed (except that the suites need
# the release build). Exit status is non-zero if any step failed. The last
# lines printed are one `<suite>: N passed, M failed` line per suite.
# Needs: Rust, python3, tclsh, and the Redis 7.0 source package reachable via
# `apt-get source redis` (or already in .ci/cache); .ci/setup.sh installs all
# of that on Debian 12. See ci/README.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR=never
logs=.ci/cache/logs
mkdir -p "$logs"
t0=$(date +%s)
status=0
steps=()
totals=()

# step NAME CMD...: runs CMD, tees its output to $logs/NAME.log, records the result.
step() {
    local name=$1 start rc
    shift
    start=$(date +%s)
    echo
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$logs/$name.log"
    rc=${PIPESTATUS[0]}
    local took=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ]; then
        steps+=("$name: ok (${took}s)")
    else
        steps+=("$name: FAILED, exit $rc (${took}s)")
        status=1
    fi
    return "$rc"
}

# suite_total NAME PREFIX: the suite's own `PREFIX: N passed, M failed` line.
suite_total() {
    local line
    line=$(grep -E "^$2: [0-9]+ passed, [0-9]+ failed$" "$logs/$1.log" | tail -n 1)
    totals+=("${line:-$2: no summary (runner failed; see $logs/$1.log)}")
}

step fmt cargo fmt --all -- --check --color never
step layers python3 ci/layers.py
step unused python3 ci/unused.py
step clippy cargo clippy --all-targets -- -D warnings
# The simulator is `test = false` (Cargo.toml), which --all-targets leaves out.
step clippy-simulator cargo clippy --test simulator -- -D warnings
ct_rc=0
# Some cargo tests read the Redis suite's RDB fixtures: fetch the sources first.
step fetch-redis-src python3 ci/lib/tcl.py --fetch
step cargo-test cargo test --workspace || ct_rc=$?
# The deterministic simulator, optimised (Cargo.toml: it is not in the run above).
rm -f "$logs/simulator.log"
release_ok=0
if step release cargo build --release --bin lattice-server; then
    release_ok=1
    step simulator cargo test --release --test simulator || ct_rc=$?
fi
ct=$(cat "$logs/cargo-test.log" "$logs/simulator.log" 2>/dev/null | grep -E '^test result: ' |
    awk '{p += $4; f += $6} END {printf "%d passed, %d failed", p, f}')
case "$ct_rc:$ct" in
    0:*) totals+=("cargo test: $ct") ;;
    *", 0 failed") totals+=("cargo test: $ct, but exit $ct_rc (build error or crash)") ;;
    *) totals+=("cargo test: $ct") ;;
esac
if [ "$release_ok" -eq 1 ]; then
    step redis-py bash ci/redis-py.sh
    suite_total redis-py redis-py
    step tcl bash ci/tcl.sh
    suite_total tcl tcl
    # Units tagged external:skip that need their own servers (configs, restarts):
    # the suite spawns lattice-server in place of src/redis-server.
    # About 7.5 minutes, most of it the replication units: a budget above the default 480 s.
    # integration/replication (all its tests but the skip list's pass, ~130 s) is not
    # here: CI's 20 minutes cannot take it; run it with bash ci/tcl.sh --spawn.
    step tcl-spawn env TCL_BUDGET=720 bash ci/tcl.sh --spawn unit/maxmemory integration/rdb \
        integration/convert-zipmap-hash-on-load integration/convert-ziplist-hash-on-load \
        integration/convert-ziplist-zset-on-load integration/aof integration/aof-multi-part integration/corrupt-dump \
        unit/wait integration/replication-2 integration/replication-3 integration/block-repl \
        integration/psync2 integration/psync2-reg integration/psync2-pingoff \
        integration/psync2-master-restart integration/replication-psync integration/failover \
        integration/replication-buffer integration/redis-cli integration/replication-4 integration/shutdown \
        unit/acl unit/acl-v2 unit/auth unit/info unit/oom-score-adj
    suite_total tcl-spawn tcl
    # unit/client-eviction (about 5 s) on one worker: several of its checks read CLIENT LIST
    # right after another connection's write, which connections on two workers do not order
    # (docs/DECISIONS.md 343); tests/client_eviction.rs covers eviction across workers.
    step tcl-spawn-one env TCL_BUDGET=120 LATTICE_SERVER="$PWD/ci/lib/one-worker-server.sh" \
        bash ci/tcl.sh --spawn unit/client-eviction
    suite_total tcl-spawn-one tcl
    # The suite's TLS mode (issue 26): every server it spawns serves tls-port only, with
    # tls-replication; certificates from ci/gen-test-certs.sh (DECISIONS 93).
    step tcl-tls env TCL_BUDGET=240 bash ci/tcl.sh --spawn --tls unit/tls unit/type/string unit/auth \
        unit/wait integration/replication-2
    suite_total tcl-tls tcl
    # KeyDB's own tests (issue 28): about 4 minutes, 3 of them replication-multimaster's
    # 3 x 1000 transactions, each polled on 4 nodes every 100 ms.
    # Only where a KeyDB checkout is given: its files are not committed here
    # and no registry ships them (DECISIONS 111).
    if [[ -n "${KEYDB_SRC:-}" || -e .ci/cache/keydb-src ]]; then
        step keydb bash ci/keydb-active.sh
        suite_total keydb keydb
    else
        totals+=("keydb: skipped (no KeyDB checkout: KEYDB_SRC; DECISIONS 111)")
    fi
    step clients env LATTICE_BIN="$PWD/target/release/lattice-server" bash ci/clients.sh
    suite_total clients clients
    # redis_exporter's metric names against redis-server's (skips, saying why,
    # where redis_exporter is not installed: the Go proxy refuses it here).
    step exporter python3 ci/exporter.py
else
    totals+=("redis-py: not run (release build failed)" "tcl: not run (release build failed)")
    totals+=("keydb: not run (release build failed)" "clients: not run (release build failed)")
fi

echo
echo "=== summary ($(( $(date +%s) - t0 ))s total; logs in $logs/)"
printf '%s\n' "${steps[@]}"
[ "$status" -eq 0 ] && echo "RESULT: all passed" || echo "RESULT: FAILED"
printf '%s\n' "${totals[@]}"
exit "$status"
