"""Print pyproject's runtime dependencies for an image's pip install, one per line.

Usage: python3 docker/requirements.py [--without PREFIX ...]
The api image leaves out the CUDA header wheels (nvidia-cublas, nvidia-curand), which only
nvcc on a worker needs.
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(without: list[str]) -> list[str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return [d for d in deps if not any(d.startswith(prefix) for prefix in without)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--without", action="append", default=[], metavar="PREFIX")
    print("\n".join(requirements(parser.parse_args().without)))
