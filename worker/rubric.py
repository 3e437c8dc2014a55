"""Rubric files (rubrics/<slug>.yaml) loaded into typed, immutable objects.

Depends only on PyYAML so the GPU suite can read rubrics on the bare GPU machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from worker.build import KernelTarget

RUBRIC_DIR = Path(__file__).resolve().parent.parent / "rubrics"
STARTER_DIR = Path(__file__).resolve().parent.parent / "starter"


class RubricError(ValueError):
    """A rubric file is missing or malformed."""


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    points: float
    reference_speedup: float | None


@dataclass(frozen=True)
class Rubric:
    slug: str
    title: str
    starter: str
    required_files: tuple[str, ...]
    student_files: tuple[str, ...]
    kernels: tuple[KernelTarget, ...]
    nvcc_flags: tuple[str, ...]
    problems: tuple[Problem, ...]

    @property
    def total_points(self) -> float:
        return sum(p.points for p in self.problems)

    @property
    def starter_dir(self) -> Path:
        return STARTER_DIR / self.starter


def load_rubric(slug: str, rubric_dir: Path = RUBRIC_DIR) -> Rubric:
    path = rubric_dir / f"{slug}.yaml"
    if not path.is_file():
        raise RubricError(f"no rubric named {slug!r} in {rubric_dir}")
    data = yaml.safe_load(path.read_text())
    try:
        return Rubric(
            slug=data["slug"],
            title=data["title"],
            starter=data["starter"],
            required_files=tuple(data["required_files"]),
            student_files=tuple(data["student_files"]),
            kernels=tuple(KernelTarget(**k) for k in data["kernels"]),
            nvcc_flags=tuple(data["nvcc_flags"]),
            problems=tuple(
                Problem(
                    id=str(p["id"]),
                    title=p["title"],
                    points=float(p["points"]),
                    reference_speedup=p.get("reference_speedup"),
                )
                for p in data["problems"]
            ),
        )
    except (KeyError, TypeError) as exc:
        raise RubricError(f"{path.name}: malformed rubric ({exc})") from exc


def available_rubrics(rubric_dir: Path = RUBRIC_DIR) -> list[str]:
    return sorted(p.stem for p in rubric_dir.glob("*.yaml"))
