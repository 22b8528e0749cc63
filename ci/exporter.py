#!/usr/bin/env python3
"""redis_exporter against lattice-server and redis-server: the metric names must be the same
but for the differences listed (and explained) in ci/exporter-diff.txt (issue 15 item 6).

Starts a master and a replica of each kind (replication metrics need one), gives both masters
the same data and commands, runs redis_exporter once per master, and compares the names of
the metrics each scrape returned. About 5 s.

redis_exporter (github.com/oliver006/redis_exporter) is a Go program; the Go module proxy this
project's machines reach refuses that module, so CI cannot install it: without it this check
says so and passes. Point REDIS_EXPORTER at a binary (or put redis_exporter on PATH) to run it.
Needs redis-server and redis-cli (.ci/setup.sh). LATTICE_SERVER picks the server binary
(default target/release/lattice-server).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIFF = ROOT / "ci" / "exporter-diff.txt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, what: str) -> None:
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            out = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                                 text=True, timeout=5).stdout
            if "PONG" in out:
                return
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)
    sys.exit(f"exporter: {what} did not start on port {port}")


def cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def names(url: str) -> set[str]:
    text = urllib.request.urlopen(url, timeout=20).read().decode()
    out = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            out.add(line.split("{")[0].split(" ")[0])
    return out


def expected() -> dict[str, tuple[str, str]]:
    """name -> (side that has it alone, why)."""
    exp = {}
    for line in DIFF.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, why = line.split(" # ", 1)
        side, name = head.split()
        exp[name] = (side, why)
    return exp


def main() -> int:
    exporter = os.environ.get("REDIS_EXPORTER") or shutil.which("redis_exporter")
    if not exporter or not Path(exporter).exists():
        print("exporter: skipped: redis_exporter is not installed (the Go module proxy refuses "
              "github.com/oliver006/redis_exporter here); set REDIS_EXPORTER to run it")
        return 0
    lattice = os.environ.get("LATTICE_SERVER", str(ROOT / "target/release/lattice-server"))
    work = Path(tempfile.mkdtemp(prefix="lattice-exporter-"))
    procs: list[subprocess.Popen] = []

    def start(binary: str, name: str, *args: str) -> int:
        port = free_port()
        d = work / name
        d.mkdir()
        log = open(d / "log", "wb")
        procs.append(subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                                       "--save", "", "--dir", str(d), *args],
                                      stdout=log, stderr=subprocess.STDOUT))
        wait_port(port, name)
        return port

    try:
        scrapes = {}
        for kind, binary in (("redis", "redis-server"), ("lattice", lattice)):
            master = start(binary, f"{kind}-master")
            replica = start(binary, f"{kind}-replica", "--replicaof", "127.0.0.1", str(master))
            for _ in range(150):
                if "master_link_status:up" in cli(replica, "info", "replication"):
                    break
                time.sleep(0.1)
            for db in ("0", "3"):
                cli(master, "-n", db, "set", "a", "1")
                cli(master, "-n", db, "set", "e", "1", "ex", "1000")
                cli(master, "-n", db, "rpush", "l", "a", "b")
            cli(master, "get", "a")
            cli(master, "nosuchcommand")
            web = free_port()
            procs.append(subprocess.Popen(
                [exporter, "-redis.addr", f"redis://127.0.0.1:{master}",
                 "-web.listen-address", f"127.0.0.1:{web}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            url = f"http://127.0.0.1:{web}/metrics"
            for _ in range(100):
                try:
                    scrapes[kind] = names(url)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                sys.exit(f"exporter: no scrape from {url}")
        exp = expected()
        failed = []
        for side, other in (("redis", "lattice"), ("lattice", "redis")):
            for name in sorted(scrapes[side] - scrapes[other]):
                if exp.get(name, ("", ""))[0] != side:
                    failed.append(f"{name}: only for {side}-server, not explained in {DIFF.name}")
        for name, (side, _) in sorted(exp.items()):
            other = "lattice" if side == "redis" else "redis"
            if not (name in scrapes[side] and name not in scrapes[other]):
                failed.append(f"{name}: listed in {DIFF.name} as {side}-only, no longer is")
        for fam in ("redis_up", "redis_connected_clients", "redis_memory_used_bytes",
                    "redis_commands_total", "redis_db_keys", "redis_rdb_last_save_timestamp_seconds",
                    "redis_connected_slaves", "redis_connected_slave_offset_bytes"):
            if fam not in scrapes["lattice"]:
                failed.append(f"{fam}: missing for lattice-server")
        same = len(scrapes["redis"] & scrapes["lattice"])
        print(f"exporter: {same} metric names in common; redis-server {len(scrapes['redis'])}, "
              f"lattice-server {len(scrapes['lattice'])}; {len(exp)} explained differences")
        for f in failed:
            print(f"exporter: FAIL {f}")
        print(f"exporter: {0 if failed else 1} passed, {1 if failed else 0} failed")
        return 1 if failed else 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
