#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the dynamic symbols a shared library of ferry exports.

Runs `nm -D --defined-only` on the library (mangled and demangled, in symbol-table order) and
fails when it exports
  - a symbol of `ferry::detail` that no entry of the allowlist matches, or
  - a symbol of no `ferry` namespace at all (a C symbol, or a C++ symbol of std:: or a
    vendor's namespace), that no entry of the allowlist matches,
and when an allowlist entry matches no exported symbol (a stale entry hides nothing but
misleads the reader). Whether a C++ symbol belongs to ferry is read from its mangled name, so
a template's return type or arguments do not decide it: `std::vector<ferry::PoolEvent>`'s
members are std:: symbols.

With `--only GLOB` (repeatable) it checks a module that must export exactly what the globs
name, a Python extension's PyInit_ function say: it fails on any exported symbol that no glob
matches, ferry's API included, and on a glob that matches no exported symbol.

Allowlist: one entry a line, `GLOB  # reason`, where GLOB is matched (fnmatch) against the
demangled name. Every entry must give its reason. Blank lines and lines starting with `#` are
comments.
"""
import argparse
import fnmatch
import re
import subprocess
import sys

# Prefixes of special names before the entity's own encoding: vtable, VTT, typeinfo and its
# name, thunks, guard variables, TLS wrappers, local entities (`Z<function>E...`).
SPECIAL = re.compile(r"^(?:T[VTIS]|Th_?n?\d+_|Tv_?n?\d+_n?\d+_|Tc\w+?_|GV|GR|TH|TW)")


def owner(mangled):
    """'detail' for ferry::detail, 'ferry' for the rest of ferry, None for anything else."""
    if not mangled.startswith("_Z"):
        return None  # a C symbol
    rest = mangled[2:]
    while True:
        m = SPECIAL.match(rest)
        if not m:
            break
        rest = rest[m.end():]
    if rest.startswith("Z"):  # a local entity: judged by its enclosing function
        rest = rest[1:]
    if not rest.startswith("N"):
        return None  # an unqualified name: not in any namespace of ferry's
    rest = re.sub(r"^N[rVKRO]*", "", rest)
    if not rest.startswith("5ferry"):
        return None
    return "detail" if rest.startswith("5ferry6detail") else "ferry"


def read_allowlist(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            glob, sep, reason = text.partition("#")
            if not sep or not reason.strip():
                sys.exit(f"{path}:{number}: an entry needs its reason after '#': {text}")
            entries.append((glob.strip(), reason.strip(), f"{path}:{number}"))
    return entries


def nm_lines(nm, library, demangle):
    args = [nm, "-D", "--defined-only", "--no-sort"] + (["-C"] if demangle else []) + [library]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            names.append(parts[2])
    return names


def check_only(nm, library, globs):
    names = nm_lines(nm, library, demangle=True)
    bad = [n for n in names if not any(fnmatch.fnmatchcase(n, g) for g in globs)]
    missing = [g for g in globs if not any(fnmatch.fnmatchcase(n, g) for n in names)]
    print(f"{library}: {len(names)} exported symbols, {len(bad)} beyond {', '.join(globs)}")
    for name in bad[:40]:
        print(f"  unexpected: {name}")
    if len(bad) > 40:
        print(f"  ... and {len(bad) - 40} more")
    for g in missing:
        print(f"  not exported: {g}")
    if bad or missing:
        print(f"FAIL: {len(bad)} unexpected exported symbols, {len(missing)} expected ones missing")
        return 1
    print("OK")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--allowlist", action="append", default=[],
                        help="allowlist file (repeatable)")
    parser.add_argument("--only", action="append", default=[],
                        help="the only symbols the library may export (a glob, repeatable)")
    parser.add_argument("library")
    args = parser.parse_args()
    if args.only:
        return check_only(args.nm, args.library, args.only)

    mangled = nm_lines(args.nm, args.library, demangle=False)
    demangled = nm_lines(args.nm, args.library, demangle=True)
    if len(mangled) != len(demangled):
        sys.exit("nm gave different symbol counts with and without -C")
    allowed = [e for path in args.allowlist for e in read_allowlist(path)]
    used = set()

    counts = {"ferry": 0, "detail": 0, None: 0}
    bad = []
    for raw, name in zip(mangled, demangled):
        kind = owner(raw)
        counts[kind] += 1
        if kind == "ferry":
            continue
        hits = [e for e in allowed if fnmatch.fnmatchcase(name, e[0])]
        if hits:
            used.update(e[2] for e in hits)
            continue
        bad.append(("ferry::detail" if kind == "detail" else "not ferry's", name))

    total = len(mangled)
    print(f"{args.library}: {total} exported symbols: {counts['ferry']} of ferry's API, "
          f"{counts['detail']} of ferry::detail, {counts[None]} of no ferry namespace")
    for kind, name in bad:
        print(f"  unexpected ({kind}): {name}")
    stale = [e for e in allowed if e[2] not in used]
    for glob, _, where in stale:
        print(f"  {where}: allowlist entry matches no exported symbol: {glob}")
    if bad or stale:
        print(f"FAIL: {len(bad)} unexpected exported symbols, {len(stale)} stale allowlist entries")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
