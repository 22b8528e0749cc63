#!/usr/bin/env bash
# KeyDB's own Tcl tests (its active-replica and multi-master units, and its
# KEYDB.CRON unit) run against target/release/lattice-server with KeyDB's
# own harness; ci/test-all.sh's step `keydb`, which skips when there is no
# KeyDB checkout to take them from.
#
# KeyDB is never built, and its files are never committed here (they are
# KeyDB's code; no package registry CI reaches ships them: DECISIONS 111).
# They come from KEYDB_SRC (a KeyDB work tree, or a git directory such as
# the `fetch` tool's mirror, read at KEYDB_REF), or .ci/cache/keydb-src; with
# neither, the script says so and exits 0. It copies them into a scratch root whose
# src/keydb-server is a wrapper that execs lattice-server (as ci/lib/tcl.py's
# --spawn mode does for Redis's suite), then runs each unit with KeyDB's
# harness (tests/test_helper.tcl --single <unit> --durable) and prints every
# test as ok / err (with the first line of its error) / skip. Tests after an
# error that ends a unit early (an [exception]) do not run and are not
# counted: read the unit's log.
#
#   bash ci/keydb-active.sh                          # the default units below
#   bash ci/keydb-active.sh integration/replication-multimaster
#   KEYDB_SRC=/path/to/KeyDB bash ci/keydb-active.sh  # a KeyDB work tree or git dir
#
# Skipped tests: ci/keydb-skiplist.txt, each with its reason (KEYDB_SKIP=none
# runs them all).
#
# What the wrapper changes, and why (nothing in KeyDB's files is edited):
#   - it prints "Thread 0 alive." first: KeyDB's start_server waits for that
#     line of KeyDB's log (after the " PID: <pid>" line, which lattice-server
#     prints as Redis does, and a PING), so it is only a readiness marker;
#   - it adds --enable-debug-command yes: KeyDB (Redis 6) allows DEBUG by
#     default and the tests use DEBUG DIGEST;
#   - it adds --active-replica-view keydb: KeyDB's tests read KeyDB's ROLE
#     and INFO view of an active node (role active-replica, its peers as
#     slaveN lines), which lattice-server shows only when asked, Redis
#     clients needing `master` (DECISIONS 109).
#
# Environment: KEYDB_SRC, KEYDB_REF (603ebb27fb82a27fb98b0feb6749b0f7661a1c4b,
# what ci/keydb holds), LATTICE_SERVER (target/release/lattice-server),
# KEYDB_BASEPORT (24111), NO_PROGRESS (120 s, the harness's --timeout: a test
# waits up to 100 s for a condition that never holds here), UNIT_TIMEOUT
# (600 s per unit, hard), KEEP_WORK=1 keeps the scratch root (logs under
# tests/tmp/). Per-unit logs: .ci/cache/logs/keydb/<unit>.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"

KEYDB_REF="${KEYDB_REF:-603ebb27fb82a27fb98b0feb6749b0f7661a1c4b}"
LATTICE_SERVER="${LATTICE_SERVER:-$REPO/target/release/lattice-server}"
BASEPORT="${KEYDB_BASEPORT:-24111}"
NO_PROGRESS="${NO_PROGRESS:-120}"
UNIT_TIMEOUT="${UNIT_TIMEOUT:-600}"
LOGDIR="$REPO/.ci/cache/logs/keydb"
SKIPLIST="$REPO/ci/keydb-skiplist.txt"
DEFAULT_UNITS=(integration/replication-active integration/replication-multimaster
    integration/replication-multimaster-connect unit/cron)
