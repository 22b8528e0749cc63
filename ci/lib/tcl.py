"""Redis 7.0's own Tcl test suite, run against lattice-server in external mode.

The suite is the tests/ directory of Debian 12's redis source package
(`apt-get source redis`, 7.0.x), unpacked into .ci/cache (never committed).
Units are those Redis itself lists (`test_helper.tcl --list-tests`), minus the
whole units named in ci/tcl-skiplist.txt. Each unit runs in its own
`test_helper.tcl --host 127.0.0.1 --port P --single <unit> --durable` against
a fresh lattice-server (so one crash or stuck unit cannot take others down),
with the skip list's tests for that unit passed as a --skipfile, a
no-progress --timeout and a hard wall-clock limit. Two units run at a time.

With --tls (spawn mode only) the suite runs in its TLS mode: every server it
starts serves tls-port only, with tls-replication, and its clients connect
over TLS; the certificates are ci/gen-test-certs.sh's.

Skip-list keys (ci/tcl-skiplist.txt), one per line, then ` # reason`:
    unit/tracking                          the whole unit is not run
    unit/type/string: SETNX against ...    one test, by its exact name

Parsed from the output: [ok] passes; [err] fails; [skip]/[ignore] are
skipped. A unit that ends badly without naming a test (an exception outside
a test, a timeout, an error in setup, the server dying) counts as one
failure keyed by the unit alone, so only a whole-unit entry can skip it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from common import (CACHE, ROOT, TRIAGE, Server, log, read_skiplist, run, run_group,
                    server_binary, write_skiplist)

SKIPLIST = ROOT / "ci" / "tcl-skiplist.txt"
WAITS = ROOT / "ci" / "tcl-waits.txt"
SRC_PARENT = CACHE / "redis-src"
NO_PROGRESS = int(os.environ.get("TCL_NO_PROGRESS_TIMEOUT", "60"))
UNIT_TIMEOUT = int(os.environ.get("TCL_UNIT_TIMEOUT", "300"))
# Wall-clock budget for the whole suite (CI must finish in 20 minutes): a unit
# gets at most what is left of it, and units that would start later fail as
# "not run". Normal runs take a fraction of it.
BUDGET = int(os.environ.get("TCL_BUDGET", "480"))
JOBS = int(os.environ.get("TCL_JOBS", "2"))
TLS = False  # --tls: the suite's own TLS mode (spawn mode only)
UNIT_RE = re.compile(r"^(unit|integration)/[\w/-]+$")


def source_dir() -> Path:
    """The unpacked Redis 7.0 source tree, fetched with apt-get source if absent."""
    found = sorted(SRC_PARENT.glob("redis-7.0*/tests/test_helper.tcl"))
    if not found:
        SRC_PARENT.mkdir(parents=True, exist_ok=True)
        log("fetching Redis 7.0 sources with `apt-get source redis` (needs deb-src, "
            "dpkg-dev: see .ci/setup.sh)")
        run(["apt-get", "source", "-qq", "redis"], cwd=SRC_PARENT)
        found = sorted(SRC_PARENT.glob("redis-7.0*/tests/test_helper.tcl"))
        if not found:
            sys.exit(f"apt-get source did not produce a redis-7.0* tree in {SRC_PARENT}")
    return found[-1].parents[1]


TEST_RE = re.compile(r'^\s*test\s+[{"](.+?)[}"]\s+\{\s*$')


def add_upstream_waits(src: Path) -> None:
    """Inserts the waits of ci/tcl-waits.txt (added by Redis in later releases
    to tests that raced a blocking command against a write on another
    connection) after their anchor lines. Idempotent: an anchor already
    followed by its wait counts as done, so the cached tree is patched once."""
    edits: dict[Path, list[list[str]]] = {}
    for n, raw in enumerate(WAITS.read_text().splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        fields = [f.strip() for f in raw.split(" | ")]
        if len(fields) != 6:
            sys.exit(f"{WAITS}:{n}: expected 6 fields separated by ' | ', got: {raw}")
        edits.setdefault(src / "tests" / f"{fields[0]}.tcl", []).append(fields)
    for path, entries in edits.items():
        lines = path.read_text().splitlines(keepends=True)
        for unit, test, which, anchor, wait, _upstream in entries:
            lines = insert_wait(lines, test, which, anchor, wait,
                                f"{WAITS.name}: {unit}: {test}: {anchor}")
        path.write_text("".join(lines))


def insert_wait(lines: list[str], test: str, which: str, anchor: str, wait: str,
                where: str) -> list[str]:
    """Adds `wait` after the chosen occurrences (1-based, or every one) of
    `anchor` inside every test named `test`; a test's body runs to the next
    `test` line. Exits if no chosen occurrence is found."""
    wanted = None if which == "*" else {int(x) for x in which.split(",")}
    out, in_test, seen, hits = [], False, 0, set()
    for i, line in enumerate(lines):
        m = TEST_RE.match(line)
        if m:
            in_test, seen = m.group(1) == test, 0
        out.append(line)
        if not (in_test and line.strip() == anchor):
            continue
        seen += 1
        if wanted is not None and seen not in wanted:
            continue
        hits.add(seen)
        if i + 1 >= len(lines) or lines[i + 1].strip() != wait:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{wait}\n")
    if not hits or (wanted is not None and hits != wanted):
        sys.exit(f"{where}: anchor not found in the fetched suite")
    return out


def all_units(src: Path) -> list[str]:
    out = subprocess.run(["tclsh", "tests/test_helper.tcl", "--list-tests"], cwd=src,
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return [u for u in out.split() if UNIT_RE.match(u)]


def split_key(key: str) -> tuple[str, str | None]:
    unit, sep, test = key.partition(": ")
    if not UNIT_RE.match(unit):
        sys.exit(f"{SKIPLIST}: entry must start with a unit path (unit/...): {key}")
    return unit, (test if sep else None)


@dataclass
class UnitResult:
    unit: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # test names; "" = the unit itself
    skipped: int = 0
    seconds: float = 0
    note: str = ""
    hung: str | None = None  # the test that made the suite time out
    messages: dict[str, str] = field(default_factory=dict)  # test -> first error line


def parse(unit: str, output: str, res: UnitResult) -> None:
    suffix = f" in tests/{unit}.tcl"
    timed_out = False
    last_err = None  # the failed test whose message is the next line
    for line in output.splitlines():
        if last_err is not None:
            if line.strip():
                res.messages.setdefault(last_err, line.strip())
            last_err = None
        if timed_out:  # the state report names the test that hung, if one did
            m = re.search(r" => \(IN PROGRESS\) (.*)$", line)
            if m:
                res.failed.append(m.group(1))
                res.hung = m.group(1)
                res.note = f"hung in a test for {NO_PROGRESS}s: {m.group(1)}"
                timed_out = False
                continue
            if not line.strip():
                res.failed.append("")
                res.note = res.note or f"no progress for {NO_PROGRESS}s between tests"
                timed_out = False
        if line.startswith("[ok]: "):
            res.passed.append(re.sub(r" \(\d+ ms\)$", "", line[6:]))
        elif line.startswith("[err]: "):
            first = line[7:]
            if first.endswith(suffix):
                res.failed.append(first[: -len(suffix)])
                last_err = first[: -len(suffix)]
            else:  # error outside a test (e.g. in a start_server block's setup)
                res.failed.append("")
                res.note = res.note or f"error outside a test: {first[:120]}"
        elif line.startswith(("[skip]: ", "[ignore]: ")):
            res.skipped += 1
        elif line.startswith("[exception]: "):
            res.failed.append("")
            res.note = res.note or line[:160]
        elif line.startswith("[TIMEOUT]"):
            timed_out = True
    if timed_out:
        res.failed.append("")
        res.note = res.note or f"no progress for {NO_PROGRESS}s"


def kill_leftover_servers(src: Path) -> None:
    """Spawn mode: SIGKILL servers a unit left running (the suite escalates to
    SIGKILL only after 20 s, and a run that timed out leaves its servers),
    so they cannot hold the next unit's ports. Matches processes started as
    src/redis-server whose working directory is under this suite's tests/."""
    tests = str(src / "tests")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if argv0 == b"src/redis-server" and cwd.startswith(tests):
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass


