#!/usr/bin/env python3
"""Compares COMMAND output of lattice-server with redis-server's (the oracle).

    python3 ci/compare-command-table.py LATTICE_PORT REDIS_PORT [-v]

For every command both servers have (subcommands included) it compares
arity, flags, first/last/step, tips and key specs, and prints a count per
field; -v lists each difference. Known, deliberate differences: we report
7.2 where it differs from the 7.0 oracle (e.g. ZRANK's arity -3 for
WITHSCORE, PUBLISH's may_replicate). A development tool, not run in CI.
"""
import sys

import redis


def table(port: int) -> dict:
    conn = redis.Redis(port=port, protocol=2).connection_pool.get_connection()
    conn.send_command("COMMAND")
    out = {}

    def walk(e):
        out[e[0].decode()] = {
            "arity": e[1],
            "flags": sorted(f.decode() for f in e[2]),
            "keys": tuple(e[3:6]),
            "tips": sorted(t.decode() for t in e[7]),
            "specs": repr(e[8]),
        }
        for sub in e[9]:
            walk(sub)

    for e in conn.read_response():
        walk(e)
    return out


def main() -> None:
    ours, oracle = table(int(sys.argv[1])), table(int(sys.argv[2]))
    verbose = "-v" in sys.argv
    both = sorted(set(ours) & set(oracle))
    diffs = {field: 0 for field in ["arity", "flags", "keys", "tips", "specs"]}
    for name in both:
        for field in diffs:
            if ours[name][field] != oracle[name][field]:
                diffs[field] += 1
                if verbose:
                    print(f"{name} {field}: ours {ours[name][field]} redis {oracle[name][field]}")
    print(f"{len(both)} commands in both, {len(set(oracle) - set(ours))} only in redis; "
          f"differences: {diffs}")


if __name__ == "__main__":
    main()
