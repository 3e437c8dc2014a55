"""The whole hw4 GPU stage on a CPU, with a "CPU stand-in submission" (tests/fixtures/cpu_standin.py):
a copy of starter/hw4 whose kernel libraries are host loops behind the hw4 C ABI
(tests/fixtures/cpu_kernels.cpp) and whose CudaKernelOps is the kit's NumpyOps with the fused
ops routed through those libraries by ctypes.

What runs for real: rubrics.hw4.grade.run_gpu_stage with its sandboxed children (one per
problem, plus the trusted child on a second stand-in built from the unmodified kit), the C ABI
and binding checks on the rubric's cases, the interleaved timing, Problem 3 on the stand-in's
CudaKernelOps (the production backend path, not backend="numpy": the stand-in's "CUDA" backend
runs on the CPU), scoring, and worker.pipeline.grade_submission on a zip of the stand-in
(built by a fake nvcc that compiles the stand-in sources with g++).

Broken variants (preprocessor switches of cpu_kernels.cpp) must fail exactly where expected.
The variant tests use a shortened case list and small timing shapes to stay fast; the main
test uses the rubric's full case list and the real timing shapes.
"""
from __future__ import annotations

import dataclasses
import os
import pwd
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import KERNEL_PROBLEMS, LIMITS, P3, TIMING, MiB, base, policy, short_cases, trusted  # noqa: E402,F401  (base, policy, trusted, short_cases: fixtures)
from gpu_stage_support import describe as _describe  # noqa: E402
from gpu_stage_support import measured as _measured  # noqa: E402
from gpu_stage_support import run_stage as _run  # noqa: E402
from gpu_stage_support import sandbox_user as _sandbox_user  # noqa: E402
from gpu_stage_support import stage_config as _config  # noqa: E402

from rubrics.hw4.cases import load_cases  # noqa: E402
from rubrics.hw4.grade import GpuStageConfig, run_gpu_stage  # noqa: E402
from rubrics.hw4.kernel_checks import binding_eligible  # noqa: E402
from worker.assignment import StageProgress  # noqa: E402
from worker.build import Toolchain  # noqa: E402
from worker.gpu_conditions import NO_NVML  # noqa: E402
from worker.measurements import CONDITIONS_KEY, COPY_PEAK_KEY, FUSED_BYTES_KEY  # noqa: E402
from worker.pipeline import PipelineConfig, grade_submission  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.scoring import score_run  # noqa: E402
from worker.states import RunState  # noqa: E402
from worker.telemetry import gpu_count  # noqa: E402
from worker.trials import STOP_REASONS  # noqa: E402
from worker.unpack import UnpackLimits  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")

# Setup shared with test_grading_catches_mutants_cpu.py: tests/fixtures/gpu_stage_support.py
# (limits, timing, the tiny Problem 3, the short case list, the sandbox user, the stand-in run).


def _no_conditions(m) -> None:  # noqa: ANN001
    """Where this machine has no NVML (no driver), the timing's record says so: nothing was read
    and no window was taken again."""
    record = m.telemetry[CONDITIONS_KEY]
    if gpu_count() == 0:
        assert record["recorded"] is False and record["note"].startswith(f"{NO_NVML} ("), record
        assert record["windows"] > 0


# ----------------------------------------------------------------------------- tests


