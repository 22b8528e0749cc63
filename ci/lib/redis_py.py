"""redis-py's own test suite, run against lattice-server.

The suite is the `tests/` directory of the redis-py sdist from PyPI (pinned
below), unpacked into .ci/cache; its test dependencies go into a venv there.
We start a lattice-server on a free port, point the suite at it with
--redis-url, and select tests with redis-py's own markers the way its CI does
for a standalone server (no cluster, no modules, no replica), then
ci/redis-py-skiplist.txt: a file entry becomes --ignore, a node id --deselect.
The server also serves TLS (--redis-ssl-url) with the certificate tree
redis-py's docker set-up provides (dockers/standalone/tls/: ca, redis,
client), which ci/gen-test-certs.sh writes under the same names, so the
`ssl`-marked tests run too (a few seconds).

A small pytest plugin (pytest_results.py) records each test's outcome as JSON;
we count from that, print the failures, and finish with
`redis-py: N passed, M failed`. Exit status: 0 iff nothing failed.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
import time
import venv
from pathlib import Path

from common import (CACHE, ROOT, TRIAGE, Server, log, read_skiplist, run, run_group,
                    write_skiplist)

VERSION = "5.2.1"
SDIST = CACHE / f"redis-{VERSION}"
VENV = CACHE / "venv-redis-py"
SKIPLIST = ROOT / "ci" / "redis-py-skiplist.txt"
INI = Path(__file__).with_name("redis-py-pytest.ini")
# What redis-py's tests import besides redis itself (conftest: pytest,
# packaging; asyncio tests: pytest_asyncio; async_timeout below 3.11.3).
# pytest-asyncio 0.23 is the line redis-py 5.2 was developed against.
REQUIREMENTS = [
    "pytest==8.3.5",
    "pytest-asyncio==0.23.8",
    "pytest-timeout==2.3.1",
    "packaging>=20.4",
    'async-timeout>=4.0.3; python_full_version<"3.11.3"',
]
# Markers redis-py's CI also excludes when testing one standalone server.
MARKERS = "not onlycluster and not redismod and not replica and not graph"
# Where redis-py's ssl tests look for certificates (tests/ssl_utils.py).
TLS_DIR = SDIST / "dockers" / "standalone" / "tls"
# Wall-clock limit for the whole pytest run (CI must finish in 20 minutes);
# each test also has a 30 s timeout (redis-py-pytest.ini).
HARD_TIMEOUT = int(os.environ.get("REDIS_PY_TIMEOUT", "420"))


def fetch() -> None:
    if (SDIST / "tests" / "conftest.py").exists():
        return
    dl = CACHE / "download"
    dl.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         f"redis=={VERSION}", "-d", str(dl)])
    with tarfile.open(dl / f"redis-{VERSION}.tar.gz") as t:
        t.extractall(CACHE, filter="data")


def ensure_certs() -> None:
    if not (TLS_DIR / "client.key").exists():
        run(["bash", str(ROOT / "ci" / "gen-test-certs.sh"), str(TLS_DIR)])


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    stamp = VENV / "lattice-requirements.txt"
    want = "\n".join(REQUIREMENTS)
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    venv.create(VENV, with_pip=True, clear=True)
    run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS])
    stamp.write_text(want)
    return py


def selection_args(entries) -> list[str]:
    args = []
    for e in entries:
        path = e.key.split("::", 1)[0]
        if not (SDIST / path).exists():
            sys.exit(f"{SKIPLIST}: no such test path in redis-py {VERSION}: {path}")
        args.append(f"--deselect={e.key}" if "::" in e.key else f"--ignore={e.key}")
    return args


def run_suite(entries, extra: list[str]) -> tuple[dict, int]:
    """Runs pytest; returns ({nodeid: outcome}, pytest exit code)."""
    py = ensure_venv()
    results = CACHE / "logs" / "redis-py-results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    ensure_certs()
    server = Server("redis-py", tls_dir=TLS_DIR)
    cmd = [str(py), "-m", "pytest", "-c", str(INI), "--rootdir", str(SDIST),
           "-p", "pytest_results", "-p", "no:cacheprovider", "-q", "--tb=no", "-rN",
           f"--redis-url=redis://127.0.0.1:{server.port}/0",
           f"--redis-ssl-url=rediss://127.0.0.1:{server.tls_port}", "-m", MARKERS,
           *selection_args(entries), *extra, "tests"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent),
               LATTICE_RESULTS=str(results), PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")
    log(f"redis-py {VERSION}: pytest against {server.proc.args[0]} on port {server.port}")
    _, rc = run_group(cmd, HARD_TIMEOUT, cwd=SDIST, env=env, stdout=None)
    if rc is None:
        log(f"redis-py: pytest killed after {HARD_TIMEOUT}s (REDIS_PY_TIMEOUT)")
        rc = -1
    crashed = not server.alive()
    server.stop()
    outcomes = json.loads(results.read_text()) if results.exists() else {}
    if crashed:
        log(f"redis-py: SERVER EXITED during the run; see {server.logfile}")
        outcomes["<server exited during the run>"] = "failed"
    return outcomes, rc


def main(argv: list[str]) -> int:
    update = "--update-skiplist" in argv
    extra = [a for a in argv if a != "--update-skiplist"]
    if update and extra:
        sys.exit("--update-skiplist runs the whole suite; it takes no pytest arguments")
    start = time.time()
    fetch()
    header, entries = read_skiplist(SKIPLIST)
    kept = [e for e in entries if not e.triage] if update else entries
    outcomes, rc = run_suite(kept, extra)
    failed = sorted(k for k, v in outcomes.items() if v == "failed")
    passed = sum(v == "passed" for v in outcomes.values())
    skipped = sum(v == "skipped" for v in outcomes.values())
    for k in failed:
        log(f"FAILED {k}")
    ok = rc in (0, 1, 5) and (rc != 1 or failed)
    if not ok:
        log(f"redis-py: pytest exited with {rc} (interrupted, internal or usage error)")
        failed.append(f"<pytest exit code {rc}>")
    if update:
        if not ok or any(k.startswith("<") for k in failed):
            log("redis-py: not updating the skip list: the run itself broke")
            return 1
        msg_file = CACHE / "logs" / "redis-py-results.json.messages"
        messages = json.loads(msg_file.read_text()) if msg_file.exists() else {}
        write_skiplist(SKIPLIST, header, kept, failed, messages)
        log(f"redis-py: wrote {len(failed)} '{TRIAGE}' entries to {SKIPLIST}")
    log(f"redis-py: {skipped} skipped by markers/skipif, "
        f"{len(kept) if update else len(entries)} skip-list entries, {time.time() - start:.0f}s")
    log(f"redis-py: {passed} passed, {len(failed)} failed")
    return 1 if failed and not update else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
