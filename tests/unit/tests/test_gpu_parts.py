"""The GPU suite's parts (tests/conftest.py GPU_PARTS, `--gpu-part N`): each of the six
collects a share of tests/gpu, together all of it, each test once; every pattern names a test
that exists (a renamed slow test would otherwise fall into the rest and overrun its call)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import GPU_PARTS, GPU_REST, gpu_part

ROOT = Path(__file__).resolve().parents[3]


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "tests/gpu", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("tests/gpu/")]


def test_the_parts_split_the_suite_once_and_every_pattern_names_a_test() -> None:
    everything = _collected()
    parts = {part: _collected("--gpu-part", str(part)) for part in (*GPU_PARTS, GPU_REST)}
    assert sorted(sum(parts.values(), [])) == sorted(everything) and len(everything) > 200
    for part, patterns in GPU_PARTS.items():
        for pattern in patterns:
            assert [n for n in parts[part] if n.split("tests/gpu/", 1)[1].startswith(pattern)], pattern
    assert all(gpu_part(n) == part for part, names in parts.items() for n in names)