def test_standin_scores_full_correctness(base: Path, trusted: Path, policy: SandboxPolicy) -> None:
    """The correct stand-in, the rubric's full case list: every check passes, every speedup is
    measured, and the scorer gives every problem its full correctness points."""
    by_id = _run(base, "correct", trusted, _config(policy))
    assert list(by_id) == [*KERNEL_PROBLEMS, "3"]
    rubric = load_rubric("hw4")
    cases = load_cases("hw4")
    for pid in KERNEL_PROBLEMS:
        m = by_id[pid]
        assert m.status == "ok", _describe(m)
        assert [c.case_id for c in m.cases_by("abi")] == [f"abi:{c.id}" for c in cases[pid]]
        assert [c.case_id for c in m.cases_by("binding")] == [f"binding:{c.id}" for c in cases[pid] if binding_eligible(c)]
        assert m.cases_by("abi") and m.cases_by("binding") and all(c.ok for c in m.cases), _describe(m)
        assert m.first_failure is None
        assert _measured(m), (m.figure("student"), m.figure("reference_ops"), m.figure("trusted"))
        # No CUPTI on the CPU stand-in: the kernel time is missing, says why, and costs nothing.
        assert m.kernel_ms is None and "not measured" in m.telemetry["kernel_profile"], m.telemetry
        # measured until clear of the points' thresholds (floor, target), by the generic stopping rule
        spec = next(p for p in rubric.problems if p.id == pid).scoring
        assert m.telemetry["timing_thresholds"] == [spec.speed_floor, spec.target]
        assert m.telemetry["timing_stopped"] in STOP_REASONS
        # where the timing's wall time went, per shape: every variant's requests and the parent's work
        for shape in m.telemetry["timing_shapes"]:
            assert {"custom", "baseline", "reference_ops", "inputs", "verify"} <= set(shape["wall_s"]), shape
            assert all(v >= 0 for v in shape["wall_s"].values()) and shape["wall_s"]["custom"] > 0, shape
            # each trial a window with its record; the bytes its fused op must move beside its figure
            assert len(shape["windows"]) == shape["trials"] and shape[FUSED_BYTES_KEY] > 0, shape
        # no GPU here: no copy peak (nothing is judged impossible) and, without NVML, no conditions
        assert m.telemetry[COPY_PEAK_KEY] == {"error": "not measured: no GPU"}
        _no_conditions(m)
    p3 = by_id["3"]
    assert p3.status == "ok", _describe(p3)
    assert p3.cases_by("binding") and all(c.ok for c in p3.cases_by("binding")), _describe(p3)
    assert {"p3-fused-matches-unfused", "p3-causal-fused", "p3-fused-ops-called"} <= {c.case_id for c in p3.cases_by("binding")}
    assert p3.figure("student") is not None and p3.figure("student").trials >= P3.min_pairs
    assert p3.telemetry["problem3"]["timing"]["thresholds"] == [1.0, 1.1]
    assert p3.telemetry["problem3"]["timing"]["stop"] in STOP_REASONS
    assert len(p3.telemetry["problem3"]["timing"]["windows"]) == p3.figure("student").trials
    _no_conditions(p3)

    score = score_run(rubric, list(by_id.values()))
    for problem in rubric.problems:
        s = score.problem(problem.id)
        assert s.status == "passed", s.reasons
        assert s.correctness_points == problem.scoring.correctness_points, s.reasons
        assert s.speedup is not None
    assert score.total >= sum(p.scoring.correctness_points for p in rubric.problems)


def test_ignored_mask_fails_only_softmax_forward(base: Path, trusted: Path, policy: SandboxPolicy,
                                                 short_cases: dict) -> None:
    by_id = _run(base, "break-mask", trusted, _config(policy), ("BREAK_MASK",))
    m = by_id["1.1"]
    assert m.status == "ok"
    failed_abi = [c for c in m.cases_by("abi") if not c.ok]
    assert failed_abi, _describe(m)
    assert m.first_failure is not None and m.first_failure.case_id.startswith("abi:")
    assert "out of tolerance" in m.first_failure.message and m.first_failure.max_err > 0.01
    assert m.figure("student") is None  # no timing for a wrong kernel
    for pid in ("1.2", "2.1", "2.2", "3"):
        assert by_id[pid].status == "ok" and not by_id[pid].failed_cases, _describe(by_id[pid])
    for pid in ("1.2", "2.1", "2.2"):
        m = by_id[pid]
        assert _measured(m), (m.telemetry.get("timing_dropped"), m.figures, m.log_tail[-500:])

    rubric = load_rubric("hw4")
    score = score_run(rubric, list(by_id.values()))
    assert score.problem("1.1").status == "failed" and score.problem("1.1").points == 0
    for problem in rubric.problems[1:]:
        assert score.problem(problem.id).correctness_points == problem.scoring.correctness_points


