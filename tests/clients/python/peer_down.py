"""redis-py against a node whose peers are down (issue 12 item 7;
ci/clients.sh ACTIVE_CLIENT_CHECKS=1): the normal connect (HELLO 3 with
RESP3, CLIENT SETINFO) must work and the node must accept writes.

Usage: python3 peer_down.py PORT   (PORT also from LATTICE_PORT). Runs RESP2
and RESP3, prints one line per failed check and exits 0 only if all held.
"""
import os
import sys

import redis

FAILED = []
# Comma-separated substrings of check names not to run (as check.py).
SKIP = [x.strip().lower() for x in os.environ.get("CLIENT_SKIP", "").split(",") if x.strip()]


def check(name, fn):
    if any(x in name.lower() for x in SKIP):
        print(f"SKIP [{name}]")
        return
    try:
        fn()
    except Exception as e:  # report every failure, keep going
        FAILED.append(name)
        print(f"FAIL [{name}]: {type(e).__name__}: {e}")


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def run(port, proto):
    tag = f"redis-py {redis.__version__} RESP{proto} (peer down)"
    opts = dict(port=port, protocol=proto, decode_responses=True, socket_timeout=5)
    r = redis.Redis(**opts)
    k = f"peerdown:py{proto}:"
    check(f"{tag} connect + ping", lambda: eq(r.ping(), True))

    def setget():
        eq(r.set(k + "a", "hello"), True)
        eq(r.get(k + "a"), "hello")
    check(f"{tag} set/get", setget)

    def incr():
        eq(r.set(k + "n", "10"), True)
        eq(r.incr(k + "n"), 11)
        eq(r.get(k + "n"), "11")
    check(f"{tag} incr", incr)

    def read_back():
        with redis.Redis(**opts) as r2:
            eq(r2.mget([k + "a", k + "n"]), ["hello", "11"])
    check(f"{tag} read back on a new connection", read_back)
    r.close()


def main():
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ["LATTICE_PORT"])
    for proto in (2, 3):
        run(port, proto)
    print(f"redis-py (peer down): {len(FAILED)} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
