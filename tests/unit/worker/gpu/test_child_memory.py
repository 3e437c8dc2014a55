"""The children's runtime settings take effect: with the malloc ones
(worker.gpu.client.STEADY_MEMORY_ENV) a 4 MiB array comes from the heap, where freed blocks
are reused, while without them glibc maps it fresh (and unmaps it on free), so every new array
page-faults again; and numpy's BLAS starts no thread pool (ONE_THREAD_POOLS)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.gpu.client import ONE_THREAD_POOLS, child_env

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


def threads_after_importing_numpy(env: dict[str, str]) -> int:
    code = "import numpy; print(open('/proc/self/status').read().split('Threads:')[1].split()[0])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: BLAS starts no pool anyway")
def test_children_start_no_blas_thread_pool(tmp_path: Path) -> None:
    env = child_env(None, tmp_path)
    assert threads_after_importing_numpy(env) == 1
    without = {k: v for k, v in env.items() if k not in ONE_THREAD_POOLS}
    assert threads_after_importing_numpy(without) > 1