def test_crash_in_softmax_backward_is_reported_with_output(base: Path, trusted: Path, policy: SandboxPolicy,
                                                           short_cases: dict) -> None:
    by_id = _run(base, "crash", trusted, _config(policy), ("CRASH_SOFTMAX_BW",))
    m = by_id["1.2"]
    assert m.status == "ok" and m.figure("student") is None, _describe(m)
    crashed = m.first_failure
    assert crashed is not None and crashed.case_id == "abi:" + short_cases["1.2"][0].id, _describe(m)
    assert "crashed: signal" in crashed.message and "SIGABRT" in crashed.message
    assert "CRASH_SOFTMAX_BW: aborting" in crashed.message and "seed " in crashed.message
    for pid in ("1.1", "2.1", "2.2"):
        assert by_id[pid].status == "ok" and not by_id[pid].failed_cases, _describe(by_id[pid])
        m = by_id[pid]
        assert _measured(m), (m.telemetry.get("timing_dropped"), m.figures, m.log_tail[-500:])
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    assert score.problem("1.2").status == "failed" and score.problem("1.2").points == 0
    assert any("aborting" in r for r in score.problem("1.2").reasons)


def test_pipeline_grades_a_zip_of_the_standin(base: Path, trusted: Path, policy: SandboxPolicy,
                                              short_cases: dict) -> None:
    """unpack -> stage -> build (fake nvcc: g++ for the stand-in sources) -> GPU stage -> scored."""
    source = cpu_standin.make_cpu_submission(base / "zip-source" / "llmsys_hw4")
    archive = base / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    nvcc = cpu_standin.write_fake_nvcc(base / "bin" / "nvcc")
    config = PipelineConfig(UnpackLimits(200 * MiB, 50 * MiB, 5000, 24, 100.0),
                            Toolchain(nvcc=str(nvcc), flags=("--shared", "-Xcompiler", "-fPIC")), None, 2, 65536)
    stage_config = _config(policy)
    seen: dict[str, Path] = {}

    def gpu_stage(rubric, staged: Path, reference: Path, work: Path, problems: tuple[str, ...]):
        # `reference` is our kit built by the pipeline (with the fake nvcc: empty libraries and
        # the real pycuda binding), unusable on a CPU: the trusted stand-in plays its part.
        seen.update(staged=staged, reference=reference, problems=problems)
        return run_gpu_stage(rubric, staged, trusted, work, dataclasses.replace(stage_config, problems=problems))

    rubric = load_rubric("hw4")
    stages: list[str] = []
    outcome = grade_submission(archive, rubric, base / "job", config, on_stage=stages.append, gpu_stage=gpu_stage)
    assert outcome.state == RunState.scored, outcome.message
    assert stages == ["unpack", "stage", "build", "run"]
    assert seen["problems"] == tuple(p.id for p in rubric.problems)  # every kernel built: all of them
    assert (seen["staged"] / "minitorch" / "cuda_kernels" / "softmax_kernel.so").is_file()
    assert outcome.score == pytest.approx(sum(p.points for p in outcome.problems))
    assert [p.problem_id for p in outcome.problems] == [p.id for p in rubric.problems]
    for p in outcome.problems:
        assert p.status == "passed", (p.problem_id, p.message)
        assert p.details["score"]["correctness_points"] == next(
            r.scoring.correctness_points for r in rubric.problems if r.id == p.problem_id)
    report = outcome.report
    assert report is not None and report["score"] == outcome.score
    assert [t["number"] for t in report["tests"]] == [p.id for p in rubric.problems]
    assert all(t["status"] == "passed" for t in report["tests"])
    assert outcome.stages["run"].status == "ok" and "1.1: ok" in outcome.stages["run"].log


