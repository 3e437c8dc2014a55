"""A submission whose code hangs or crashes as it loads, and the run's GPU time budget, on the
CPU stand-in (tests/fixtures/cpu_standin.py): what does not load is found once, by a probe
child per part (rubrics.hw4.loading), and named in words; what needs it is settled at once
without waiting out a timeout per case, child or problem; what does not need it is graded as
usual; a child whose own side does not come up is an infrastructure fault, never a grade; and
past the budget what is left is settled as not run while what was graded counts.

"Children that ran the submission's code" are counted by the files that code leaves in each
child's folder (`kg-imported-<pid>`, `kg-loaded-<pid>`): without the probes every check,
timing child and Problem 3 would load it again.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import KERNEL_PROBLEMS, P3, TIMING, base, policy, short_cases, trusted  # noqa: E402,F401  (base, policy, trusted, short_cases: fixtures)
from gpu_stage_support import describe as _describe  # noqa: E402
from gpu_stage_support import measured as _measured  # noqa: E402
from gpu_stage_support import stage_config as _config  # noqa: E402

from rubrics.hw4.grade import GpuStageConfig, run_gpu_stage  # noqa: E402
from rubrics.hw4.loading import MINITORCH, failure_words  # noqa: E402
from worker.gpu.client import ChildFailure, StageInfraError, StudentError  # noqa: E402
from worker.measurements import ProblemMeasurement  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxExit, SandboxPolicy  # noqa: E402
from worker.scoring import score_run  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")

INIT = cpu_standin.KIT / "minitorch" / "__init__.py"
IMPORTED = 'import os as _kg_os\nopen("kg-imported-%d" % _kg_os.getpid(), "w").close()\n'
HANGS = IMPORTED + "import time as _kg_time\nwhile True:\n    _kg_time.sleep(1)\n"  # as a disk scan at import would
# The course's CUDA backend loads every library when it is imported (the stand-in's, lazily).
LOADS_EVERY_LIBRARY = '\n_lib("softmax_kernel")\n_lib("layernorm_kernel")\n'
SOFTMAX_SO = "minitorch/cuda_kernels/softmax_kernel.so"


def _submission(base: Path, name: str, softmax_defines: tuple[str, ...] = (),
                files: dict[str, str] | None = None) -> Path:
    """A stand-in at base/name/submission: its softmax library built with `softmax_defines`,
    then each of `files` (a path in the tree -> its text) written over it."""
    tree = cpu_standin.make_cpu_submission(base / name / "submission")
    if softmax_defines:
        (tree / "src" / "softmax_kernel.cu").write_text(cpu_standin.kernel_source(softmax_defines))
        cpu_standin.compile_kernels(tree)
    for rel, text in (files or {}).items():
        (tree / rel).write_text(text)
    return tree


def _grade(base: Path, name: str, tree: Path, trusted: Path,
           config: GpuStageConfig) -> tuple[dict[str, ProblemMeasurement], float]:
    started = time.monotonic()
    measurements = run_gpu_stage(load_rubric("hw4"), tree, trusted, base / name / "work", config)
    return {m.problem_id: m for m in measurements}, time.monotonic() - started


def _ran_it(base: Path, name: str, mark: str) -> int:
    """How many children ran the code that leaves `mark`-<pid> in its folder."""
    return len(list((base / name / "work").rglob(f"{mark}-*")))


def _settled(m: ProblemMeasurement, path: str, words: str) -> None:
    cases = m.cases_by("abi") if path == "abi" else m.cases_by("binding")
    assert cases and all(not c.ok and not c.ran and c.message.startswith(f"not run: {words}") for c in cases), \
        _describe(m)


def test_a_package_that_hangs_at_import_is_waited_for_once(base: Path, trusted: Path, policy: SandboxPolicy,
                                                            short_cases: dict) -> None:
    """Without the probe every binding path would hang twice (MAX_HANGS x 30 s, the problems in
    parallel), every timing child once, and Problem 3's setup 30 s more: over 90 s."""
    timing = replace(TIMING, call_timeout_s=30.0)
    p3 = replace(P3, setup_timeout_s=30.0, step_timeout_s=30.0)
    config = replace(_config(policy, timing, p3), load_timeout_s=3.0)
    tree = _submission(base, "hangs", files={"minitorch/__init__.py": HANGS + INIT.read_text()})
    by_id, seconds = _grade(base, "hangs", tree, trusted, config)
    words = "your minitorch package does not import: it hung for 3 s"
    for pid in KERNEL_PROBLEMS:  # the C ABI needs only the library: graded as usual
        m = by_id[pid]
        assert m.status == "ok" and m.cases_by("abi") and all(c.ok for c in m.cases_by("abi")), _describe(m)
        _settled(m, "binding", words)
        assert m.figure("student") is None and m.log_tail.startswith(words), _describe(m)
    m3 = by_id["3"]
    assert m3.status == "not_run" and m3.log_tail.startswith(words), _describe(m3)
    assert _ran_it(base, "hangs", "kg-imported") == 1  # the probe alone imported it
    assert not (base / "hangs" / "work" / "problem-3").exists()  # no child for Problem 3
    assert m3.telemetry["load"][MINITORCH] == {"loaded": False, "seconds": pytest.approx(3, abs=3), "why": words}
    assert seconds < 45, seconds
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("3").reasons == [f"3: was not run: {words}; 0 of 20 points"]
    assert any(words in r for r in score.problem("1.1").reasons), score.problem("1.1").reasons


