"""The capacity stand-in's plug-in (capacity-standin.yaml names it): a grade that holds its worker
for the seconds the upload says (grade_seconds.txt, at most 600) and passes. It runs no
submitted code, so it needs no sandbox; it is for bench/capacity_check.py alone."""
from __future__ import annotations

import time
from pathlib import Path

from worker.assignment import GpuStage, Plugin, StageConfig, StageProgress
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import Rubric

PROBLEM = "1"
LONGEST_S = 600.0


def make_stage(config: StageConfig, progress: StageProgress) -> GpuStage:
    def stage(rubric: Rubric, staged: Path, reference: Path, work_dir: Path,
              problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        progress.problem(PROBLEM)
        seconds = min(LONGEST_S, max(0.0, float((staged / "grade_seconds.txt").read_text())))
        time.sleep(seconds)
        return [ProblemMeasurement(PROBLEM, routes={"held": [CaseOutcome("held", (), True, message=f"held {seconds:g} s")]})]

    return stage


ASSIGNMENT = Plugin(zip_folder="capacity-standin", make_stage=make_stage, stage_needs_gpu=False)
