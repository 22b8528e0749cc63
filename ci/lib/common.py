"""Shared pieces of the peer-suite runners (redis-py, Redis Tcl suite).

- where things live: the repo root, the cache dir (.ci/cache, gitignored) that
  holds downloaded suites, venvs and logs;
- starting/stopping a lattice-server on a free port (or any server binary given
  by $LATTICE_SERVER, e.g. /usr/bin/redis-server to check the machinery itself);
- the skip-list file format shared by both suites:

      <key> # <reason>

  one entry per line; blank lines and lines starting with '#' are comments.
  The reason is mandatory and is everything after the LAST " # ". Entries whose
  reason starts with TRIAGE or AUTO are owned by ci/update-skiplists.sh: it
  drops them, re-runs the suite and writes the current failures back, each
  with a reason derived from its error message (`classify`: the missing
  command's family and issue, or the first line of the mismatch), or TRIAGE
  when no message was captured. Every other entry is hand-written and kept.
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
AUTO = "auto:"

# Command families not built yet, and the issue that builds them.
FAMILIES = [
    ("lists, issue 3", "LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LRANGE LLEN LINDEX LSET LREM LTRIM LINSERT "
     "LPOS LMOVE BLMOVE BLPOP BRPOP BRPOPLPUSH RPOPLPUSH LMPOP BLMPOP"),
    ("hashes, issue 3", "HSET HSETNX HGET HMSET HMGET HDEL HLEN HSTRLEN HKEYS HVALS HGETALL HEXISTS "
     "HINCRBY HINCRBYFLOAT HSCAN HRANDFIELD"),
    ("sets, issue 3", "SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SINTER "
     "SINTERCARD SINTERSTORE SUNION SUNIONSTORE SDIFF SDIFFSTORE SMOVE SSCAN"),
    ("sorted sets, issue 3", "ZADD ZREM ZRANGE ZRANGESTORE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE "
     "ZRANGEBYLEX ZREVRANGEBYLEX ZCARD ZSCORE ZMSCORE ZINCRBY ZRANK ZREVRANK ZCOUNT ZLEXCOUNT "
     "ZPOPMIN ZPOPMAX BZPOPMIN BZPOPMAX ZMPOP BZMPOP ZUNION ZUNIONSTORE ZINTER ZINTERSTORE "
     "ZINTERCARD ZDIFF ZDIFFSTORE ZREMRANGEBYSCORE ZREMRANGEBYRANK ZREMRANGEBYLEX ZRANDMEMBER ZSCAN"),
    ("streams, not scheduled yet", "XADD XRANGE XREVRANGE XLEN XREAD XREADGROUP XGROUP XACK XPENDING XCLAIM "
     "XAUTOCLAIM XINFO XDEL XTRIM XSETID"),
    ("pub/sub, issue 3", "SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB SSUBSCRIBE "
     "SUNSUBSCRIBE SPUBLISH"),
    ("transactions, issue 3", "MULTI EXEC DISCARD WATCH UNWATCH"),
    ("SORT, issue 3", "SORT SORT_RO"),
    ("HyperLogLog, not scheduled yet", "PFADD PFCOUNT PFMERGE PFDEBUG PFSELFTEST"),
    ("geo, not scheduled yet", "GEOADD GEODIST GEOHASH GEOPOS GEORADIUS GEORADIUSBYMEMBER GEOSEARCH "
     "GEOSEARCHSTORE GEORADIUS_RO GEORADIUSBYMEMBER_RO"),
    ("scripting, not scheduled yet", "EVAL EVALSHA EVAL_RO EVALSHA_RO SCRIPT FUNCTION FCALL FCALL_RO"),
    ("persistence, issue 4", "SAVE BGSAVE BGREWRITEAOF DUMP RESTORE RESTORE-ASKING"),
    ("replication, issue 5", "REPLICAOF SLAVEOF WAIT WAITAOF SYNC PSYNC ROLE FAILOVER REPLCONF"),
    ("ACL, not scheduled yet", "ACL"),
    ("cluster, not scheduled yet", "CLUSTER READONLY READWRITE ASKING MIGRATE"),
    ("misc, not built yet", "LOLWUT OBJECT MODULE"),
]
_FAMILY_OF = {c: fam for fam, cmds in FAMILIES for c in cmds.split()}


def classify(message: str | None) -> str:
    """A skip-list reason from a failure's error message (see the module doc)."""
    import re
    if not message:
        return TRIAGE
    if re.search(r"Connect(ion refused| call failed \('127.0.0.1', 6379\))", message):
        return f"{AUTO} the test connects to localhost:6379 itself; the runner's server is elsewhere"
    # (Redis's Tcl suite prints error lines cut as "n command 'x', ...")
    m = re.search(r"(?:^|unknow)n (sub)?command '([^']*)'", message, re.I)
    if m:
        name = m.group(2).upper()
        if m.group(1):
            return f"{AUTO} unknown subcommand '{m.group(2)}' (not built yet)"
        fam = _FAMILY_OF.get(name, "not built yet")
        return f"{AUTO} needs {name} ({fam})"
    line = " ".join(message.split())[:140]
    return f"{AUTO} differs from Redis: {line}"
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

    def __init__(self, name: str, tls_dir: Path | None = None):
        self.name = name
        self.tls_dir = tls_dir
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
        if self.tls_dir:
            # A TLS port beside the plain one, as redis-py's docker set-up
            # has: its redis.crt/.key, its CA, client certificates optional.
            self.tls_port = free_port()
            args += ["--tls-port", str(self.tls_port), "--tls-auth-clients", "optional"]
            for k, f in (("cert", "redis.crt"), ("key", "redis.key"), ("ca-cert", "ca.crt")):
                args += [f"--tls-{k}-file", str(self.tls_dir / f)]
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
        return self.reason.startswith((TRIAGE, AUTO))


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


def write_skiplist(path: Path, header: list[str], kept: list[Entry], failing: list[str],
                   messages: dict[str, str] | None = None) -> None:
    """Rewrites `path`: header, hand-written entries, then one entry per
    failure with the reason `classify` derives from its message."""
    lines = list(header)
    if lines and lines[-1].strip():
        lines.append("")
    lines += [f"{e.key} # {e.reason}" for e in kept]
    known = {e.key for e in kept}
    new = sorted(k for k in set(failing) if k not in known)
    if new:
        lines += ["", f"# --- written by ci/update-skiplists.sh ({len(new)} entries) ---"]
        lines += [f"{k} # {classify((messages or {}).get(k))}" for k in new]
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
