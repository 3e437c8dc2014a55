"""The tests' GPU assignment (tests/assignments/reduce) on a machine without a GPU: what can be
proven here. Its plug-in is found beside its rubric and asks for a GPU; its kit and its stripped
starter build with the real nvcc through the generic pipeline and end `built`; its mutant set
applies to its kit; and its inputs make every summation order exact, so its check catches one
element dropped at any length. tests/gpu/test_reduce_gpu.py grades it on the H200."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.settings import Settings
from worker.assignment import assignment_of
from worker.mutants import apply_mutant, load_mutants
from worker.pipeline import NO_GPU_STAGE_MESSAGE, grade_submission
from worker.rubric import load_rubric
from worker.starter_kit import render_starter, zip_tree
from worker.states import RunState

REDUCE = Path(__file__).resolve().parents[3] / "tests" / "assignments" / "reduce"
RUBRIC = load_rubric("reduce", REDUCE.parent)
PLUGIN = assignment_of(RUBRIC)
assert PLUGIN.make_stage is not None
STAGE = sys.modules[PLUGIN.make_stage.__module__]  # the plug-in's module
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="the pipeline builds reduce with nvcc")


def test_its_plugin_is_a_gpu_stage_with_mutants() -> None:
    assert PLUGIN.zip_folder == "reduce" and PLUGIN.stage_needs_gpu and PLUGIN.make_stage is not None
    assert gpu_stage_for(Settings(_env_file=None, gpu_grading="off"), RUBRIC) is None  # type: ignore[call-arg]
    assert [p.scoring.speed_points for p in RUBRIC.problems] == [10]


@needs_nvcc
@pytest.mark.parametrize("strip", [False, True], ids=["kit", "starter"])
def test_kit_and_starter_build_and_end_built_without_a_gpu(tmp_path: Path, strip: bool) -> None:
    tree = tmp_path / "reduce"
    if strip:
        render_starter(RUBRIC.starter_dir, tree)
        assert "TODO(reduce_sum launch)" in (tree / "src" / "reduce.cu").read_text()
    else:
        shutil.copytree(RUBRIC.starter_dir, tree)
    settings = Settings(_env_file=None, gpu_grading="off", data_dir=tmp_path / "data")  # type: ignore[call-arg]
    outcome = grade_submission(zip_tree(tree, tmp_path / "r.zip", "reduce"), RUBRIC, tmp_path / "job",
                               pipeline_config(settings, RUBRIC), gpu_stage=gpu_stage_for(settings, RUBRIC))
    assert outcome.state == RunState.built and outcome.message == NO_GPU_STAGE_MESSAGE, outcome.message
    assert outcome.stages["build"].status == "ok", outcome.stages["build"].log


def test_every_mutant_applies_to_the_kit(tmp_path: Path) -> None:
    mutants = load_mutants("reduce", search=[REDUCE.parent])
    assert {m.kind for m in mutants} == {"correctness", "speed"}
    kit = (RUBRIC.starter_dir / "src" / "reduce.cu").read_text()
    for mutant in mutants:
        changed = (apply_mutant(RUBRIC.starter_dir, mutant, tmp_path / mutant.id) / "src" / "reduce.cu").read_text()
        assert changed != kit, mutant.id


def test_any_summation_order_is_exact_so_a_dropped_element_always_fails() -> None:
    inputs = STAGE.make_inputs(seed=3)
    for case in STAGE.CASES:
        values = inputs[case.case_id]
        assert values.dtype == np.float32 and np.all(values != 0) and np.all(np.abs(values) <= 4)
        sequential = float(np.cumsum(values, dtype=np.float32)[-1])  # one float32 accumulator, in order
        shuffled = float(np.cumsum(np.random.default_rng(0).permutation(values), dtype=np.float32)[-1])
        assert STAGE.check_sum(sequential, values, (case.n,)).ok and STAGE.check_sum(shuffled, values, (case.n,)).ok
        if case.n <= 4097:  # the small cases catch an element dropped: the tolerance is below 1/8
            dropped = float(values[:-1].astype(np.float64).sum())
            result = STAGE.check_sum(dropped, values, (case.n,))
            assert not result.ok and result.max_err >= 0.125 and "out of tolerance" in result.message, (case, result)
    assert not STAGE.check_sum(float("nan"), inputs["n1"], (1,)).ok