def link_binaries(src: Path) -> None:
    """Spawn mode: the suite starts src/redis-server and calls src/redis-cli etc."""
    links = {"redis-server": server_binary(), "redis-cli": Path("/usr/bin/redis-cli"),
             "redis-benchmark": Path("/usr/bin/redis-benchmark"),
             "redis-check-aof": Path("/usr/bin/redis-check-aof"),
             "redis-check-rdb": Path("/usr/bin/redis-check-rdb")}
    for name, target in links.items():
        link = src / "src" / name
        link.unlink(missing_ok=True)
        link.symlink_to(Path(os.path.abspath(target)))  # not resolve(): Debian's
        # redis-server is a symlink to a multi-call binary that looks at argv[0]


def prepare_tls(src: Path) -> None:
    """`--tls`: the suite's certificates, made X.509 v3 by ci/gen-test-certs.sh
    (Redis's utils/gen-test-certs.sh makes a v1 redis.crt, which rustls
    refuses), once per unpacked suite; and Tcl's tls package (tcl-tls)."""
    probe = subprocess.run(["tclsh"], input="package require tls\n", text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if probe.returncode != 0 or "can't find package" in probe.stdout:
        sys.exit("--tls needs Tcl's tls package: apt-get install tcl-tls (see .ci/setup.sh)")
    tls = src / "tests" / "tls"
    if not (tls / ".lattice-v3").exists():
        run(["bash", str(ROOT / "ci" / "gen-test-certs.sh"), str(tls)])
        (tls / ".lattice-v3").write_text("made by ci/gen-test-certs.sh\n")


def run_unit(src: Path, unit: str, skips: list[str], lane: int, spawn: bool,
             deadline: float) -> UnitResult:
    res = UnitResult(unit)
    start = time.time()
    limit = int(min(UNIT_TIMEOUT, deadline - start))
    if limit < 10:
        res.failed.append("")
        res.note = f"not run: the suite's {BUDGET}s budget (TCL_BUDGET) is used up"
        return res
    suffix = "-tls" if TLS else ""
    logfile = CACHE / "logs" / "tcl" / f"{unit.replace('/', '_')}{suffix}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".skip", delete=False) as f:
        f.write("\n".join(skips) + "\n")
    cmd = ["tclsh", "tests/test_helper.tcl", "--single", unit, "--durable", "--clients", "1",
           "--timeout", str(NO_PROGRESS), "--skipfile", f.name] + (["--tls"] if TLS else [])
    # TCL_BASEPORT: another range, so that two worktrees can run at once.
    base = int(os.environ.get("TCL_BASEPORT", "21111"))
    if spawn:
        server = None
        cmd += ["--baseport", str(base + 1000 * lane), "--portcount", "900"]
    else:
        server = Server("tcl-" + unit.replace("/", "_"))
        cmd += ["--host", "127.0.0.1", "--port", str(server.port),
                "--baseport", str(base + 100 * lane)]
    env = dict(os.environ, TERM="dumb")
    out, rc = run_group(cmd, limit, cwd=src, env=env)
    if spawn:
        kill_leftover_servers(src)
    output = out.decode("utf-8", "replace")
    os.unlink(f.name)
    logfile.write_text(output)
    parse(unit, output, res)
    if rc is None:
        res.failed.append("")
        res.note = res.note or f"killed after {limit}s"
    elif rc != 0 and not res.failed:
        res.failed.append("")
        res.note = f"runtest exited {rc} without a failing test; see {logfile}"
    if server is not None:
        if not server.alive():
            res.failed.append("")
            res.note = f"SERVER EXITED (code {server.proc.returncode}); see {server.logfile}"
        server.stop()
    res.seconds = time.time() - start
    return res


def run_units(src: Path, units: list[str], test_skips: dict[str, list[str]],
              spawn: bool) -> list[UnitResult]:
    # spawn mode: every run wipes the shared tests/tmp/server.* at start, so one at a time
    jobs = 1 if spawn else JOBS
    lanes = list(range(jobs))
    deadline = time.time() + BUDGET

    def job(unit: str) -> UnitResult:
        lane = lanes.pop()
        try:
            r = run_unit(src, unit, test_skips.get(unit, []), lane, spawn, deadline)
        finally:
            lanes.append(lane)
        note = f"  ({r.note})" if r.note else ""
        log(f"tcl {unit}: {len(r.passed)} passed, {len(r.failed)} failed, "
            f"{r.skipped} skipped, {r.seconds:.0f}s{note}")
        for name in filter(None, r.failed):  # named here too: CI shows this part
            log(f"tcl {unit}: FAILED {name}")
        return r

    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(job, units))
    return results


