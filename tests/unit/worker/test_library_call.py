"""The assignments of one library call (worker.library_call: the tests' reduce, rubrics/transpose)
on a machine without a GPU: what can be proven here. Each plug-in is found from its rubric and
asks for a GPU; its kit and its stripped starter build with the real nvcc through the generic
pipeline and end `built`; its mutant set applies to its kit; its inputs make its check catch
what it must (reduce: one element dropped at any length, whatever the summation order;
transpose: any element out of place). tests/gpu/test_library_call_gpu.py grades them on the H200."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.settings import Settings
from worker.assignment import assignment_of
from worker.library_call import LibraryProblem
from worker.mutants import apply_mutant, load_mutants
from worker.pipeline import NO_GPU_STAGE_MESSAGE, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.starter_kit import render_starter, zip_tree
from worker.states import RunState

ROOT = Path(__file__).resolve().parents[3]
# slug -> the folder its rubric is found in (reduce is the tests' own; transpose is a course's)
SEARCH = {"reduce": [ROOT / "tests" / "assignments"], "transpose": None}
SOURCE = {"reduce": "src/reduce.cu", "transpose": "src/transpose.cu"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="the pipeline builds the kits with nvcc")


def rubric_of(slug: str) -> Rubric:
    search = SEARCH[slug]
    return load_rubric(slug, search[0]) if search else load_rubric(slug)


def plugin_module(slug: str) -> ModuleType:
    plugin = assignment_of(rubric_of(slug))
    return next(m for m in list(sys.modules.values()) if getattr(m, "ASSIGNMENT", None) is plugin)


def problem_of(slug: str) -> LibraryProblem:
    problem = plugin_module(slug).PROBLEM
    assert isinstance(problem, LibraryProblem)
    return problem


@pytest.mark.parametrize("slug", SEARCH)
def test_its_plugin_is_a_gpu_stage_with_mutants(slug: str) -> None:
    rubric = rubric_of(slug)
    plugin = assignment_of(rubric)
    assert plugin.zip_folder == slug and plugin.stage_needs_gpu and plugin.make_stage is not None
    assert gpu_stage_for(Settings(_env_file=None, gpu_grading="off"), rubric) is None  # type: ignore[call-arg]
    assert [p.scoring.speed_points for p in rubric.problems] == [10]
    problem = problem_of(slug)
    assert problem.timed in problem.cases and not problem.timed.public


@needs_nvcc
@pytest.mark.parametrize("strip", [False, True], ids=["kit", "starter"])
@pytest.mark.parametrize("slug", SEARCH)
def test_kit_and_starter_build_and_end_built_without_a_gpu(tmp_path: Path, slug: str, strip: bool) -> None:
    rubric, tree = rubric_of(slug), tmp_path / slug
    if strip:
        render_starter(rubric.starter_dir, tree)
        assert f"TODO({problem_of(slug).function} launch)" in (tree / SOURCE[slug]).read_text()
    else:
        shutil.copytree(rubric.starter_dir, tree)
    settings = Settings(_env_file=None, gpu_grading="off", data_dir=tmp_path / "data")  # type: ignore[call-arg]
    outcome = grade_submission(zip_tree(tree, tmp_path / "r.zip", slug), rubric, tmp_path / "job",
                               pipeline_config(settings, rubric), gpu_stage=gpu_stage_for(settings, rubric))
    assert outcome.state == RunState.built and outcome.message == NO_GPU_STAGE_MESSAGE, outcome.message
    assert outcome.stages["build"].status == "ok", outcome.stages["build"].log


@pytest.mark.parametrize("slug", SEARCH)
def test_every_mutant_applies_to_the_kit(tmp_path: Path, slug: str) -> None:
    rubric = rubric_of(slug)
    mutants = load_mutants(slug, search=SEARCH[slug] or [ROOT / "rubrics"])
    assert {m.kind for m in mutants} == {"correctness", "speed"}
    kit = (rubric.starter_dir / SOURCE[slug]).read_text()
    for mutant in mutants:
        changed = (apply_mutant(rubric.starter_dir, mutant, tmp_path / mutant.id) / SOURCE[slug]).read_text()
        assert changed != kit, mutant.id


def test_any_summation_order_is_exact_so_a_dropped_element_always_fails() -> None:
    problem = problem_of("reduce")
    inputs = problem.inputs(seed=3)
    for case in problem.cases:
        values = inputs[case.case_id]
        assert values.shape == case.shape and problem.expected(values).shape == (1,)
        assert values.dtype == np.float32 and np.all(values != 0) and np.all(np.abs(values) <= 4)
        sequential = np.cumsum(values, dtype=np.float32)[-1:]  # one float32 accumulator, in order
        shuffled = np.cumsum(np.random.default_rng(0).permutation(values), dtype=np.float32)[-1:]
        assert problem.check(sequential, values).ok and problem.check(shuffled, values).ok
        if case.shape[0] <= 4097:  # the small cases catch an element dropped: the tolerance is below 1/8
            result = problem.check(np.array([values[:-1].astype(np.float64).sum()]), values)
            assert not result.ok and result.max_err >= 0.125 and "out of tolerance" in result.message, (case, result)
    assert not problem.check(np.array([np.nan]), inputs["n1"]).ok


def test_a_transpose_with_any_element_out_of_place_fails() -> None:
    problem = problem_of("transpose")
    inputs = problem.inputs(seed=5)
    for case in problem.cases:
        values = inputs[case.case_id]
        assert values.shape == case.shape and problem.expected(values).shape == case.shape[::-1]
        assert len(np.unique(values)) == values.size  # distinct, exactly representable values
        right = np.ascontiguousarray(values.T)
        assert problem.check(right, values).ok
        if values.size > 1:
            swapped = right.copy().reshape(-1)
            swapped[[0, -1]] = swapped[[-1, 0]]
            assert not problem.check(swapped.reshape(right.shape), values).ok, case
        unwritten = np.full(right.shape, np.nan, dtype=np.float32)  # a transpose that writes nothing
        assert not problem.check(unwritten, values).ok
    square = inputs["4096x4096"]
    assert not problem.check(square.copy(), square).ok  # the input itself is not its transpose
