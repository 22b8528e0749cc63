"""Shared pieces of the peer-suite runners (redis-py, Redis Tcl suite).

- where things live: the repo root, the cache dir (.ci/cache, gitignored) that
  holds downloaded suites, venvs and logs;
- starting/stopping a lattice-server on a free port (or any server binary given
  by $LATTICE_SERVER, e.g. /usr/bin/redis-server to check the machinery itself);
- the skip-list file format shared by both suites:

      <key> # <reason>

  one entry per line; blank lines and lines starting with '#' are comments.
  The reason is mandatory and is everything after the LAST " # ". Entries whose
  reason starts with TRIAGE are owned by ci/update-skiplists.sh: it drops them,
  re-runs the suite and writes the current failures back with that reason.
  Every other entry is hand-written and kept as is.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LATTICE_CI_CACHE", ROOT / ".ci" / "cache"))
TRIAGE = "failing at introduction; triage"
OPTIONAL_ARGS = ["--enable-debug-command", "yes"]
_optional_ok: bool | None = None  # did the server accept OPTIONAL_ARGS?


def log(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary() -> Path:
    return Path(os.environ.get("LATTICE_SERVER", ROOT / "target" / "release" / "lattice-server"))


class Server:
    """A server process on a free port with its own scratch dir; stop() kills it."""

    def __init__(self, name: str):
        self.name = name
        self.logfile = CACHE / "logs" / "servers" / f"{name}.log"
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        binary = server_binary()
        if not binary.exists():
            sys.exit(f"server binary {binary} missing: run `cargo build --release` first")
        self.args = [str(binary), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        # Both suites use DEBUG (as Redis's own external-server CI enables it);
        # a build that rejects the directive is started without it.
        global _optional_ok
        if _optional_ok is not False:
            if self._start(OPTIONAL_ARGS):
                _optional_ok = True
                return
            if _optional_ok is None:
                log(f"note: {binary.name} rejected {' '.join(OPTIONAL_ARGS)}; starting without")
                _optional_ok = False
        if not self._start([]):
            sys.exit(f"server did not start; see {self.logfile}")

    def _start(self, optional: list[str]) -> bool:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"lattice-ci-{self.name}-"))
        self._out = open(self.logfile, "wb")
        args = self.args + ["--port", str(self.port), "--dir", str(self.dir)] + optional
        self.proc = subprocess.Popen(args, stdout=self._out, stderr=subprocess.STDOUT,
                                     cwd=self.dir)
        if self._wait_ready():
            return True
        self.stop()
        return False

    def _wait_ready(self) -> bool:
        deadline = time.time() + 15
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Entry:
    key: str
    reason: str

    @property
    def triage(self) -> bool:
        return self.reason.startswith(TRIAGE)


def read_skiplist(path: Path) -> tuple[list[str], list[Entry]]:
    """Returns (header comment lines, entries). Exits on a malformed line."""
    header: list[str] = []
    entries: list[Entry] = []
    if not path.exists():
        return header, entries
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            if not entries:
                header.append(line)
            continue
        key, sep, reason = line.rpartition(" # ")
        if not sep or not key.strip() or not reason.strip():
            sys.exit(f"{path}:{n}: expected `<entry> # <reason>`, got: {raw}")
        entries.append(Entry(key.strip(), reason.strip()))
    return header, entries


def write_skiplist(path: Path, header: list[str], kept: list[Entry], failing: list[str]) -> None:
    """Rewrites `path`: header, hand-written entries, then one TRIAGE entry per failure."""
    lines = list(header)
    if lines and lines[-1].strip():
        lines.append("")
    lines += [f"{e.key} # {e.reason}" for e in kept]
    known = {e.key for e in kept}
    new = sorted(k for k in set(failing) if k not in known)
    if new:
        lines += ["", f"# --- written by ci/update-skiplists.sh ({len(new)} entries) ---"]
        lines += [f"{k} # {TRIAGE}" for k in new]
    path.write_text("\n".join(lines) + "\n")


def run_group(cmd: list[str], timeout: float, **kw) -> tuple[bytes, int | None]:
    """Runs cmd in its own process group with stdout+stderr captured, unless
    kw["stdout"] says otherwise; on timeout kills the whole group (the Tcl
    suite forks test clients) and returns (output so far, None)."""
    kw.setdefault("stdout", subprocess.PIPE)
    p = subprocess.Popen(cmd, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
        return out or b"", p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return out or b"", None


def run(cmd: list[str], **kw) -> None:
    """Runs a setup command, echoing it; exits with its output on failure."""
    log("+ " + " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-4000:]}")