def test_stage_runs_as_the_sandbox_user(base: Path, trusted: Path, short_cases: dict) -> None:
    """The same grading with children dropped to 'nobody' (what production does as root)."""
    user, why = _sandbox_user(base)
    if user is None:
        pytest.skip(f"children cannot run as 'nobody' here: {why}")
    config = GpuStageConfig(limits=LIMITS, policy=SandboxPolicy(user=user), timing=TIMING, problem3=P3,
                            seed=7, problems=("2.1", "3"))
    by_id = _run(base, "as-nobody", trusted, config)
    assert by_id["2.1"].status == "ok" and not by_id["2.1"].failed_cases, _describe(by_id["2.1"])
    assert by_id["3"].status == "ok" and not by_id["3"].failed_cases, _describe(by_id["3"])
    assert (base / "as-nobody" / "work" / "problem-2.1").stat().st_uid == pwd.getpwnam("nobody").pw_uid


def test_a_failing_reference_child_costs_the_submission_nothing(base: Path, policy: SandboxPolicy,
                                                                short_cases: dict) -> None:
    """Our kit's child dying (here: its backend exits on import) drops the kit's figure, and a
    kit without the reference basic ops drops that figure too: the student's problems stay
    `ok`, timed against their own basic ops, flagged for staff, for every problem."""
    broken = cpu_standin.make_cpu_submission(base / "broken-trusted" / "kit")
    ops = broken / "minitorch" / "cuda_kernel_ops.py"
    ops.write_text("import os\nos._exit(3)\n" + ops.read_text())
    config = GpuStageConfig(limits=LIMITS, policy=policy, timing=TIMING, problem3=P3, seed=5, problems=("2.1", "2.2"))
    by_id = _run(base, "broken-trusted", broken, config)
    for pid in ("2.1", "2.2"):
        m = by_id[pid]
        assert m.status == "ok" and not m.failed_cases, _describe(m)
        assert m.figure("student") is not None and m.figure("trusted") is None and m.figure("reference_ops") is None
        dropped = m.telemetry["timing_dropped"]
        assert "its MiniTorch's basic tensor ops failed" in dropped["kit"], dropped  # found while warming it
        assert "no library of reference basic ops" in dropped["reference_ops"], dropped
    score = score_run(load_rubric("hw4"), list(by_id.values()))
    p21 = score.problem("2.1")
    assert p21.correctness_points == 14 and p21.figure == "student"
    assert any("reference basic ops could not be measured (no library" in f for f in p21.flags), p21.flags


def _kernel_children(work: Path) -> dict[str, str]:
    """problem id (or "<id>-profile") -> process state letter of each live kernel-problem child under `work`."""
    states = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if cwd.parent == work and cwd.name.startswith("problem-"):
            states[cwd.name.removeprefix("problem-")] = stat.rsplit(")", 1)[1].split()[0]
    return states


def test_checks_overlap_and_only_the_timed_child_runs(base: Path, trusted: Path, policy: SandboxPolicy,
                                                       short_cases: dict) -> None:
    """All four children, their kernel-profile children and their timing children are up
    during the checks; when a problem's timing starts, the checking and profiling children are
    gone and every timing child still waiting for its turn is stopped (T), so nothing else of
    the submission runs beside a timing. The verdicts are reported once, between the two: every
    problem checked, none timed yet, all four still to be timed (the two-step result)."""
    submission = cpu_standin.make_cpu_submission(base / "frozen" / "submission")
    work = base / "frozen" / "work"
    seen: dict[str, dict[str, str]] = {}
    verdicts: list[tuple[list[tuple[str, bool, bool]], frozenset[str], int]] = []

    def checked(ms: list, timed: frozenset[str]) -> None:
        verdicts.append(([(m.problem_id, bool(m.cases) and not m.failed_cases, m.figure("student") is None) for m in ms],
                         timed, len(seen)))

    measurements = run_gpu_stage(load_rubric("hw4"), submission, trusted, work,
                                 _config(policy, problems=KERNEL_PROBLEMS),
                                 StageProgress(problem=lambda pid: seen.setdefault(pid, _kernel_children(work)),
                                               checked=checked))
    assert verdicts == [([(pid, True, True) for pid in KERNEL_PROBLEMS], frozenset(KERNEL_PROBLEMS), 1)], verdicts
    assert all(m.status == "ok" and m.figure("student") is not None for m in measurements), [_describe(m) for m in measurements]
    profilers = {f"{pid}-profile" for pid in KERNEL_PROBLEMS}
    timers = [f"{pid}-timing" for pid in KERNEL_PROBLEMS]
    assert set(seen["1.1"]) == set(KERNEL_PROBLEMS) | profilers | set(timers), seen  # phase 1: every child is up
    for i, pid in enumerate(KERNEL_PROBLEMS[1:], start=1):  # each timing: its own and the later ones frozen
        assert set(seen[pid]) == set(timers[i:]) and all(v == "T" for v in seen[pid].values()), (pid, seen[pid])


