#!/usr/bin/env bash
# Issue 29's benchmark table in one command: runs bench/compare.sh (SET/GET
# and memory per key), bench/collections.sh, bench/scripting.sh (the
# redis-benchmark side), bench/memtier.sh (the memtier side, when MEMTIER
# names a binary) and the in-process scaling bench at 1 and 2 threads, each
# server pinned to CPU 0 and the load generator to CPU 1 as those scripts
# do, then prints one table: per test and pipeline the CPU-per-request
# ratio (Redis's CPU per request / ours: > 1 means we spend less) under
# each load generator, both p99s, the issue's target, and whether it is
# met. Each step's own output and the load average before and after it are
# kept in OUT (printed at the end).
#
#   MEMTIER=/tmp/memtier/memtier_benchmark bash bench/issue29.sh
#   SKIP_BUILD=1 MEMTIER=... bash bench/issue29.sh        # builds already made
#   SKIP_BUILD=1 MEMTIER=... chrt -r 10 bash bench/issue29.sh
#       (a loaded box: servers, load generators and the scaling bench then
#       run at real-time priority and other processes wait; never without
#       SKIP_BUILD, which would run the build so too)
#
# The build (without SKIP_BUILD): `cargo build --release` and the scaling
# bench's `cargo bench --bench inproc --no-run` (with SKIP_BUILD and no such
# binary the scaling step is skipped, said at the start). memtier is built by hand
# (bench/memtier.sh's header). Environment: ROUNDS (3: alternating rounds
# within each script, medians shown), REQUESTS, REQUESTS_P1 (the scripts'
# defaults), MEMTIER, INPROC_OPS (1000000 a thread), STEPS (some of
# "compare collections scripting memtier inproc"), OUT (a directory).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/issue29.XXXXXX)}"
STEPS="${STEPS:-compare collections scripting memtier inproc}"
mkdir -p "$OUT"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    (cd "$ROOT" && cargo build --release --quiet && cargo bench --bench inproc --no-run --quiet)
fi
export ROUNDS="${ROUNDS:-3}" SKIP_BUILD=1

has() { [[ " $STEPS " == *" $1 "* ]]; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# step NAME COMMAND...: runs it, its output to OUT/NAME.txt, the load
# average before and after it to OUT/NAME.load.
step() {
    local name="$1" before
    shift
    before="$(loadavg)"
    echo "== $name (load average $before)" >&2
    "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err" || { cat "$OUT/$name.err" >&2 && exit 1; }
    echo "$before -> $(loadavg)" >"$OUT/$name.load"
}

# inproc_bin: the scaling bench's newest binary, or nothing.
inproc_bin() {
    find "$ROOT/target/release/deps" -maxdepth 1 -name 'inproc-*' ! -name '*.d' \
        -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -1 | cut -d' ' -f2
}
if has inproc && [[ -z "$(inproc_bin)" ]]; then
    echo "== inproc skipped: no bench binary (cargo bench --bench inproc --no-run, or run without SKIP_BUILD)" >&2
    STEPS="${STEPS/inproc/}"
fi

# inproc: the scaling bench at 1 and 2 threads, pinned.
inproc() {
    "$(inproc_bin)" --threads 1,2 --cmd get,set,incr,lpush,hset --feed plain --dist uniform \
        --ops "${INPROC_OPS:-1000000}" --repeat 3 --pin
}

has compare && step compare bash "$ROOT/bench/compare.sh"
has collections && SKIP_MEM=1 step collections bash "$ROOT/bench/collections.sh"
has scripting && SKIP_MT=1 step scripting bash "$ROOT/bench/scripting.sh"
if has memtier; then
    if [[ -x "${MEMTIER:-}" ]]; then
        step memtier bash "$ROOT/bench/memtier.sh"
    else
        echo "== memtier skipped: MEMTIER is not set (bench/memtier.sh's header)" >&2
    fi
fi
has inproc && step inproc inproc

# row FILE TEST: "cpu_ratio redis_p99 lattice_p99" of TEST's row (e.g.
# "GET P=16") in a bench table, or "- - -".
row() {
    local f="$OUT/$1.txt"
    [[ -f $f ]] || { echo "- - -" && return; }
    awk -F'|' -v t="$2" '{ n = $1; gsub(/ +$/, "", n) } n == t {
        gsub(/ /, ""); print $7, ($8 == "" ? "-" : $8), ($9 == "" ? "-" : $9); found = 1; exit }
        END { if (!found) print "- - -" }' "$f"
}

# verdict TARGET CPU_RATIO P99_REDIS P99_LATTICE: whether the row meets
# the CPU target and the p99 one.
verdict() {
    awk -v t="$1" -v c="$2" -v r="$3" -v l="$4" 'BEGIN {
        if (c == "-") { print "-"; exit }
        s = (c + 0 >= t ? "cpu yes" : "cpu no")
        if (r != "-" && l != "-") s = s (l + 0 <= r + 0 ? ", p99 yes" : ", p99 no")
        print s }'
}

printf '\nissue 29, one run (%s alternating rounds a script; load averages below)\n' "$ROUNDS"
printf '%-18s | %6s | %-15s | %-15s | %-15s | %-15s | %-16s | %s\n' test target \
    "rb cpu ratio" "rb p99 r/l ms" "mt cpu ratio" "mt p99 r/l ms" "redis-benchmark" memtier
printf '%s\n' "-------------------+--------+-----------------+-----------------+-----------------+-----------------+------------------+-----------------"
for pipe in 1 16; do
    for t in SET GET LPUSH LPOP SADD HSET ZADD LRANGE_100 EVALSHA-1CMD EVALSHA-3CMD FCALL-1CMD FCALL-3CMD; do
        case $t in
        SET | GET) src=compare ;;
        EVAL* | FCALL*) src=scripting ;;
        *) src=collections ;;
        esac
        target=1.3
        [[ $pipe == 16 ]] && target=2.0
        [[ $src == scripting ]] && target=1.0
        read -r bc br bl <<<"$(row "$src" "$t P=$pipe")"
        read -r mc mr ml <<<"$(row memtier "$t P=$pipe")"
        printf '%-18s | %6s | %-15s | %-15s | %-15s | %-15s | %-16s | %s\n' "$t P=$pipe" "$target" \
            "$bc" "$br / $bl" "$mc" "$mr / $ml" "$(verdict "$target" "$bc" "$br" "$bl")" \
            "$(verdict "$target" "$mc" "$mr" "$ml")"
    done
done
if [[ -f $OUT/compare.txt ]]; then
    printf '\nbytes per key (target <= 50; compare.sh):\n'
    grep -A3 '^memory' "$OUT/compare.txt" || true
fi
if [[ -f $OUT/inproc.txt ]]; then
    printf '\nin-process scaling at 2 threads (target >= 0.9):\n'
    awk '$4 == 2 { printf "%-6s %s %s\n", $1, $7, ($7 + 0 >= 0.9 ? "yes" : "no") }' "$OUT/inproc.txt"
fi
printf '\nload average before -> after each step:\n'
for s in $STEPS; do
    [[ -f $OUT/$s.load ]] && printf '%-12s %s\n' "$s" "$(cat "$OUT/$s.load")"
done
echo "(each step's full output: $OUT)"
