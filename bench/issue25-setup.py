#!/usr/bin/env python3
"""Data sets for counting issue 25's benchmark lines with bench/instructions.sh
(SETUP_RESP=FILE), as RESP for redis-cli --pipe, written into DIR:

  hll.resp          h1 h2 h3: dense sketches of 20,000 elements each (as
                    bench/hll-geo.sh's PFCOUNT setup);
  streams.resp      q: 30,000 entries 1-0 .. 30000-0, group g at 0 (XREADGROUP);
  streams-pel.resp  the same, all 30,000 read by consumer c (XACK).

  python3 bench/issue25-setup.py DIR
"""
import os
import sys


def enc(*args):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def stream(out, n, read):
    for i in range(1, n + 1):
        out.write(enc("XADD", "q", "%d-0" % i, "f", "v%d" % i))
    out.write(enc("XGROUP", "CREATE", "q", "g", "0"))
    if read:
        for _ in range(0, n, 1000):
            out.write(enc("XREADGROUP", "GROUP", "g", "c", "COUNT", 1000, "STREAMS", "q", ">"))


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "hll.resp"), "wb") as out:
        for k in (1, 2, 3):
            for start in range(0, 20000, 1000):
                elements = ["e%d:%d" % (k, i) for i in range(start, start + 1000)]
                out.write(enc("PFADD", "h%d" % k, *elements))
    with open(os.path.join(d, "streams.resp"), "wb") as out:
        stream(out, 30000, False)
    with open(os.path.join(d, "streams-pel.resp"), "wb") as out:
        stream(out, 30000, True)


if __name__ == "__main__":
    main()