UNITS=("$@")
((${#UNITS[@]})) || UNITS=("${DEFAULT_UNITS[@]}")

command -v tclsh >/dev/null || { echo "tclsh missing: sudo bash .ci/setup.sh" >&2; exit 2; }
[[ -x "$LATTICE_SERVER" ]] || { echo "no $LATTICE_SERVER: cargo build --release" >&2; exit 2; }
LATTICE_SERVER="$(cd "$(dirname "$LATTICE_SERVER")" && pwd)/$(basename "$LATTICE_SERVER")"

WORK="$(mktemp -d /tmp/lattice-keydb.XXXXXX)"
# Servers the harness started and left behind (a unit killed at its time
# limit): lattice-server processes whose working directory is in $WORK.
kill_leftovers() {
    local p cwd
    for p in /proc/[0-9]*; do
        cwd="$(readlink "$p/cwd" 2>/dev/null)" || continue
        [[ "$cwd" == "$WORK"* ]] || continue
        [[ "$(readlink "$p/exe" 2>/dev/null)" == "$LATTICE_SERVER" ]] || continue
        kill -9 "${p#/proc/}" 2>/dev/null || true
    done
}
cleanup() {
    kill_leftovers
    if [[ -n "${KEEP_WORK:-}" ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The KeyDB tests, copied into $WORK/tests. They are KeyDB's code: never
# committed here, and no package registry ships them (DECISIONS 111). Without
# a checkout (KEYDB_SRC, or .ci/cache/keydb-src) the suite is skipped.
if [[ -z "${KEYDB_SRC:-}" ]]; then
    KEYDB_SRC="$REPO/.ci/cache/keydb-src"
fi
if [[ ! -e "$KEYDB_SRC" ]]; then
    echo "keydb: skipped: no KeyDB checkout (give one as KEYDB_SRC=<work tree or git dir>;" \
        "KeyDB's tests are not committed here and no registry ships them, DECISIONS 111)"
    exit 0
fi
if [[ -f "$KEYDB_SRC/tests/test_helper.tcl" ]]; then
    cp -r "$KEYDB_SRC/tests" "$WORK/tests"
elif git -C "$KEYDB_SRC" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$KEYDB_SRC" archive "$KEYDB_REF" tests | tar -x -C "$WORK"
else
    echo "$KEYDB_SRC: neither a KeyDB work tree nor a git directory" >&2
    exit 2
fi
rm -rf "$WORK/tests/tmp"
mkdir -p "$WORK/tests/tmp" "$WORK/src" "$LOGDIR"

cat >"$WORK/src/keydb-server" <<EOF
#!/bin/sh
# Stands in for KeyDB's binary: see ci/keydb-active.sh.
echo "Thread 0 alive."
if [ -f "\$1" ]; then
    exec "$LATTICE_SERVER" "\$@" --enable-debug-command yes --active-replica-view keydb
fi
exec "$LATTICE_SERVER" "\$@"
EOF
chmod +x "$WORK/src/keydb-server"
ln -s /usr/bin/redis-cli "$WORK/src/keydb-cli"
ln -s /usr/bin/redis-benchmark "$WORK/src/keydb-benchmark"

# skip_entries UNIT: the skip list's entries for UNIT, as "name<TAB>reason".
skip_entries() {
    [[ "${KEYDB_SKIP:-}" == none || ! -f "$SKIPLIST" ]] && return 0
    awk -F' [|] ' -v unit="$1" '
        /^[[:space:]]*(#|$)/ { next }
        $1 == unit { printf "%s\t%s\n", $2, $3 }' "$SKIPLIST"
}

total_ok=0 total_err=0 total_skip=0
for unit in "${UNITS[@]}"; do
    [[ -f "$WORK/tests/$unit.tcl" ]] || { echo "no tests/$unit.tcl in $KEYDB_SRC" >&2; exit 2; }
    log="$LOGDIR/${unit//\//_}.log"
    skipfile="$WORK/skip-${unit//\//_}"
    skip_entries "$unit" | cut -f1 | grep -v '^outside: ' >"$skipfile" || true
    skip_entries "$unit" | cut -f1 | sed -n 's/^outside: //p' >"$skipfile.outside"
    start=$(date +%s)
    rc=0
    (cd "$WORK" && timeout -k 10 "$UNIT_TIMEOUT" tclsh tests/test_helper.tcl --single "$unit" \
        --durable --clients 1 --timeout "$NO_PROGRESS" --baseport "$BASEPORT" \
        --skipfile "$skipfile") \
        </dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >"$log" || rc=$?
    kill_leftovers
    secs=$(($(date +%s) - start))
    # [ok]/[err]/[skip] lines, each [err] with its message: the line after
    # it, or the one after that when it is the server's error (KeyDB's
    # harness prints an exception's message cut by 10 characters first). An
    # [err] outside a test (in a start_server block), an [exception],
    # [TIMEOUT] or a kill at UNIT_TIMEOUT counts as a failure of the unit
    # itself, but an error outside a test that the skip list expects (and
    # the exception that follows it) counts as skipped.
    awk -v unit="$unit" -v secs="$secs" -v rc="$rc" -v logf="$log" -v outf="$skipfile.outside" '
        BEGIN {
            sfx = " in tests/" unit ".tcl"
            while ((getline l < outf) > 0) if (l != "") outside[++nout] = l
        }
        function expected(m,   i) {
            for (i = 1; i <= nout; i++) if (index(m, outside[i])) return 1
            return 0
        }
        want == 2 { if ($0 ~ /^[A-Z]+ /) msg[nerr] = $0; want = 0 }
        want == 1 {
            msg[nerr] = $0; want = 2
            if (out_err && (expected($0) || expected(err[nerr]))) {
                skip[++nskip] = "(outside a test, expected) " msg[nerr]; nerr--; want = 0; excused = 1
            }
            next
        }
        /^\[ok\]: / { sub(/^\[ok\]: /, ""); sub(/ \([0-9]+ ms\)$/, ""); ok[++nok] = $0; next }
        /^\[skip\]: / { sub(/^\[skip\]: /, ""); skip[++nskip] = $0; next }
        /^\[err\]: / {
            sub(/^\[err\]: /, "")
            out_err = 0
            if (index($0, sfx) && substr($0, length($0) - length(sfx) + 1) == sfx)
                err[++nerr] = substr($0, 1, length($0) - length(sfx))
            else { err[++nerr] = "(outside a test) " $0; out_err = 1 }
            want = 1; next
        }
        /^\[exception\]/ && excused { skip[++nskip] = "(the unit, after the expected error) " $0; next }
        /^\[exception\]|^\[TIMEOUT\]/ { err[++nerr] = "(the unit) " $0; msg[nerr] = ""; next }
        /^\*\*\* / { exit }
        END {
            if (rc == 124 || rc == 137) { err[++nerr] = "(the unit) killed after UNIT_TIMEOUT"; msg[nerr] = "" }
            printf "== %s: %d passed, %d failed, %d skipped (%d s, log %s)\n", unit, nok, nerr, nskip, secs, logf
            for (i = 1; i <= nok; i++) printf "  ok   %s\n", ok[i]
            for (i = 1; i <= nskip; i++) printf "  skip %s\n", substr(skip[i], 1, 160)
            for (i = 1; i <= nerr; i++) printf "  err  %s\n         %s\n", substr(err[i], 1, 160), substr(msg[i], 1, 160)
            print nok + 0, nerr + 0, nskip + 0 > "/dev/stderr"
        }' "$log" 2>"$WORK/counts"
    read -r o e k <"$WORK/counts"
    total_ok=$((total_ok + o)) total_err=$((total_err + e)) total_skip=$((total_skip + k))
done
echo "keydb: $total_skip skipped (ci/keydb-skiplist.txt)"
# The plain closing line (ci/test-all.sh reads it).
echo "keydb: $total_ok passed, $total_err failed"
((total_err == 0))
