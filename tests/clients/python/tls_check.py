"""redis-py with ssl=True against LatticeDB's tls-port (issue 26): a client
certificate, the CA that signed the server's, RESP2 and RESP3, a pipeline,
the asyncio client; and a client without a certificate refused when
tls-auth-clients is yes.

Usage: python3 tls_check.py CERTDIR PORT   (CERTDIR: ci/gen-test-certs.sh's
output; PORT: the TLS port). Prints one line per failed check and exits 0
only if every check held.
"""
import asyncio
import os
import sys

import redis
import redis.asyncio

FAILED = []


def check(name, fn):
    try:
        fn()
    except Exception as e:  # report every failure, keep going
        FAILED.append(name)
        print(f"FAIL [{name}]: {type(e).__name__}: {e}")


def eq(got, want):
    assert got == want, f"got {got!r:.80}, want {want!r:.80}"


def main(certs, port):
    kw = dict(host="127.0.0.1", port=port, ssl=True,
              ssl_ca_certs=os.path.join(certs, "ca.crt"),
              ssl_certfile=os.path.join(certs, "client.crt"),
              ssl_keyfile=os.path.join(certs, "client.key"))

    def basic(proto):
        r = redis.Redis(protocol=proto, **kw)
        eq(r.ping(), True)
        r.set("tls:k", "v" * 100_000)
        eq(r.get("tls:k"), b"v" * 100_000)
        p = r.pipeline()
        for i in range(100):
            p.incr(f"tls:n{proto}")
        eq(p.execute()[-1], 100)
        r.close()

    check("resp2", lambda: basic(2))
    check("resp3", lambda: basic(3))

    async def aio():
        r = redis.asyncio.Redis(**kw)
        eq(await r.ping(), True)
        eq(await r.get("tls:n2"), b"100")
        await r.aclose()

    check("asyncio", lambda: asyncio.run(aio()))

    def no_cert():
        r = redis.Redis(host="127.0.0.1", port=port, ssl=True,
                        ssl_ca_certs=os.path.join(certs, "ca.crt"))
        try:
            r.ping()
        except (redis.ConnectionError, OSError):
            return
        raise AssertionError("a client without a certificate was served")

    check("refused-without-certificate", no_cert)
    return not FAILED


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1], int(sys.argv[2])) else 1)
