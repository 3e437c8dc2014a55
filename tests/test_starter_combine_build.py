"""rubrics/hw4/starter_combine.cu compiles with the rubric's nvcc flags (no GPU needed) and
exports exactly the starter's four C entry points; the GPU suite checks what they compute.

Skips where nvcc or nm is absent.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from worker.rubric import load_rubric

SOURCE = Path(__file__).resolve().parents[1] / "rubrics" / "hw4" / "starter_combine.cu"
NVCC = os.environ.get("KG_NVCC") or shutil.which("nvcc") or (
    "/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None
)
NM = shutil.which("nm")
ARCH = "-arch=sm_90"  # the H200 the suite runs on; "native" needs a GPU at compile time
EXPORTS = {"tensorMap", "tensorZip", "tensorReduce", "MatrixMultiply"}

pytestmark = pytest.mark.skipif(NVCC is None or NM is None, reason="needs nvcc and nm")


def nvcc_command(output: Path) -> list[str]:
    assert NVCC is not None
    return [NVCC, *load_rubric("hw4").nvcc_flags, ARCH, "-o", str(output), str(SOURCE)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    so = tmp_path_factory.mktemp("starter_combine") / "combine.so"
    proc = subprocess.run(nvcc_command(so), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    return so


def test_uses_the_rubric_flags() -> None:
    flags = load_rubric("hw4").nvcc_flags
    assert "--shared" in flags and "-fPIC" in flags
    assert nvcc_command(Path("x.so"))[1:-3] == [*flags, ARCH]


def test_exports_exactly_the_four_c_symbols(built: Path) -> None:
    assert NM is not None
    proc = subprocess.run([NM, "-D", "--defined-only", str(built)], capture_output=True, text=True, check=True)
    symbols = {line.split()[-1]: line.split()[-2] for line in proc.stdout.splitlines() if line.strip()}
    ours = {name for name in symbols if not name.startswith("_")}
    assert ours == EXPORTS, sorted(symbols)
    assert all(symbols[name] == "T" for name in EXPORTS)
    # C linkage: unmangled names, and no C++ (mangled) symbol leaks out of the library.
    assert not [name for name in symbols if name.startswith("_Z")], sorted(symbols)


def test_loads_with_ctypes_without_calling(built: Path) -> None:
    lib = ctypes.CDLL(str(built))  # cudart is linked statically: loading needs no GPU
    for name in EXPORTS:
        assert getattr(lib, name) is not None


def test_header_names_the_abi_source() -> None:
    head = SOURCE.read_text().split("#include", 1)[0]
    assert "minitorch/cuda_kernel_ops.py" in head
