# SPDX-License-Identifier: MIT
"""Fixtures shared by the Python suites."""
import shutil
import subprocess

import pytest


@pytest.fixture
def exported_names():
    """The dynamic symbols a shared object defines, by `nm -D --defined-only`; None where nm
    (binutils) is not installed."""
    nm = shutil.which("nm")
    if nm is None:
        return None

    def names(path):
        out = subprocess.run([nm, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
        return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    return names
