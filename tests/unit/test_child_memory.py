"""The children's malloc settings (worker.gpu.client.STEADY_MEMORY_ENV) take effect: with
them a 4 MiB array comes from the heap, where freed blocks are reused; without them glibc
maps it fresh (and unmaps it on free), so every new array page-faults again."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worker.gpu.client import child_env

WHERE_IS_A_4_MIB_ARRAY = """
import numpy as np
a = np.ones(1 << 20, np.float32)
addr = a.ctypes.data
for line in open("/proc/self/maps"):
    fields = line.split()
    lo, hi = (int(x, 16) for x in fields[0].split("-"))
    if lo <= addr < hi:
        print(fields[5] if len(fields) > 5 else "anonymous mapping")
"""


def region_of_array(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", WHERE_IS_A_4_MIB_ARRAY], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_steady_memory_serves_large_arrays_from_the_heap(tmp_path: Path) -> None:
    steady = child_env(None, tmp_path)
    assert steady["NUMPY_MADVISE_HUGEPAGE"] == "0"
    assert region_of_array(steady) == "[heap]"
    assert region_of_array(child_env(None, tmp_path, steady_memory=False)) == "anonymous mapping"
