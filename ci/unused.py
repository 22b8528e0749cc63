#!/usr/bin/env python3
"""Fails on a `pub fn` of src/ that nothing names (issue 27 item 5).

The crate is a library its binary, tests, simulator and fuzz targets use,
so rustc's dead-code lint never fires on a `pub` item: a function whose
last caller went stays, unnoticed. This check counts, for every
`pub fn NAME` in src/, the times NAME occurs as a word in the Rust files
of src/, tests/, benches/ and fuzz/; a name that occurs only where it is
defined (once per definition) is named by nothing and is reported.

A word match is generous (a local variable or a method of another type
with the same name counts as a use), so the check misses some dead
functions but never reports a live one; `pub(crate)` items are rustc's.

Usage: python3 ci/unused.py
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEF = re.compile(r"\bpub fn ([A-Za-z_][A-Za-z0-9_]*)")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rust_files():
    for top in ("src", "tests", "benches", "fuzz"):
        base = ROOT / top
        if base.is_dir():
            yield from (p for p in base.rglob("*.rs") if "target" not in p.parts)


def main() -> int:
    uses: dict[str, int] = {}
    defs: dict[str, list[str]] = {}
    for path in rust_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for w in WORD.findall(text):
            uses[w] = uses.get(w, 0) + 1
        if path.is_relative_to(ROOT / "src"):
            for m in DEF.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                where = f"{path.relative_to(ROOT)}:{line}"
                defs.setdefault(m.group(1), []).append(where)
    unused = sorted(
        (where, name)
        for name, places in defs.items()
        if uses.get(name, 0) <= len(places)
        for where in places
    )
    for where, name in unused:
        print(f"{where}: pub fn {name} is named nowhere else (remove it)")
    print(f"unused: {len(defs)} pub fn names checked, {len(unused)} named nowhere else")
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main())