def rerun_hung(src: Path, results: list[UnitResult], test_skips: dict[str, list[str]],
               spawn: bool) -> list[UnitResult]:
    """Update mode: a unit that hung in a test ran no further. Re-run it skipping
    what failed so far, to find the failures after that test (up to 4 times)."""
    by_unit = {r.unit: r for r in results}
    for _ in range(4):
        hung = [r for r in by_unit.values() if r.hung]
        if not hung:
            break
        for r in hung:
            test_skips.setdefault(r.unit, []).extend(t for t in r.failed if t)
        log(f"tcl: re-running {len(hung)} unit(s) past the tests that hung")
        for n in run_units(src, [r.unit for r in hung], test_skips, spawn):
            n.failed = by_unit[n.unit].failed + n.failed
            by_unit[n.unit] = n
    return [by_unit[r.unit] for r in results]


def main(argv: list[str]) -> int:
    if argv == ["--fetch"]:  # just make sure the sources are there (cargo tests read fixtures)
        log(f"tcl: Redis sources at {source_dir()}")
        return 0
    global TLS
    update = "--update-skiplist" in argv
    spawn = "--spawn" in argv
    TLS = "--tls" in argv
    if TLS and not spawn:
        sys.exit("--tls runs in spawn mode only (--spawn): the suite starts its servers with "
                 "its TLS configuration")
    only = [a for a in argv if a not in ("--update-skiplist", "--spawn", "--tls")]
    start = time.time()
    src = source_dir()
    add_upstream_waits(src)
    header, entries = read_skiplist(SKIPLIST)
    # update mode: run as if the TRIAGE entries were not there, then rewrite them
    active = [e for e in entries if not (update and e.triage)]
    skip_units, test_skips = set(), {}
    for e in active:
        unit, test = split_key(e.key)
        if test is None:
            skip_units.add(unit)
        else:
            test_skips.setdefault(unit, []).append(test)
    units = all_units(src)
    unknown = (skip_units | set(test_skips) | set(only)) - set(units)
    if unknown:
        sys.exit(f"not units of this Redis test suite: {sorted(unknown)}")
    if only:  # units named explicitly run even if the skip list skips them whole
        units = [u for u in units if u in only]
    else:
        units = [u for u in units if u not in skip_units]
    if spawn:
        link_binaries(src)
    if TLS:
        prepare_tls(src)
    mode = "spawning src/redis-server ->" if spawn else "external mode, against"
    mode = ("over TLS, " if TLS else "") + mode
    log(f"tcl: Redis {src.name} suite, {len(units)} units ({len(skip_units)} skipped whole by "
        f"the skip list), {1 if spawn else JOBS} at a time, {mode} {server_binary()}")
    results = run_units(src, units, test_skips, spawn)
    if update:
        results = rerun_hung(src, results, test_skips, spawn)
    failing = []
    for r in results:
        failing += [r.unit if not t else f"{r.unit}: {t}" for t in r.failed]
    for k in failing:
        log(f"FAILED {k}")
    passed = sum(len(r.passed) for r in results)
    log(f"tcl: {sum(r.skipped for r in results)} tests skipped/ignored in the units run, "
        f"{time.time() - start:.0f}s")
    if update:
        # a unit that failed as a whole is skipped whole; its tests need no entries
        whole = {k for k in failing if ": " not in k}
        new = [k for k in failing if k in whole or split_key(k)[0] not in whole]
        new = [k for k in new if split_key(k)[0] not in skip_units]  # named explicitly
        ran = set(units)
        kept = [e for e in entries if not e.triage or split_key(e.key)[0] not in ran]
        messages = {}
        for r in results:
            for t, msg in r.messages.items():
                messages[f"{r.unit}: {t}"] = msg
            if r.note:
                messages.setdefault(r.unit, r.note)
        write_skiplist(SKIPLIST, header, kept, new, messages)
        log(f"tcl: wrote {len(set(new))} '{TRIAGE}' entries to {SKIPLIST}")
    log(f"tcl: {passed} passed, {len(failing)} failed")
    return 1 if failing and not update else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
