# SPDX-License-Identifier: MIT
"""Where FERRY_EXPECT_PACKAGE names an installation (tools/wheel.sh sets it to the fresh
virtual environment its wheel went into), the suite tests that installation: ``ferry`` and
its extension come from under it, not from a build tree on the path, and the extension maps
no CUDA toolkit library from outside it. Elsewhere the module skips, saying so."""
import os
import pathlib

import pytest

EXPECT = os.environ.get("FERRY_EXPECT_PACKAGE")
pytestmark = pytest.mark.skipif(not EXPECT, reason="FERRY_EXPECT_PACKAGE is not set: no installed package to check")


def test_ferry_is_the_installed_package():
    import ferry
    import ferry._ferry as ext
    root = pathlib.Path(EXPECT).resolve()
    for f in (ferry.__file__, ext.__file__):
        assert root in pathlib.Path(f).resolve().parents, f"{f} is not under {root}"


def test_no_toolkit_runtime_is_mapped_after_opening_every_backend():
    import ferry
    for b in (ferry.Backend.host, ferry.Backend.cuda, ferry.Backend.hip, ferry.Backend.vulkan):
        if ferry.Device.built_with(b) and ferry.Device.runtime_present(b) and ferry.Device.count(b) > 0:
            ferry.Device.open(b).close()
    maps = pathlib.Path("/proc/self/maps").read_text()
    mapped = {line.split()[-1] for line in maps.splitlines() if "/usr/local/cuda" in line}
    assert not mapped, f"toolkit libraries mapped: {sorted(mapped)}"


def test_the_installed_extension_exports_its_init_function_alone(exported_names):
    # python/src/extension.map: every other name stays inside the module, whatever the
    # toolchain linked into it (its C++ runtime included).
    import ferry._ferry as ext
    if exported_names is None:
        pytest.skip("nm (binutils) is not installed")
    exported = exported_names(ext.__file__)
    assert exported == ["PyInit__ferry"], exported[:20]
