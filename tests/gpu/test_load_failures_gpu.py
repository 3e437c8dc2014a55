"""A submission that fails while it loads, or whose kernel never returns, costs no more GPU time
than a correct one, plus one call timeout for the kernel (issues 36 and 55).

Three submissions from the hostile drills, each the reference kit with one edit, graded by the
production stage settings (timing, Problem 3, the 30 s load and 60 s call timeouts,
KG_GPU_BUDGET_S's 300 s):
- its minitorch package hangs at import (it walks the file system forever, as the drill's
  did): the drill's grade waited it out per problem, 427 s of GPU;
- its softmax library aborts in a constructor, and its CUDA backend loads every library at
  import as the course's does: the drill's cost 81-112 s;
- its softmax forward kernel spins forever: through the production service it cost 310 s of
  GPU on an H100 (2.3x a correct grade), every path and problem calling it waiting out its own
  timeouts (rubrics.hw4.hangs).
Each must be named once in words, every case, timing and problem that needs the failing part
settled with them, what does not need it graded, and the whole GPU stage must take no longer
than the reference kit's correct grade with the same settings on the same GPU, in this
session (the spinning kernel: plus one call timeout). The seconds are printed for the issue's
note.

Run: KG_SKIP_BENCH=1 bash tests/gpu/suite.sh tests/gpu/test_load_failures_gpu.py -s
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from rubrics.hw4.grade import GpuStageConfig
from rubrics.hw4.problem3 import Problem3Config
from tests.gpu.test_grading_gpu import build_variant, grade_tree, stage_config, work  # noqa: F401  (work: a fixture)
from tests.gpu.test_hostile_gpu import SOFTMAX_FW_SPINS
from worker.measurements import ProblemMeasurement
from worker.mutants import parse_mutants
from worker.scoring import RunScore

pytestmark = pytest.mark.gpu

ALL = ("1.1", "1.2", "2.1", "2.2", "3")
# The production stage: KG_GPU_BUDGET_S's default (grader/settings.py, which this machine
# cannot import), the course-config Problem 3 and the production load timeout.
PRODUCTION: GpuStageConfig = stage_config(ALL, problem3=Problem3Config(), budget_s=300.0)
SECONDS: dict[str, float] = {}

SCANS_THE_DISK = "import os as _kg_os\nwhile True:\n    for _kg_found in _kg_os.walk('/'):\n        pass\n"
LOAD_FAILURES = {m.id: m for m in parse_mutants({"mutants": [
    {"id": "minitorch-hangs-at-import", "kind": "correctness", "must_fail": list(ALL),
     "description": "the package walks the file system forever when imported",
     "edits": [{"file": "minitorch/__init__.py", "find": '"""A compact MiniTorch for llmsys_hw4',
                "replace": SCANS_THE_DISK + '"""A compact MiniTorch for llmsys_hw4'}]},
    {"id": "library-aborts-at-load", "kind": "correctness", "must_fail": list(ALL),
     "description": "a constructor of the softmax library aborts; the backend loads every library at import",
     "edits": [{"file": "src/softmax_kernel.cu", "regex": r"\Z",
                "replace": "\n#include <cstdlib>\n__attribute__((constructor)) static void kg_abort_at_load() "
                           "{ std::abort(); }\n"},
               {"file": "minitorch/cuda_kernel_ops.py", "regex": r"\Z",
                "replace": '\nfor _kg_name in ("combine", "softmax_kernel", "layernorm_kernel"):\n'
                           "    _lib(_kg_name)\n"}]},
    {"id": "softmax-forward-spins-forever", "kind": "correctness", "must_fail": ["1.1", "1.2", "3"],
     "description": "ker_attn_softmax never returns", "edits": [SOFTMAX_FW_SPINS]},
]})}
SOFTMAX_SO = "minitorch/cuda_kernels/softmax_kernel.so"


def _timed(label: str, tree: Path, kit_root: Path, folder: Path) -> tuple[dict[str, ProblemMeasurement], RunScore]:
    started = time.monotonic()
    measurements, score = grade_tree(label, tree, kit_root, folder, PRODUCTION)
    SECONDS[label] = round(time.monotonic() - started, 1)
    print(f"{label}: GPU stage {SECONDS[label]} s, {score.total:g} / {score.max_total:g}")
    return {m.problem_id: m for m in measurements}, score


