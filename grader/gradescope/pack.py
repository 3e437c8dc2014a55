"""Package the grading core as a Gradescope autograder zip.

Layout (Gradescope unpacks it into /autograder/source and runs setup.sh once per image, then
`run_autograder` per submission):

    setup.sh            Python venv + this package with its dependencies; CUDA's nvcc from
                        the distribution when the image has none; the reference kit made
                        unreadable to the sandbox user
    run_autograder      grader.gradescope.run on /autograder/submission ->
                        /autograder/results/results.json
    kernelgrade.env     KG_* settings baked in at packing time (CUDA arch, rubric)
    pyproject.toml, README.md, grader/, worker/, and the assignment: rubrics/<slug>/ and
                        starter/<name>/ for one of the project's rubrics/, or the whole folder
                        of a course's own rubric (found through KG_RUBRIC_DIRS) as
                        assignments/<slug>/, searched there through KG_RUBRIC_DIRS

Gradescope machines have no GPU unless the course brings its own runner: there a submission
is unpacked, staged and built, and results.json says that nothing was scored.
"""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

from worker.rubric import RUBRIC_DIR, RUBRIC_FILE, Rubric, read_rubric
from worker.starter_kit import ZIP_TIMESTAMP, starter_files

PROJECT_ROOT = Path(__file__).resolve().parents[2]
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
chmod -R go-rwx {kit}  # the reference kit: never readable by the sandboxed student code
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
exec "${KG_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}" -m grader.gradescope.run \\
  "$ROOT/submission" "$ROOT/results/results.json" --assignment "$KG_AUTOGRADER_ASSIGNMENT"
"""


class PackError(ValueError):
    """An assignment laid out so that its packed copy could not find its parts; says what to move."""


def _code_entries() -> list[tuple[str, Path]]:
    entries = [(name, PROJECT_ROOT / name) for name in ("pyproject.toml", "README.md")]
    for package in PACKAGES:
        entries += [(f"{package}/{rel.as_posix()}", PROJECT_ROOT / package / rel)
                    for rel in starter_files(PROJECT_ROOT / package)]
    return entries


def _tree(prefix: str, folder: Path) -> list[tuple[str, Path]]:
    return [(f"{prefix}/{rel.as_posix()}", folder / rel) for rel in starter_files(folder)]


def _course_folder(rubric_file: Path, rubric: Rubric) -> Path:
    """The folder of a rubric outside the project, once it is known to hold the rubric's starter
    and plug-in file (a packed copy keeps only that folder, so paths leaving it would break)."""
    folder = rubric_file.resolve().parent
    if not rubric.starter_dir.is_relative_to(folder):
        raise PackError(f"{rubric_file.name}: its starter {rubric.starter_dir} is outside {folder}; "
                        "move the reference kit into the rubric's folder to pack it")
    plugin = rubric.plugin
    if plugin and plugin.endswith(".py") and not Path(plugin).is_relative_to(folder):
        raise PackError(f"{rubric_file.name}: its plug-in {plugin} is outside {folder}; move it into the rubric's folder")
    if plugin and not plugin.endswith(".py") and plugin.split(".")[0] not in (*PACKAGES, "rubrics"):
        raise PackError(f"{rubric_file.name}: its plug-in module {plugin!r} is not part of kernelgrade; "
                        "name its .py file in the rubric instead (plugin: plugin.py, beside the rubric)")
    return folder


def _assignment(rubric_file: Path, rubric: Rubric) -> tuple[list[tuple[str, Path]], str, str]:
    """(entries, extra kernelgrade.env lines, the kit folder setup.sh hides) of the assignment."""
    folder = rubric_file.resolve().parent
    if folder.parent == RUBRIC_DIR.resolve():  # one of the project's: rubrics/<slug>/ and its kit
        starter = rubric.starter_dir
        return ([*_tree(f"rubrics/{folder.name}", folder), *_tree(f"starter/{starter.name}", starter)],
                "", "starter")
    # Relative to run_autograder's working folder, the packed source folder. The search folder
    # holds <slug>/rubric.yaml, or is the folder of a lone <slug>.yaml (worker.rubric.find_rubric).
    home = f"assignments/{rubric.slug}"
    search = "assignments" if rubric_file.name == RUBRIC_FILE else home
    entries = _tree(home, _course_folder(rubric_file, rubric))
    if rubric.plugin and rubric.plugin.startswith("rubrics."):  # a course's rubric on a project's plug-in
        name = rubric.plugin.split(".")[1]
        entries += _tree(f"rubrics/{name}", RUBRIC_DIR / name)
    return entries, f"KG_RUBRIC_DIRS='[\"{search}\"]'\n", "assignments"


def _info(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_TIMESTAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix: external_attr carries the mode
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    return info


def build_autograder_zip(rubric_file: Path, dest: Path, cuda_arch: str) -> Path:
    """Write the autograder zip of the assignment `rubric_file` describes (nvcc -arch=`cuda_arch`
    on the grading machine). PackError: the assignment's folder does not hold all its parts."""
    rubric = read_rubric(rubric_file)
    entries, env_lines, kit = _assignment(rubric_file, rubric)
    env = f"KG_AUTOGRADER_ASSIGNMENT={rubric.slug}\nKG_CUDA_ARCH={cuda_arch}\n{env_lines}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(_info("setup.sh", True), SETUP_SH.format(kit=kit))
        zf.writestr(_info("run_autograder", True), RUN_AUTOGRADER)
        zf.writestr(_info("kernelgrade.env", False), env)
        for name, path in _code_entries() + entries:
            zf.writestr(_info(name, bool(path.stat().st_mode & stat.S_IXUSR)), path.read_bytes())
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buf.getvalue())
    return dest
