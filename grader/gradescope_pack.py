"""Package the grading core as a Gradescope autograder zip.

Layout (Gradescope unpacks it into /autograder/source and runs setup.sh once per image, then
`run_autograder` per submission):

    setup.sh            Python venv + this package with its dependencies; CUDA's nvcc from
                        the distribution when the image has none; the reference kit made
                        unreadable to the sandbox user
    run_autograder      grader.gradescope_run on /autograder/submission ->
                        /autograder/results/results.json
    kernelgrade.env     KG_* settings baked in at packing time (CUDA arch, rubric)
    pyproject.toml, README.md, grader/, worker/, rubrics/<slug>.yaml, starter/<slug>/

Gradescope machines have no GPU unless the course brings its own runner: there a submission
is unpacked, staged and built, and results.json says that nothing was scored.
"""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

from worker.rubric import Rubric
from worker.starter_kit import ZIP_TIMESTAMP, starter_files

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("grader", "worker")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope image setup for kernelgrade (runs once, as root).
set -euo pipefail
cd "$(dirname "$0")"
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip zip
command -v nvcc >/dev/null || apt-get install -y --no-install-recommends nvidia-cuda-toolkit
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --no-cache-dir .
chmod -R go-rwx starter  # the reference kit: never readable by the sandboxed student code
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Grade /autograder/submission into /autograder/results/results.json with kernelgrade.
# AUTOGRADER_ROOT and KG_AUTOGRADER_PYTHON exist for testing this script outside Gradescope.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
set -a
. "$SOURCE/kernelgrade.env"
set +a
export KG_DATA_DIR="${KG_DATA_DIR:-$ROOT/kg-data}" PYTHONPATH="$SOURCE"
cd "$SOURCE"
exec "${KG_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}" -m grader.gradescope_run \\
  "$ROOT/submission" "$ROOT/results/results.json" --assignment "$KG_AUTOGRADER_ASSIGNMENT"
"""


def _entries(rubric: Rubric) -> list[tuple[str, Path]]:
    """(path in the zip, file here) of the packaged code, rubric and reference kit."""
    entries = [(name, PROJECT_ROOT / name) for name in ("pyproject.toml", "README.md")]
    rubric_file = PROJECT_ROOT / "rubrics" / f"{rubric.slug}.yaml"
    entries.append((f"rubrics/{rubric_file.name}", rubric_file))
    for package in PACKAGES:
        entries += [(f"{package}/{rel.as_posix()}", PROJECT_ROOT / package / rel)
                    for rel in starter_files(PROJECT_ROOT / package)]
    starter = rubric.starter_dir
    entries += [(f"starter/{starter.name}/{rel.as_posix()}", starter / rel) for rel in starter_files(starter)]
    return entries


def _info(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_TIMESTAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix: external_attr carries the mode
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    return info


def build_autograder_zip(rubric: Rubric, dest: Path, cuda_arch: str) -> Path:
    """Write the autograder zip for `rubric` (nvcc -arch=`cuda_arch` on the grading machine)."""
    env = f"KG_AUTOGRADER_ASSIGNMENT={rubric.slug}\nKG_CUDA_ARCH={cuda_arch}\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(_info("setup.sh", True), SETUP_SH)
        zf.writestr(_info("run_autograder", True), RUN_AUTOGRADER)
        zf.writestr(_info("kernelgrade.env", False), env)
        for name, path in _entries(rubric):
            zf.writestr(_info(name, bool(path.stat().st_mode & stat.S_IXUSR)), path.read_bytes())
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buf.getvalue())
    return dest