def test_a_library_that_aborts_when_loaded_costs_only_what_needs_it(base: Path, trusted: Path,
                                                                      policy: SandboxPolicy, short_cases: dict) -> None:
    """The softmax library aborts in a constructor; the package loads it lazily (as our kit's
    does), so it imports: 1.1 and 1.2 (both paths: the fused op is in that library) and
    Problem 3 are settled with the library's words, 2.1 and 2.2 are graded and timed."""
    tree = _submission(base, "aborts", ("ABORT_AT_LOAD",))
    by_id, _ = _grade(base, "aborts", tree, trusted, _config(policy))
    words = f"the kernels' library {SOFTMAX_SO} does not load: it aborted (SIGABRT)"
    for pid in ("1.1", "1.2"):
        m = by_id[pid]
        _settled(m, "abi", words)
        _settled(m, "binding", words)
        assert "ABORT_AT_LOAD: aborting in a constructor" in m.cases_by("abi")[0].message, _describe(m)
        assert m.telemetry["kernel_profile"] == f"kernel GPU time not measured: {words} | " \
            "cpu_kernels: ABORT_AT_LOAD: aborting in a constructor"
    for pid in ("2.1", "2.2"):
        m = by_id[pid]
        assert m.status == "ok" and m.all_passed and _measured(m), _describe(m)
    assert by_id["3"].status == "not_run" and by_id["3"].log_tail.startswith(words), _describe(by_id["3"])
    assert _ran_it(base, "aborts", "kg-loaded") == 1  # its probe alone loaded it
    assert by_id["2.1"].telemetry["load"][SOFTMAX_SO]["loaded"] is False
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("1.1").points == 0 and score.problem("2.1").correctness_points == 14


def test_a_package_that_loads_an_aborting_library_does_not_import(base: Path, trusted: Path,
                                                                    policy: SandboxPolicy, short_cases: dict) -> None:
    """As the course's backend does, the package loads every library when imported: it does
    not import either, so no binding path runs; the C ABI of 2.1 and 2.2 still does."""
    ops = cpu_standin.OPS_MODULE + LOADS_EVERY_LIBRARY
    tree = _submission(base, "eager", ("ABORT_AT_LOAD",), {"minitorch/cuda_kernel_ops.py": ops})
    by_id, _ = _grade(base, "eager", tree, trusted, _config(policy))
    library = f"the kernels' library {SOFTMAX_SO} does not load: it aborted (SIGABRT)"
    package = "your minitorch package does not import: it aborted (SIGABRT)"
    _settled(by_id["1.1"], "abi", library)
    _settled(by_id["1.1"], "binding", library)  # the first part it needs that does not load
    for pid in ("2.1", "2.2"):
        m = by_id[pid]
        assert m.cases_by("abi") and all(c.ok for c in m.cases_by("abi")), _describe(m)
        _settled(m, "binding", package)
    assert by_id["3"].log_tail.startswith(library) and package in by_id["3"].log_tail
    assert _ran_it(base, "eager", "kg-loaded") == 2  # the library's probe and the package's


