#!/usr/bin/env python3
"""Fails on a `pub fn` of src/ that nothing names: the dead code rustc cannot see.

Every module of the crate is private but `facade` (and `log`, for its
macros; src/lib.rs), so rustc's dead-code lint, an error under CI's
`clippy -D warnings`, reports an item nothing uses. It counts as used,
though, whatever the facade's types make public: a `pub` method of
`Server`, or of a type a `pub` field of it holds, is API to rustc even when
no test calls it. Those items keep `pub` (`unreachable_pub` flags every
other one), so this check still looks at them: for every `pub fn NAME` in
src/ it counts the times NAME occurs as a word in the Rust files of src/,
tests/, benches/ and fuzz/; a name that occurs only where it is defined
(once per definition) is named by nothing and is reported.

The facade's own re-exports are API to rustc too: a name src/facade.rs
re-exports that neither src/main.rs nor a file of tests/, benches/ or
fuzz/ names is reported as well (take it out of the facade).

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
FACADE = ROOT / "src" / "facade.rs"
REEXPORT = re.compile(r"\bpub use crate::([^;]*);")


def rust_files():
    for top in ("src", "tests", "benches", "fuzz"):
        base = ROOT / top
        if base.is_dir():
            yield from (p for p in base.rglob("*.rs") if "target" not in p.parts)


def facade_names() -> dict[str, int]:
    """Each name src/facade.rs re-exports, with the line it is on."""
    text = re.sub(r"//[^\n]*", "", FACADE.read_text(encoding="utf-8"))
    names = {}
    for m in REEXPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        path = m.group(1)
        listed = path[path.index("{") + 1 : path.rindex("}")] if "{" in path else path
        for item in listed.split(","):
            if item.strip():
                names[item.strip().split("::")[-1].split(" as ")[-1].strip()] = line
    return names


def unused_in_facade() -> list[str]:
    """The facade's re-exports that no user of the library names."""
    used: set[str] = set()
    for path in rust_files():
        if path.is_relative_to(ROOT / "src") and path != ROOT / "src" / "main.rs":
            continue
        used.update(WORD.findall(path.read_text(encoding="utf-8", errors="replace")))
    return [
        f"src/facade.rs:{line}: {name} is re-exported but no test, bench, fuzz target or main.rs names it"
        for name, line in sorted(facade_names().items(), key=lambda x: x[1])
        if name not in used
    ]


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
    facade = unused_in_facade() if FACADE.exists() else []
    for problem in facade:
        print(problem)
    print(
        f"unused: {len(defs)} pub fn names checked, {len(unused)} named nowhere else, "
        f"{len(facade)} facade re-exports unused"
    )
    return 1 if unused or facade else 0


if __name__ == "__main__":
    sys.exit(main())
