"""The base of an assignment's similarity check: the starter its students received, whose code
never counts. Staff give it as a zip (the similarity page, `grader similarity --base`) or a
git ref (`--base git:<repository>@<ref>`); the page keeps it per assignment at
`KG_DATA_DIR/reports/similarity-base-<slug>.zip`. Without one, our kit's stripped starter
(grader.similarity.starter_sources) is the fallback."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from grader.similarity import Sources, starter_sources, tree_sources
from worker.rubric import Rubric
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip


def base_path(data_dir: Path, slug: str) -> Path:
    return data_dir / "reports" / f"similarity-base-{slug}.zip"


def zip_sources(archive: Path, rubric: Rubric, limits: UnpackLimits) -> Sources:
    """The rubric's student files in a starter zip (unpacked with the pipeline's checks);
    BadArchive when it holds none of them."""
    with tempfile.TemporaryDirectory(prefix="kg-base-") as tmp:
        unpack_zip(archive, Path(tmp) / "base", limits)
        found = tree_sources(find_assignment_root(Path(tmp) / "base", rubric.required_files), rubric.student_files)
    if not found:
        raise BadArchive("the starter holds none of the assignment's student files")
    return found


def git_zip(spec: str, dest: Path) -> Path:
    """`git:<repository>@<ref>` archived as a zip at `dest`."""
    repository, _, ref = spec.removeprefix("git:").rpartition("@")
    if not repository or not ref:
        raise BadArchive(f"a git base is git:<repository>@<ref>, not {spec!r}")
    done = subprocess.run(["git", "-C", repository, "archive", "--format=zip", "-o", str(dest), ref],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BadArchive(f"git archive {ref} of {repository}: {done.stderr.strip()}")
    return dest


def given_base(spec: str, rubric: Rubric, limits: UnpackLimits) -> Sources:
    """A base named on the command line: a zip, a starter folder or a git ref."""
    if spec.startswith("git:"):
        with tempfile.TemporaryDirectory(prefix="kg-base-") as tmp:
            return zip_sources(git_zip(spec, Path(tmp) / "base.zip"), rubric, limits)
    path = Path(spec)
    if path.is_dir():
        return tree_sources(path, rubric.student_files)
    return zip_sources(path, rubric, limits)


def save_base(data_dir: Path, slug: str, archive: bytes, rubric: Rubric, limits: UnpackLimits) -> int:
    """Keeps `archive` as the assignment's base once it reads as a starter; its file count."""
    target = base_path(data_dir, slug)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".base-", suffix=".zip")
    with os.fdopen(fd, "wb") as fh:
        fh.write(archive)
    try:
        count = len(zip_sources(Path(tmp), rubric, limits))
    except BadArchive:
        os.unlink(tmp)
        raise
    os.replace(tmp, target)
    return count


def assignment_base(data_dir: Path, rubric: Rubric, limits: UnpackLimits) -> tuple[Sources, str]:
    """The stored base of the assignment, else the kit's fallback; with what it is, in words."""
    stored = base_path(data_dir, rubric.slug)
    if stored.is_file():
        return zip_sources(stored, rubric, limits), "the starter staff gave"
    return starter_sources(rubric), "our kit's stripped starter (no starter given)"
