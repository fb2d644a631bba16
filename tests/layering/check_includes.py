#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Each layer includes only what it may see (meson.build, "The layers' include paths").

The build holds a layer to its include path; a quoted #include that climbs out of the
including file's folder ("../../src/x.hpp") would get around it, since a compiler resolves a
quoted name against that folder first. This check resolves every quoted #include of a layer
that way and fails on one that lands in a folder the layer may not see. Names that resolve
only through the include path (or are generated, or the vendor's) are the build's to check.
"""
import argparse
import pathlib
import re
import sys

# Layer -> the top-level folders its files may include from.
LAYERS = {
    'backends': ('include', 'backends'),
    'export': ('include', 'common', 'export'),
    'common': ('include', 'common'),
    'include': ('include',),
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
SUFFIXES = {'.hpp', '.cpp', '.h', '.cu', '.in'}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--source-root', required=True, type=pathlib.Path)
    root = parser.parse_args().source_root.resolve()
    failures = []
    for layer, allowed in LAYERS.items():
        for path in sorted((root / layer).rglob('*')):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            for name in INCLUDE.findall(path.read_text(encoding='utf-8', errors='replace')):
                target = (path.parent / name).resolve()
                if not target.exists():
                    continue
                top = target.relative_to(root).parts[0] if target.is_relative_to(root) else None
                if top not in allowed:
                    failures.append(f'{path.relative_to(root)}: #include "{name}" reaches {top}/, '
                                    f'which {layer}/ may not see (allowed: {", ".join(allowed)})')
    for failure in failures:
        print(failure)
    print(f'{len(failures)} include(s) across layers' if failures else 'layers include only what they may see')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