def test_a_child_whose_own_side_does_not_start_is_an_infrastructure_fault(base: Path, trusted: Path,
                                                                          policy: SandboxPolicy,
                                                                          short_cases: dict) -> None:
    """A GPU the sandbox cannot reach (here: device 99) fails our own CUDA context in the probe
    children's `ready`, before any of the submission's code runs: the stage raises (the run's
    lifecycle retries it, then ends it `infra_error`), it grades nothing."""
    tree = _submission(base, "no-gpu", files={"minitorch/__init__.py": IMPORTED + INIT.read_text()})
    config = replace(_config(policy, problems=("1.1", "3")), policy=replace(policy, gpu_index=99))
    with pytest.raises(StageInfraError, match="did not start: .*(CUDA|cuInit)"):
        _grade(base, "no-gpu", tree, trusted, config)
    assert _ran_it(base, "no-gpu", "kg-imported") == 0


def test_past_the_budget_the_rest_is_not_run_and_what_was_graded_counts(base: Path, trusted: Path,
                                                                        policy: SandboxPolicy,
                                                                        short_cases: dict) -> None:
    """Problem 3's model hangs while it is built (its setup may take 300 s): the run's budget
    of 30 s cuts it, and 1.1, graded before, keeps its points."""
    hangs_building = INIT.read_text() + "\nimport time as _kg_time\nDecoderLM.__init__ = lambda self, *a, **k: _kg_time.sleep(3600)\n"
    tree = _submission(base, "budget", files={"minitorch/__init__.py": hangs_building})
    config = replace(_config(policy, problem3=replace(P3, setup_timeout_s=300.0), problems=("1.1", "3")), budget_s=30.0)
    by_id, seconds = _grade(base, "budget", tree, trusted, config)
    words = "the run's GPU time budget of 30 s was used up"
    assert seconds < 30 + 15, seconds  # the budget, and the seconds to stop the children
    m3 = by_id["3"]
    assert m3.status == "not_run" and words in m3.log_tail and m3.first_failure is None, _describe(m3)
    assert by_id["1.1"].status == "ok" and by_id["1.1"].all_passed, _describe(by_id["1.1"])
    assert m3.telemetry["budget"]["budget_s"] == 30.0
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("1.1").correctness_points == 14
    assert score.problem("3").points == 0 and words in score.problem("3").reasons[0]


def _crash(reason: str, detail: str, tail: str = "") -> ChildFailure:
    return ChildFailure("crashed", f"{reason}: {detail}", tail, SandboxExit(-6, reason, detail))


@pytest.mark.parametrize(("part", "failure", "words"), [
    (MINITORCH, ChildFailure("timeout", "no answer to 'load_minitorch' within 60 s", ""),
     "your minitorch package does not import: it hung for 60 s"),
    (MINITORCH, StudentError("ModuleNotFoundError: No module named 'numba'", "trace"),
     "your minitorch package does not import: it raised ModuleNotFoundError: No module named 'numba'"),
    (SOFTMAX_SO, _crash("signal", "SIGABRT", "noise\nterminate called: what(): bad alloc\n"),
     f"the kernels' library {SOFTMAX_SO} does not load: it aborted (SIGABRT) | terminate called: what(): bad alloc"),
    (SOFTMAX_SO, _crash("signal", "SIGSEGV"), f"the kernels' library {SOFTMAX_SO} does not load: it crashed (SIGSEGV)"),
    (SOFTMAX_SO, _crash("exited", "exit status 3"),
     f"the kernels' library {SOFTMAX_SO} does not load: it ended the process (exit status 3)"),
    (MINITORCH, _crash("processes", "257 processes over the cap of 256"),
     "your minitorch package does not import: it was stopped: 257 processes over the cap of 256"),
])
def test_load_failures_in_words(part: str, failure: ChildFailure | StudentError, words: str) -> None:
    assert failure_words(part, failure, 60.0) == words
