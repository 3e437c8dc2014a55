"""The assignments of one library call (the tests' reduce, rubrics/transpose) graded end to end on
the GPU through the generic pipeline and the engine's generic stage for them (worker.library_call),
with no hw4 code: zip -> unpack -> stage -> build (nvcc, this GPU's arch) -> our kit built -> the
stage's children in the sandbox -> scored.

For each, the kit earns every point, speed included; the stripped starter earns none and says
why; each planted bug of its mutant set loses what it must (a wrong output: correctness; the
naive strategy with right outputs: the speed points)."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.assignment import StageConfig, StageProgress, assignment_of
from worker.build import Toolchain, cuda_include_dirs
from worker.library_call import FIGURE
from worker.measurements import ProblemMeasurement
from worker.mutants import Mutant, apply_mutant, load_mutants
from worker.pipeline import Outcome, PipelineConfig, grade_submission
from worker.rubric import load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy
from worker.scoring import ProblemScore, score_run
from worker.starter_kit import render_starter, zip_tree
from worker.unpack import UnpackLimits

pytestmark = pytest.mark.gpu

TESTS = Path(__file__).resolve().parents[1] / "assignments"
RUBRICS = {"reduce": load_rubric("reduce", TESTS), "transpose": load_rubric("transpose")}
MUTANTS = [(slug, m) for slug, search in (("reduce", [TESTS]), ("transpose", [TESTS.parents[1] / "rubrics"]))
           for m in load_mutants(slug, search=search)]
GiB = 1024**3
LIMITS = SandboxLimits(wall_s=300, cpu_s=600, memory_bytes=16 * GiB, max_processes=256, file_size_bytes=GiB)
POLICY = SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None, isolate_network=True, gpu_index=0)


@pytest.fixture()
def work() -> Iterator[Path]:
    """A folder the sandbox user can reach (pytest's own tmp folders are 0700 root)."""
    root = Path(tempfile.mkdtemp(prefix="kg-library-call-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def grade(slug: str, label: str, tree: Path, work: Path) -> tuple[Outcome, ProblemMeasurement, ProblemScore]:
    rubric = RUBRICS[slug]
    config = PipelineConfig(
        limits=UnpackLimits(16 * 2**20, 4 * 2**20, 100, 8, 100.0),
        toolchain=Toolchain(os.environ.get("KG_NVCC", "nvcc"), (*rubric.nvcc_flags, "-arch=native"), cuda_include_dirs()),
        build_cache_dir=work / "cache", build_jobs=1, log_limit_bytes=64 * 1024,
    )
    stage = assignment_of(rubric).make_stage
    assert stage is not None
    measured: list[ProblemMeasurement] = []

    def collecting(*args):  # type: ignore[no-untyped-def]
        measured.extend(stage(StageConfig(LIMITS, POLICY, budget_s=240), StageProgress())(*args))
        return measured

    started = time.monotonic()
    outcome = grade_submission(zip_tree(tree, work / "r.zip", slug), rubric, work / "job", config, gpu_stage=collecting)
    seconds = time.monotonic() - started
    assert outcome.state.value == "scored", (label, outcome.state, outcome.message, outcome.stages)
    [m] = measured
    [score] = score_run(rubric, measured).problems
    stages = {name: round(rec.seconds, 1) for name, rec in outcome.stages.items()}
    print(f"\n== {slug} {label}: {outcome.score}/{rubric.total_points:g} in {seconds:.1f} s, stages {stages}; "
          f"status {m.status}, cases {sum(c.ok for c in m.cases)}/{len(m.cases)}, "
          f"speedup {m.figure(FIGURE).describe() if m.figure(FIGURE) else '-'}, "
          f"timing {m.telemetry.get('timing')}")
    for reason in score.reasons:
        print(f"   - {reason}")
    return outcome, m, score


@pytest.mark.parametrize("slug", RUBRICS)
def test_the_kit_earns_every_point_on_the_gpu(slug: str, work: Path) -> None:
    rubric, tree = RUBRICS[slug], work / "kit"
    shutil.copytree(rubric.starter_dir, tree)
    outcome, m, score = grade(slug, "kit", tree, work)
    assert m.status == "ok" and m.all_passed and len(m.cases) >= 5, m.cases
    assert m.figure(FIGURE) is not None and m.telemetry["timing"]["stopped"] in ("settled", "max_trials")
    assert score.full_marks and outcome.score == rubric.total_points, (score.reasons, m.figure(FIGURE))
    assert m.telemetry["before"].get("name"), "the GPU's snapshot is recorded"


@pytest.mark.parametrize("slug", RUBRICS)
def test_the_stripped_starter_earns_nothing_and_says_why(slug: str, work: Path) -> None:
    render_starter(RUBRICS[slug].starter_dir, work / "starter")
    outcome, m, score = grade(slug, "starter", work / "starter", work)
    assert m.status == "ok" and not any(c.ok for c in m.cases) and m.figure(FIGURE) is None
    assert outcome.score == 0 and any("got nan" in r for r in score.reasons), score.reasons


@pytest.mark.parametrize("slug, mutant", MUTANTS, ids=[m.id for _, m in MUTANTS])
def test_each_mutant_loses_what_it_must(slug: str, mutant: Mutant, work: Path) -> None:
    rubric = RUBRICS[slug]
    tree = apply_mutant(rubric.starter_dir, mutant, work / mutant.id)
    _, m, score = grade(slug, mutant.id, tree, work)
    floor = rubric.problems[0].scoring.speed_floor
    if mutant.kind == "correctness":
        assert m.status == "ok" and not m.all_passed and score.correctness_points == 0 and score.points == 0, score
    else:  # right outputs, the naive speed: all correctness points, no speed points
        assert m.all_passed and score.correctness_points == 10 and score.speed_points == 0, score
        assert m.figure(FIGURE) is not None and m.figure(FIGURE).high < floor, m.figure(FIGURE)
