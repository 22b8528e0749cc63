#!/usr/bin/env python3
"""Checks the layering of src/ (docs/ARCHITECTURE.md, "Layers").

Every module of the crate belongs to one layer; a file may name (`crate::x`)
only modules of its own top-level module or of a lower layer. The layers,
bottom first (a path prefix picks the layer; the longest prefix wins):

    0 base         alloc, log, glob, protocol
    1 config       config
    2 keyspace     keyspace, persistence/rdb (the RDB codec: values to bytes)
    3 effects      effects
    4 core         core (what data commands are written against)
    5 commands     commands, scripting (may name commands, not named by them)
    6 persistence  persistence
    7 replication  replication
    8 server       server, main.rs, facade (the public face: names every layer)

Two modules of one layer may not name each other in both directions (no
circle); the prefix order inside a layer above says which way is allowed.
Known violations are listed in ci/layers-allow.txt (`<file> -> <module>  #
reason`); each must name server/ (so every import circle runs through it,
none below it), and the list only shrinks: an entry that no longer matches is an error
too, so that fixing an edge removes its entry in the same change.

A subsystem can also be reached without an import, through the field that
holds its state on the server (`srv.persist.aof`, `srv.repl.backlog`): a file
of another subsystem that does so fails too (FIELDS; server/ and main.rs,
which wire the subsystems together, may).

Usage: python3 ci/layers.py [--list]   (--list prints every violation, allowed or not)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
ALLOW = ROOT / "ci" / "layers-allow.txt"

# (path prefix under src/ without .rs, layer, order inside the layer)
LAYERS = [
    ("alloc", 0, 0), ("log", 0, 1), ("glob", 0, 2), ("protocol", 0, 3),
    ("config", 1, 0),
    ("keyspace", 2, 0), ("persistence/rdb", 2, 1),
    ("effects", 3, 0),
    ("core", 4, 0),
    ("commands", 5, 0), ("scripting", 5, 1),
    ("persistence", 6, 0),
    ("replication", 7, 0),
    ("server", 8, 0), ("main", 8, 1), ("facade", 8, 2),
]


# Each subsystem's state on the server, by the pattern of a reach through
# its field (a field of the state named after it, so `o.persist`, a GETEX
# option, is not one).
FIELDS = {
    "persistence": re.compile(r"\.persist\s*\.\s*[a-z_]+"),
    "replication": re.compile(r"\.repl\s*\.\s*[a-z_]+"),
}


def module_of(rel: str) -> tuple[str, int, int] | None:
    """The (prefix, layer, order) a src/-relative module path belongs to."""
    best = None
    for prefix, layer, order in LAYERS:
        if rel == prefix or rel.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer, order)
    return best


def drop_test_modules(text: str) -> str:
    """Removes every `#[cfg(test)] mod name { ... }` block (braces matched)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\(crate\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            return text
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        text = text[:m.start()] + text[i:]


def strip_comments(text: str) -> str:
    """The code that counts: comments go, and so do unit-test modules
    (a test may build a whole server to drive a lower layer)."""
    text = drop_test_modules(text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] if "//" in line else line
                     for line in text.splitlines())


def crate_paths(text: str, module: str) -> set[str]:
    """Every `crate::a::b` path named, with `use crate::{a::x, b}` groups
    expanded, and `super::` paths that climb to the crate root resolved."""
    out = set()
    parts = module.split("/")
    for m in re.finditer(r"\b((?:super::)+)([a-z_][a-z0-9_]*)", text):
        up = m.group(1).count("super::")
        if up >= len(parts):
            out.add(m.group(2))
    for m in re.finditer(r"crate::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", text):
        for part in re.split(r",(?![^{]*\})", m.group(1)):
            part = part.strip()
            if part:
                out.add(re.split(r"::\{|\s", part)[0])
    for m in re.finditer(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
        out.add(m.group(1))
    return out


def violations() -> list[tuple[str, str, str]]:
    """(file, target prefix, why) for every import that breaks the layering."""
    found = []
    edges = set()
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC).with_suffix("").as_posix()
        if rel == "lib":
            continue
        rel = rel.removesuffix("/mod")
        src = module_of(rel)
        if src is None:
            found.append((path.relative_to(ROOT).as_posix(), rel, "module in no layer"))
            continue
        for p in sorted(crate_paths(strip_comments(path.read_text()), rel)):
            dst = module_of(p.replace("::", "/"))
            if dst is None or dst[0] == src[0]:
                continue  # crate-root items (macros, consts) or the same module
            file = path.relative_to(ROOT).as_posix()
            if dst[1] > src[1]:
                found.append((file, dst[0], f"layer {src[1]} names layer {dst[1]}"))
            elif dst[1] == src[1]:
                edges.add((src[0], dst[0]))
                if dst[2] > src[2]:
                    found.append((file, dst[0], "same layer, against the order"))
    return sorted(set(found))


def field_reaches() -> list[tuple[str, str, int]]:
    """(file, subsystem, line) for every reach into another subsystem's
    state through its field on the server, outside server/ and main.rs."""
    found = []
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC).with_suffix("").as_posix().removesuffix("/mod")
        src = module_of(rel)
        if src is None or src[1] == 8:
            continue
        code = strip_comments(path.read_text())
        for owner, pattern in FIELDS.items():
            if src[0] == owner:
                continue
            for m in pattern.finditer(code):
                line = code.count("\n", 0, m.start()) + 1
                found.append((path.relative_to(ROOT).as_posix(), owner, line))
    return found


def read_allow() -> dict[tuple[str, str], str]:
    allow = {}
    if ALLOW.exists():
        for n, raw in enumerate(ALLOW.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"(\S+)\s+->\s+(\S+)\s+#\s*(.+)", line)
            if not m:
                sys.exit(f"{ALLOW}:{n}: expected `<file> -> <module>  # <reason>`")
            allow[(m.group(1), m.group(2))] = m.group(3)
    return allow


def main(argv: list[str]) -> int:
    found = violations()
    allow = read_allow()
    reaches = field_reaches()
    if "--list" in argv:
        for f, d, why in found:
            print(f"{f} -> {d}  # {why}{'' if (f, d) in allow else '  (NOT ALLOWED)'}")
        for f, owner, line in reaches:
            print(f"{f}:{line} reaches {owner} through its field on the server  (NOT ALLOWED)")
        return 0
    bad = [(f, d, why) for f, d, why in found if (f, d) not in allow]
    # Every import circle runs through server/: a known exception may only
    # name the server (issue 11: no circle outside server/).
    bad += [(f, d, "an allowed import must name server/ (no circle below it)")
            for f, d in allow if d != "server"]
    stale = sorted(set(allow) - {(f, d) for f, d, _ in found})
    for f, d, why in bad:
        print(f"layers: {f} names {d}: {why} (docs/ARCHITECTURE.md, Layers)")
    for f, d in stale:
        print(f"layers: {ALLOW.name} lists {f} -> {d}, which no longer happens: delete the entry")
    for f, owner, line in reaches:
        print(f"layers: {f}:{line} reaches {owner}'s state through the server's field: "
              f"take it through a host instead (docs/ARCHITECTURE.md, Layers)")
    print(f"layers: {len(found)} upward imports, {len(found) - len(bad)} of them known "
          f"({len(allow)} entries in {ALLOW.name}), {len(bad)} new, {len(stale)} stale; "
          f"{len(reaches)} reaches through a field")
    return 1 if bad or stale or reaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
