"""Staging: the trusted starter tree with only the rubric's student files laid over it.

Submitted tests, drivers and prebuilt .so files never reach the build or the run. Kernel
sources are the exception to "the starter fills the gaps": one the submission lacks is
removed from the staged tree, so it is reported missing rather than built from our kit (whose
src/combine.cu has no solution regions to strip: it would be our complete file).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from worker.rubric import Rubric
from worker.starter_kit import render_starter


@dataclass(frozen=True)
class Staged:
    root: Path
    taken: tuple[str, ...]  # student files used, relative paths
    ignored: tuple[str, ...]  # student files not used
    missing: tuple[str, ...] = ()  # kernel sources the submission lacks (not in the staged tree)


def stage_submission(student_root: Path, rubric: Rubric, dest: Path) -> Staged:
    render_starter(rubric.starter_dir, dest)  # solutions stripped: a missing file earns nothing
    taken: set[str] = set()
    for pattern in rubric.student_files:
        for src in sorted(student_root.glob(pattern)):
            if not src.is_file() or src.is_symlink():
                continue
            rel = src.relative_to(student_root).as_posix()
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            taken.add(rel)
    missing = tuple(k.source for k in rubric.kernels if k.source not in taken)
    for source in missing:
        (dest / source).unlink(missing_ok=True)
    everything = {p.relative_to(student_root).as_posix() for p in student_root.rglob("*") if p.is_file()}
    return Staged(dest, tuple(sorted(taken)), tuple(sorted(everything - taken)), missing)
