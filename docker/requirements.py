"""Print pyproject's runtime dependencies for an image's pip install, one per line.

Usage: python3 docker/requirements.py
Optional extras stay out: `test` (the test tools) and `cuda-headers` (the headers `make dev`
unpacks where nvcc lacks them; the worker image's CUDA toolkit has its own, the api image runs
no nvcc).
"""
from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements() -> list[str]:
    return list(tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"])


if __name__ == "__main__":
    print("\n".join(requirements()))
