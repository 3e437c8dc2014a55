"""Entry point of the Gradescope autograder (`run_autograder` calls it; see grader.gradescope.pack).

Zips the submission folder Gradescope provides, grades it with our pipeline exactly as a
worker does (unpack checks, staging onto the trusted starter, nvcc, the GPU stage when this
machine has a GPU) and writes results.json: the run's own Gradescope report when it was
scored, else a zero-point report that says why nothing was scored (no GPU, build error,
bad layout), with every problem listed.

    python -m grader.gradescope.run SUBMISSION_DIR RESULTS_JSON [--assignment hw4]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.settings import get_settings
from worker.build import ToolchainFault
from worker.pipeline import Outcome, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.starter_kit import zip_tree
from worker.states import RunState

LOG_TAIL_CHARS = 4000


def unscored_results(rubric: Rubric, outcome: Outcome) -> dict[str, Any]:
    """results.json for a run that ended without a score (built, or failed)."""
    lines = [f"{rubric.title}: not scored ({outcome.state.value}"
             + (f", {outcome.error_class.value})" if outcome.error_class else ")"), outcome.message]
    failed = [name for name, stage in outcome.stages.items() if stage.status == "failed"]
    for name in failed:
        lines += [f"--- {name} log (end) ---", outcome.stages[name].log[-LOG_TAIL_CHARS:]]
    tests = [{"name": f"{p.problem_id} {p.title}", "number": p.problem_id, "score": 0.0, "max_score": p.max_points,
              "status": "failed", "output": p.message, "output_format": "text", "visibility": "visible"}
             for p in outcome.problems]
    return {"score": 0.0, "output": "\n".join(lines), "output_format": "text", "visibility": "visible",
            "stdout_visibility": "visible", "tests": tests}


def grade_folder(submission: Path, rubric: Rubric, work: Path) -> dict[str, Any]:
    settings = get_settings()
    started = time.monotonic()
    archive = zip_tree(submission, work / "submission.zip", top_folder="submission")
    outcome = grade_submission(archive, rubric, work / "job", pipeline_config(settings, rubric),
                               gpu_stage=gpu_stage_for(settings, rubric))
    results = dict(outcome.report) if outcome.state is RunState.scored and outcome.report else unscored_results(rubric, outcome)
    results["execution_time"] = int(round(time.monotonic() - started))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade a Gradescope submission folder with kernelgrade.")
    parser.add_argument("submission", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--assignment", required=True, help="the assignment's slug (the packed run script names it)")
    args = parser.parse_args(argv)
    rubric = load_rubric(args.assignment, search=get_settings().rubric_dirs)
    with tempfile.TemporaryDirectory(prefix="kg-gradescope-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the sandbox user must reach the job folder
        try:
            results = grade_folder(args.submission, rubric, work)
        except ToolchainFault as exc:  # no results.json: Gradescope reports the autograder failed, not a grade
            print(f"the autograder's CUDA toolchain failed, not the student's code: {exc}", file=sys.stderr)
            return 1
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2, allow_nan=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
