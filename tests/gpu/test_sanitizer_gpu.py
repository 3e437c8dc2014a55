"""compute-sanitizer on a failed case, on the GPU (issue 33): the real tool, in the GPU child's
sandbox, wrapping the real child, through run_gpu_stage.

- layernorm_fw_row_from_thread_index (rubrics/hw4/mutants.yaml): threads read rows far past
  the end of the input; memcheck names ker_layer_norm and the line of the statistics loop's
  read in the mutated src/layernorm_kernel.cu;
- layernorm_fw_output_row_from_thread_index: threads write outputs far past the end of
  ln_res; memcheck names ker_layer_norm and the line of the output's write;
- softmax_fw_no_syncthreads: memcheck finds nothing, racecheck names the race on the shared
  row max or sum in ker_attn_softmax, at one of their lines;
- the reference kit (every case passes): no session at all, no sanitizer seconds.
Findings are shown beside the lost points and change none. Skipped where the machine has no
compute-sanitizer (KG_SANITIZER=auto's search: PATH, beside nvcc, $CUDA_HOME/bin, /usr/local/cuda/bin).

Run: KG_SKIP_BENCH=1 bash tests/gpu/suite.sh tests/gpu/test_sanitizer_gpu.py -s
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rubrics.hw4 import speed
from rubrics.hw4.grade import GpuStageConfig
from tests.gpu.test_grading_gpu import build_variant, grade_tree, stage_config, work  # noqa: F401  (work: a fixture)
from worker.measurements import ProblemMeasurement
from worker.mutants import load_mutants
from worker.sanitizer import sanitizer_config

pytestmark = pytest.mark.gpu

MUTANTS = {m.id: m for m in load_mutants("hw4")}
SANITIZER = sanitizer_config("auto", 120.0, os.environ.get("KG_NVCC", "nvcc"))
LIGHT_TIMING = speed.TimingConfig(warmup=1, min_trials=2, max_trials=2, round_trials=1, kit_trials=1)
needs_tool = pytest.mark.skipif(SANITIZER is None or SANITIZER.executable is None,
                                reason="no compute-sanitizer on this machine")


def config(problems: tuple[str, ...]) -> GpuStageConfig:
    return stage_config(problems, sanitizer=SANITIZER, timing=LIGHT_TIMING, budget_s=300.0)


def _graded(mutant_id: str, problem: str, kit_root: Path, tmp_path: Path, work: Path) -> tuple[ProblemMeasurement, str, list[str]]:  # noqa: F811
    """The mutant built and its one problem graded: its measurement, the mutated source's
    text, and the problem's reasons."""
    tree = build_variant(MUTANTS[mutant_id], kit_root, tmp_path / mutant_id)
    measurements, score = grade_tree(mutant_id, tree, kit_root, work / mutant_id, config((problem,)))
    [m] = measurements
    assert m.failed_cases, (mutant_id, m.log_tail[-1500:])
    record = m.telemetry.get("sanitizer")
    print(f"\n{mutant_id}: {json.dumps(record, indent=1)}")
    return m, (tree / MUTANTS[mutant_id].edits[0].file).read_text(), score.problem(problem).reasons


def _lines(text: str, *needles: str) -> set[int]:
    return {n for n, line in enumerate(text.splitlines(), 1) if any(w in line for w in needles)}


# mutant, the line of ker_layer_norm it makes go out of bounds, the access
OUT_OF_BOUNDS = [
    ("layernorm_fw_row_from_thread_index", "const float4 v = x4[i];", "read"),  # the statistics loop
    ("layernorm_fw_output_row_from_thread_index", "y4[i] = kg::f4_fma(", "write"),  # the output loop
]


@needs_tool
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("mutant_id", "statement", "access"), OUT_OF_BOUNDS, ids=[m for m, _, _ in OUT_OF_BOUNDS])
def test_memcheck_names_the_access_past_the_end_of_a_layernorm_buffer(mutant_id: str, statement: str, access: str,
                                                                       kit_root: Path, tmp_path: Path,
                                                                       work: Path) -> None:  # noqa: F811
    m, source, reasons = _graded(mutant_id, "2.1", kit_root, tmp_path, work)
    record = m.telemetry["sanitizer"]
    assert record["tools"] == ["memcheck"] and record["note"] == "", record
    assert record["case"] == min((c for c in m.cases_by("abi") if not c.ok), key=lambda c: c.shape[0] * c.shape[1]).case_id
    line = min(_lines(source, statement))
    found = [f for f in record["findings"] if f["kernel"] == "ker_layer_norm"]
    assert found and all(f["file"] == "src/layernorm_kernel.cu" for f in found), record
    assert any(f["line"] == line and f["kind"].startswith(f"Invalid __global__ {access}") for f in found), (line, record)
    assert any(r.startswith(f"2.1: compute-sanitizer memcheck: Invalid __global__ {access}") and
               f"ker_layer_norm at src/layernorm_kernel.cu:{line}" in r for r in reasons), reasons
    assert m.telemetry["seconds"].get("sanitizer") is None and record["seconds"] > 0


@needs_tool
@pytest.mark.timeout(600)
def test_racecheck_names_the_missing_barrier_in_the_softmax_forward(kit_root: Path, tmp_path: Path,
                                                                    work: Path) -> None:  # noqa: F811
    m, source, reasons = _graded("softmax_fw_no_syncthreads", "1.1", kit_root, tmp_path, work)
    record = m.telemetry["sanitizer"]
    assert record["tools"] == ["memcheck", "racecheck"] and record["tool"] == "racecheck", record
    shared = _lines(source, "s_shift", "s_inv") - _lines(source, "__shared__")
    races = [f for f in record["findings"] if f["kind"].startswith("race between")]
    assert races, record
    assert any(f["kernel"].startswith("ker_attn_softmax") and not f["kernel"].startswith("ker_attn_softmax_")
               and f["file"] == "src/softmax_kernel.cu" and f["line"] in shared for f in races), (sorted(shared), record)
    assert any(r.startswith("1.1: compute-sanitizer racecheck: race between") for r in reasons), reasons


@needs_tool
@pytest.mark.timeout(600)
def test_a_correct_submission_runs_no_sanitizer(kit_root: Path, work: Path) -> None:  # noqa: F811
    measurements, score = grade_tree("reference kit, sanitizer on", kit_root, kit_root, work / "kit",
                                     config(("1.1", "1.2", "2.1", "2.2")))
    for m in measurements:
        assert m.all_passed, (m.problem_id, m.first_failure)
        assert "sanitizer" not in m.telemetry, m.telemetry["sanitizer"]
    assert not [p for p in (work / "kit").iterdir() if p.name.startswith("sanitizer-")]
    assert not any("compute-sanitizer" in line for s in score.problems for line in s.reasons + s.notes)