@pytest.fixture(scope="module")
def correct_grade_s(kit_root: Path) -> float:
    """The reference kit's whole GPU stage with the production settings: a correct grade."""
    folder = Path(tempfile.mkdtemp(prefix="kg-gpu-correct-"))
    folder.chmod(0o711)
    try:
        by_id, _ = _timed("correct (reference kit)", kit_root, kit_root, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for m in by_id.values():
        assert m.status == "ok" and m.all_passed, (m.problem_id, m.first_failure, m.log_tail[-1500:])
    return SECONDS["correct (reference kit)"]


def _graded(mutant_id: str, kit_root: Path, tmp_path: Path, work: Path) -> tuple[dict[str, ProblemMeasurement], RunScore]:  # noqa: F811
    """The load failure's tree built (its touched kernels with nvcc) and graded, timed."""
    tree = build_variant(LOAD_FAILURES[mutant_id], kit_root, tmp_path / mutant_id)
    return _timed(mutant_id, tree, kit_root, work / mutant_id)


def _settled(m: ProblemMeasurement, cases: str, words: str) -> None:
    found = m.cases_by("abi") if cases == "abi" else m.cases_by("binding")
    assert found and all(not c.ok and c.message.startswith(f"not run: {words}") for c in found), (
        m.problem_id, [c.message for c in found][:3], m.log_tail[-1500:])


@pytest.mark.timeout(900)
def test_a_package_that_hangs_at_import_costs_less_than_a_correct_grade(  # noqa: F811
        kit_root: Path, tmp_path: Path, work: Path, correct_grade_s: float) -> None:
    by_id, score = _graded("minitorch-hangs-at-import", kit_root, tmp_path, work)
    words = f"your minitorch package does not import: it hung for {PRODUCTION.load_timeout_s:g} s"
    for pid in ALL[:4]:  # the C ABI loads only the library: the kit's kernels pass
        m = by_id[pid]
        assert m.cases_by("abi") and all(c.ok for c in m.cases_by("abi")), (pid, m.first_failure)
        _settled(m, "binding", words)
        assert m.figure("student") is None and m.log_tail.startswith(words)
    assert by_id["3"].status == "not_run"
    assert score.problem("3").reasons[0].startswith(f"3: was not run: {words}"), score.problem("3").reasons
    assert by_id["3"].telemetry["load"]["minitorch"]["loaded"] is False
    assert SECONDS["minitorch-hangs-at-import"] <= correct_grade_s, SECONDS


@pytest.mark.timeout(900)
def test_a_library_that_aborts_at_load_costs_less_than_a_correct_grade(  # noqa: F811
        kit_root: Path, tmp_path: Path, work: Path, correct_grade_s: float) -> None:
    by_id, score = _graded("library-aborts-at-load", kit_root, tmp_path, work)
    library = f"the kernels' library {SOFTMAX_SO} does not load: it aborted (SIGABRT)"
    package = "your minitorch package does not import: it aborted (SIGABRT)"
    for pid in ("1.1", "1.2"):
        _settled(by_id[pid], "abi", library)
        _settled(by_id[pid], "binding", library)
    for pid in ("2.1", "2.2"):  # their own library loads: their C ABI cases run and pass
        m = by_id[pid]
        assert m.cases_by("abi") and all(c.ok for c in m.cases_by("abi")), (pid, m.first_failure)
        _settled(m, "binding", package)
    assert by_id["3"].status == "not_run" and score.problem("3").reasons[0].startswith(f"3: was not run: {library}")
    assert SECONDS["library-aborts-at-load"] <= correct_grade_s, SECONDS


@pytest.mark.timeout(900)
def test_a_kernel_that_never_returns_costs_one_call_timeout(  # noqa: F811
        kit_root: Path, tmp_path: Path, work: Path, correct_grade_s: float) -> None:
    """The first case that waits out its call timeout names the launcher; every other check,
    timing and problem calling it is settled at once with those words (calls of it already
    waiting in other children are cut short); the LayerNorm problems are graded in full. The
    kit's launcher sends rows of up to 64 to a kernel of the starter's, so the cases it serves
    there still run and pass until the launcher is named."""
    by_id, score = _graded("softmax-forward-spins-forever", kit_root, tmp_path, work)
    timeout_s = PRODUCTION.timing.call_timeout_s
    hung = [c for pid in ("1.1", "1.2") for c in by_id[pid].cases if c.ran and not c.ok]
    assert len(hung) == 1 and hung[0] in by_id["1.1"].cases_by("abi"), [c.message for c in hung][:3]
    words = f"your softmax forward (launch_attn_softmax) did not return within {timeout_s:g} s in case {hung[0].case_id}"
    assert hung[0].message.startswith(f"hung: {words}"), hung[0].message
    m11, m12 = by_id["1.1"], by_id["1.2"]  # 1.2's own launcher, alone through the C ABI, passes
    assert m12.cases_by("abi") and all(c.ok for c in m12.cases_by("abi")), (m12.first_failure, m12.log_tail[-1500:])
    for cases in (m11.cases, m12.cases_by("binding")):  # its binding runs the forward first
        rest = [c for c in cases if c is not hung[0] and not c.ok]
        assert rest and all(not c.ran and c.message.startswith(f"not run: {words}") for c in rest), \
            [c.message for c in rest][:3]
    assert m11.figure("student") is None and m12.figure("student") is None and score.problem("1.1").points == 0
    for pid in ("2.1", "2.2"):
        m = by_id[pid]
        assert m.status == "ok" and m.all_passed and m.figure("student") is not None, (pid, m.first_failure)
        assert score.problem(pid).correctness_points == 14, score.problem(pid).reasons
    assert by_id["3"].status == "not_run" and by_id["3"].log_tail == words, by_id["3"].log_tail[-1500:]
    assert SECONDS["softmax-forward-spins-forever"] < correct_grade_s + timeout_s, SECONDS
    print(f"\nGPU stage seconds: {SECONDS}")
