"""vecadd's plug-in (its rubric.yaml names this module): a stage that needs no GPU.

After the generic pipeline has built the student's src/vecadd.cu, one sandboxed child
(child.py, in a copy of the staged tree) calls vec_add on every case; this trusted parent
reads each output back through worker.job_files (the tree was the child's to fill) and checks
it against a float64 reference with worker.checks, the check every assignment shares. It
times nothing; a zip holding `timing_seconds.txt` makes the stage wait that long (at most
60 s) after telling the service its verdict, as a timing phase would, so tests can watch the
two-step result (grader.runs.progress).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from worker.assignment import GpuStage, Plugin, StageConfig, StageProgress, Words
from worker.checks import compare
from worker.job_files import JobFileError, read_job_file
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import Rubric
from worker.sandbox import Sandbox

PROBLEM = "1"
CASES = (("n1", 1, True), ("n1000", 1000, True), ("n4097", 4097, False))  # (case id, length, public)
ATOL, RTOL = 1e-6, 1e-6  # one float32 addition rounds to half an ulp of its result
CHILD = Path(__file__).with_name("child.py")


def child_python() -> str:
    """A python3 the sandbox user can run: the child needs only the standard library, while
    the worker's own interpreter may sit in a folder only its owner can read."""
    return shutil.which("python3", path=os.defpath) or sys.executable


def measure(config: StageConfig, staged: Path, work_dir: Path) -> ProblemMeasurement:
    tree = work_dir / f"problem-{PROBLEM}"
    shutil.copytree(staged, tree)
    shutil.copyfile(CHILD, tree / "kg_child.py")
    rng = np.random.default_rng(config.seed)
    inputs = {}
    for case_id, n, _ in CASES:
        a, b = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2))
        (tree / f"{case_id}.a").write_bytes(a.tobytes())
        (tree / f"{case_id}.b").write_bytes(b.tobytes())
        inputs[case_id] = (a, b)
    child = Sandbox(config.limits, config.policy).spawn(
        [child_python(), "kg_child.py", *inputs], cwd=tree, env={"PATH": os.defpath})
    ended = child.wait(config.limits.wall_s)
    if ended.reason != "exited" or ended.returncode != 0:
        status = "timeout" if ended.reason == "timeout" else "crashed"
        return ProblemMeasurement(PROBLEM, status=status, log_tail=f"{ended.detail}\n{child.output_tail()}")
    cases = []
    for case_id, n, public in CASES:
        try:  # the tree was the child's: its outputs are read through the engine, never by path
            written = read_job_file(tree, f"{case_id}.out", config.limits.file_size_bytes)
        except JobFileError as refused:  # missing, or a link, FIFO, ... planted in its place
            cases.append(CaseOutcome(case_id, (n,), False, message=str(refused), public=public))
            continue
        got = np.frombuffer(written, np.float32, len(written) // 4)
        a, b = inputs[case_id]
        result = compare({"out": (got, a.astype(np.float64) + b)}, ATOL, RTOL, (n,))
        cases.append(CaseOutcome(case_id, (n,), result.ok, result.max_err, result.where, result.message, public))
    return ProblemMeasurement(PROBLEM, routes={"library": cases})


def make_stage(config: StageConfig, progress: StageProgress) -> GpuStage:
    def stage(rubric: Rubric, staged: Path, reference: Path, work_dir: Path,
              problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        if PROBLEM not in problems:
            return []
        progress.problem(PROBLEM)
        measured = measure(config, staged, work_dir)
        hold = staged / "timing_seconds.txt"
        seconds = min(60.0, float(hold.read_text())) if hold.is_file() else 0.0
        progress.checked([measured], frozenset({PROBLEM}) if seconds > 0 else frozenset())
        time.sleep(seconds)
        return [measured]

    return stage


ASSIGNMENT = Plugin(
    zip_folder="vecadd",
    make_stage=make_stage,
    stage_needs_gpu=False,
    words=Words(routes={"library": "vec_add called directly"}),
)
