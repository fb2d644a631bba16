# SPDX-License-Identifier: MIT
"""`import ferry` works where the vendor runtimes cannot be loaded, and the package says so.

Each case runs a fresh interpreter with FERRY_CUDA_LIBRARY and FERRY_HIP_LIBRARY naming a file
that does not exist: the backends open their libraries once per process, so the variables
must be set before ferry is imported.
"""
import os
import subprocess
import sys
import textwrap


def run_without_runtimes(tmp_path, code):
    missing = str(tmp_path / "no-such-dir" / "libvendor.so")
    env = dict(os.environ, FERRY_CUDA_LIBRARY=missing, FERRY_HIP_LIBRARY=missing)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), missing], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_import_and_queries_without_vendor_runtimes(tmp_path):
    out = run_without_runtimes(tmp_path, """
        import sys
        import ferry
        missing = sys.argv[1]
        B = ferry.Backend
        for b, origin in ((B.cuda, "NVIDIA driver"), (B.hip, "HIP runtime")):
            assert not ferry.Device.runtime_present(b), b
            assert ferry.Device.count(b) == 0, b
            if not ferry.Device.built_with(b):
                continue
            try:
                ferry.Device.open(b)
            except ferry.Error as e:
                assert e.code == "unsupported", e
                assert missing in str(e) and origin in str(e), e
            else:
                raise AssertionError(f"{b} opened without its runtime")
        for b in (B.host, B.null):
            assert ferry.Device.runtime_present(b) == ferry.Device.built_with(b), b
        print("ok")
    """)
    assert out.strip() == "ok"


def test_runtime_present_is_false_for_a_backend_not_built():
    import ferry
    for b in ferry.Backend.__members__.values():
        if not ferry.Device.built_with(b):
            assert not ferry.Device.runtime_present(b)
