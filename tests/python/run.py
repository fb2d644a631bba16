# SPDX-License-Identifier: MIT
"""Runs the Python package's pytest suite for `meson test --suite python`.

Exit 77 (meson's skip) when pytest is not installed for this interpreter; pytest's "no tests
collected" (exit 5) counts as a failure, since a suite that runs nothing guards nothing.
"""
import os
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed for", sys.executable, "(pip install pytest numpy torch): skipped")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", here] + sys.argv[1:])
sys.exit(1 if rc == 5 else int(rc))