# The stand-in's fused softmax raises on its first call in a child whose folder is a timing
# child's ("problem-<id>-timing"), and leaves a mark there: code that fails only while that
# child is warmed, beside the checks.
FAILS_WHILE_WARMED = '''
import pathlib as _pathlib

_warm_left = [_pathlib.Path.cwd().name.endswith("-timing")]
_fused_fw = CudaKernelOps.attn_softmax_fw


def _fails_once(inp, mask, mask_future=False):
    if _warm_left[0]:
        _warm_left[0] = False
        (_pathlib.Path.cwd() / "raised-while-warmed").write_text("yes")
        raise RuntimeError("only the first call in the timing child fails")
    return _fused_fw(inp, mask, mask_future)


CudaKernelOps.attn_softmax_fw = staticmethod(_fails_once)
'''


def test_a_timing_child_that_fails_while_warmed_is_replaced(base: Path, trusted: Path, policy: SandboxPolicy,
                                                            short_cases: dict) -> None:
    """The warm-up of a problem's timing child runs the submission's code beside the checks;
    if it fails there, the child is closed and the timing gets a fresh one: the problem is
    timed as if nothing happened (the failure is not the student's to pay twice, and one that
    repeats fails the timing itself)."""
    ops = cpu_standin.OPS_MODULE + FAILS_WHILE_WARMED
    by_id = _run(base, "fails-warmed", trusted, _config(policy, problems=("1.1",)),
                 files={"minitorch/cuda_kernel_ops.py": ops})
    m = by_id["1.1"]
    assert (base / "fails-warmed" / "work" / "problem-1.1-timing" / "raised-while-warmed").is_file()
    assert m.status == "ok" and not m.failed_cases, _describe(m)
    assert _measured(m), (m.figure("student"), m.figure("reference_ops"), m.figure("trusted"))
    assert "timing_warm" in m.telemetry["seconds"] and m.telemetry["seconds"]["timing"] > 0


def test_a_rubric_outside_rubrics_is_graded_by_its_own_cases(base: Path, trusted: Path, policy: SandboxPolicy,
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A course's copy of hw4's rubric kept in a folder of its own (KG_RUBRIC_DIRS) with a case
    list of its own: the stage checks the cases of that file, not those of rubrics/hw4/rubric.yaml."""
    import yaml
    from small_timing import SMALL_TIMING_CASES

    from rubrics.hw4 import speed

    for pid, case in SMALL_TIMING_CASES.items():
        monkeypatch.setitem(speed.TIMING_CASES, pid, [case])
    data = yaml.safe_load(load_rubric("hw4").path.read_text())  # type: ignore[union-attr]
    kept = data["cases"]["2.1"]
    data["cases"]["2.1"] = {"kind": kept["kind"], "public": kept["public"][:1]}  # one case, and no hidden ones
    data["starter"] = str(load_rubric("hw4").starter_dir)
    (tmp_path / "hw4.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    own = load_rubric("hw4", tmp_path)
    assert own.path == (tmp_path / "hw4.yaml").resolve()
    [case] = load_cases(own.path)["2.1"]
    submission = cpu_standin.make_cpu_submission(base / "own-rubric" / "submission")
    [m] = run_gpu_stage(own, submission, trusted, base / "own-rubric" / "work", _config(policy, problems=("2.1",)))
    assert [c.case_id for c in m.cases_by("abi")] == [f"abi:{case.id}"], _describe(m)
    assert len(load_cases("hw4")["2.1"]) > 1  # the project's own list is longer
