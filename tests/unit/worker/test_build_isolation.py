"""Build failures and missing files isolate (worker.pipeline, the rubric's `needs:`): a kernel
that does not compile, or whose source is missing, leaves out only the problems that need it,
each with the reason; the others go to the GPU stage, with an empty library in place of the
failed one. Real nvcc on tiny sources (no GPU needed), a GPU-stage stand-in that records what
it was asked to run."""
from __future__ import annotations

import ctypes
import dataclasses
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_build import BROKEN, FLAGS, NVCC, call_int, needs_nvcc
from test_build_sandbox import COMPILE_FOREVER

from grader.runs import engine_config
from grader.settings import Settings
from rubrics.hw4 import grade as hw4_grade
from worker.assignment import StageConfig
from worker.build import Toolchain, cuda_include_dirs
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.pipeline import Outcome, PipelineConfig, grade_submission
from worker.rubric import RubricError, find_rubric, load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy
from worker.stage import stage_submission
from worker.states import ErrorClass, RunState
from worker.unpack import UnpackLimits

MiB = 1 << 20
RUBRIC = load_rubric("hw4")
ALL = tuple(p.id for p in RUBRIC.problems)
KERNEL_SOURCES = {k.name: k.source for k in RUBRIC.kernels}
POLICY = SandboxPolicy(user="nobody" if os.geteuid() == 0 else None)
OK = CaseOutcome("c", (2, 8), True, 0.0)


def good(name: str) -> str:
    return f'extern "C" int kg_{name}() {{ return 7; }}\n'


def submission_zip(dest: Path, drop: tuple[str, ...] = (), replace: dict[str, str] | None = None) -> Path:
    """A zip under `llmsys_hw4/` of the three kernel sources (tiny, each exporting kg_<name>),
    less the kernels in `drop`, with `replace` (kernel name -> source text) applied."""
    sources = {name: good(name) for name in KERNEL_SOURCES if name not in drop} | (replace or {})
    with zipfile.ZipFile(dest, "w") as zf:
        for name, text in sources.items():
            zf.writestr(f"llmsys_hw4/{KERNEL_SOURCES[name]}", text)
        zf.writestr("llmsys_hw4/README.md", "my hw4\n")
    return dest


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache for the module: our reference kit compiles once."""
    return tmp_path_factory.mktemp("build-cache")


def config(cache: Path, file_budget_s: float = 180.0) -> PipelineConfig:
    assert NVCC is not None
    toolchain = Toolchain(NVCC, (*RUBRIC.nvcc_flags, FLAGS[-1]), cuda_include_dirs())
    return PipelineConfig(UnpackLimits(200 * MiB, 50 * MiB, 5000, 24, 100.0), toolchain, cache, 3, 65536,
                          build_limits=SandboxLimits(wall_s=file_budget_s, cpu_s=180, memory_bytes=4096 * MiB,
                                                     max_processes=64, file_size_bytes=256 * MiB),
                          build_policy=POLICY)


@dataclasses.dataclass
class RecordingStage:
    """Stands in for the GPU stage: records the problems it is asked to run, loads every
    library as the course's MiniTorch does at import, and measures each asked problem as
    passing."""

    asked: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    libraries: dict[str, ctypes.CDLL] = dataclasses.field(default_factory=dict)

    def __call__(self, rubric, staged: Path, reference: Path, work: Path,
                 problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        self.asked.append(problems)
        for k in rubric.kernels:  # raises OSError if one is absent: the import would fail
            self.libraries[k.name] = ctypes.CDLL(str(staged / k.output))
        return [ProblemMeasurement(pid, routes={"abi": [OK], "binding": [OK]}) for pid in problems]


def grade(tmp_path: Path, archive: Path, cache: Path, stage: RecordingStage | None) -> Outcome:
    return grade_submission(archive, RUBRIC, tmp_path / "job", config(cache), gpu_stage=stage)


def by_id(outcome: Outcome) -> dict:
    return {p.problem_id: p for p in outcome.problems}


# ---------------------------------------------------------------- the rubric's needs:


def test_hw4_declares_what_each_problem_needs() -> None:
    needs = {p.id: set(p.needs) for p in RUBRIC.problems}
    assert needs == {"1.1": {"combine", "softmax_kernel"}, "1.2": {"combine", "softmax_kernel"},
                     "2.1": {"combine", "layernorm_kernel"}, "2.2": {"combine", "layernorm_kernel"},
                     "3": {"combine", "softmax_kernel", "layernorm_kernel"}}
    (combine,) = [k for k in RUBRIC.kernels if k.name == "combine"]
    assert combine.missing_hint == "copy it from your previous assignment"


def _rubric_with(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(find_rubric("hw4").read_text())
    edit(data)
    (tmp_path / "hw4.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


@pytest.mark.parametrize("needs, error", [
    (["combine", "softmax"], r"problem 1\.1: needs unknown kernels \['softmax'\] \(kernels: combine, softmax_kernel"),
    ("combine", "problem 1.1: needs must be a list of kernel names"),
    ([1], "problem 1.1: needs must be a list of kernel names"),
    (["combine", "combine"], "problem 1.1: needs lists a kernel twice"),
])
def test_bad_needs_are_rubric_errors(tmp_path: Path, needs: object, error: str) -> None:
    folder = _rubric_with(tmp_path, lambda d: d["problems"][0].__setitem__("needs", needs))
    with pytest.raises(RubricError, match=error):
        load_rubric("hw4", folder)


def test_a_problem_without_needs_needs_every_kernel(tmp_path: Path) -> None:
    folder = _rubric_with(tmp_path, lambda d: d["problems"][0].pop("needs"))
    rubric = load_rubric("hw4", folder)
    assert rubric.problems[0].needs == ("combine", "softmax_kernel", "layernorm_kernel")
    assert rubric.problems[1].needs == ("combine", "softmax_kernel")


def test_kernels_must_have_distinct_names_and_student_sources(tmp_path: Path) -> None:
    folder = _rubric_with(tmp_path, lambda d: d["kernels"][1].__setitem__("name", "combine"))
    with pytest.raises(RubricError, match="two kernels share a name"):
        load_rubric("hw4", folder)
    folder = _rubric_with(tmp_path, lambda d: d["kernels"][0].__setitem__("source", "kit/combine.cu"))
    with pytest.raises(RubricError, match="kernel combine: its source kit/combine.cu is not among student_files"):
        load_rubric("hw4", folder)


# ---------------------------------------------------------------- staging


def test_a_missing_kernel_source_is_never_taken_from_our_kit(tmp_path: Path) -> None:
    """Our kit's src/combine.cu has no solution regions: the stripped starter holds the whole
    file. A submission without it must not build ours."""
    student = tmp_path / "student"
    (student / "src").mkdir(parents=True)
    (student / "src" / "softmax_kernel.cu").write_text(good("softmax_kernel"))
    staged = stage_submission(student, RUBRIC, tmp_path / "staged")
    assert (RUBRIC.starter_dir / "src" / "combine.cu").stat().st_size > 1000
    assert staged.missing == ("src/combine.cu", "src/layernorm_kernel.cu")
    assert not (staged.root / "src" / "combine.cu").exists()
    assert not (staged.root / "src" / "layernorm_kernel.cu").exists()
    assert (staged.root / "src" / "softmax_kernel.cu").read_text() == good("softmax_kernel")
    assert (staged.root / "src" / "includes").is_dir()  # the rest of the starter is there


# ---------------------------------------------------------------- the pipeline


@needs_nvcc
def test_a_kernel_that_does_not_compile_leaves_out_only_the_problems_needing_it(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", replace={"softmax_kernel": BROKEN})
    stage = RecordingStage()
    outcome = grade(tmp_path, archive, cache, stage)
    assert stage.asked == [("2.1", "2.2")]
    assert outcome.state is RunState.scored and outcome.error_class is None, outcome.message
    problems = by_id(outcome)
    for pid in ("1.1", "1.2", "3"):
        p = problems[pid]
        assert (p.status, p.points, p.max_points) == ("not_run", 0.0, 20.0)
        assert "not graded: src/softmax_kernel.cu did not compile: src/softmax_kernel.cu(3): error" in p.message
        assert "not_declared_anywhere" in p.message and p.message.endswith("; see the build log")
    # Correctness passed, no speedup measured by the stand-in: 14 of 20 each.
    assert [(problems[pid].status, problems[pid].points) for pid in ("2.1", "2.2")] == [("passed", 14.0)] * 2
    assert outcome.score == 28.0
    assert outcome.message == ("Scored 28 / 100. Problems 1.1, 1.2 and 3 not graded: "
                               "src/softmax_kernel.cu did not compile; see the build log.")
    # The report says why, per problem.
    tests = {t["number"]: t for t in outcome.report["tests"]}
    assert tests["1.1"]["score"] == 0 and tests["1.1"]["status"] == "failed"
    output = tests["1.1"]["output"]
    assert "- 1.1: not graded: src/softmax_kernel.cu did not compile: src/softmax_kernel.cu(3)" in output
    assert "; see the build log; 0 of 20 points" in output
    assert tests["2.1"]["score"] == 14 and tests["2.1"]["status"] == "passed"
    # The build log keeps every kernel's log and ends with what was left out.
    log = outcome.stages["build"].log
    assert outcome.stages["build"].status == "failed"
    assert "== combine (ok" in log and "== layernorm_kernel (ok" in log and "== softmax_kernel (FAILED" in log
    assert log.index("not_declared_anywhere") < log.index("== not graded because of the build")
    assert log.endswith("== not graded because of the build\nsrc/softmax_kernel.cu did not compile: not graded: "
                        "1.1, 1.2 and 3\nin place of minitorch/cuda_kernels/softmax_kernel.so: an empty library "
                        "(it exports nothing), so that code loading every library still loads for the problems that do "
                        "not need it\n")
    assert "in place of minitorch/cuda_kernels/softmax_kernel.so: an empty library" in log
    assert "1.1: not graded: src/softmax_kernel.cu did not compile" in outcome.stages["run"].log
    # The GPU stage saw the student's libraries and an empty stand-in that exports nothing.
    staged = tmp_path / "job" / "staged"
    assert call_int(staged / "minitorch/cuda_kernels/layernorm_kernel.so", "kg_layernorm_kernel", tmp_path) == 7
    assert call_int(staged / "minitorch/cuda_kernels/combine.so", "kg_combine", tmp_path) == 7
    with pytest.raises(AttributeError, match="undefined symbol"):
        stage.libraries["softmax_kernel"].kg_softmax_kernel  # noqa: B018


@needs_nvcc
def test_a_missing_combine_is_named_on_every_problem_and_is_a_build_error(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", drop=("combine",))
    stage = RecordingStage()
    outcome = grade(tmp_path, archive, cache, stage)
    assert stage.asked == []
    expected = "src/combine.cu is missing: copy it from your previous assignment; every problem needs it"
    assert (outcome.state, outcome.error_class, outcome.message) == (RunState.failed, ErrorClass.build_error, expected)
    assert [(p.problem_id, p.status, p.message) for p in outcome.problems] == [
        (pid, "not_run", f"not graded: {expected}") for pid in ALL]
    assert "missing (never taken from the starter, so not built): src/combine.cu" in outcome.stages["stage"].log
    assert "missing kernel source: src/combine.cu" in outcome.stages["build"].log
    assert not (tmp_path / "job" / "staged" / "minitorch/cuda_kernels/combine.so").exists()  # ours was not built


@needs_nvcc
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu-stage", "no-gpu-stage"])
def test_a_missing_layernorm_keeps_the_softmax_problems(tmp_path: Path, cache: Path, gpu: bool) -> None:
    archive = submission_zip(tmp_path / "up.zip", drop=("layernorm_kernel",))
    stage = RecordingStage() if gpu else None
    outcome = grade(tmp_path, archive, cache, stage)
    problems = by_id(outcome)
    why = "not graded: src/layernorm_kernel.cu is missing; problems 2.1, 2.2 and 3 need it"
    for pid in ("2.1", "2.2", "3"):
        assert problems[pid].status == "not_run" and problems[pid].message.startswith(why), problems[pid].message
    if stage is not None:
        assert stage.asked == [("1.1", "1.2")]
        assert outcome.state is RunState.scored and outcome.score == 28.0
        assert [problems[pid].status for pid in ("1.1", "1.2")] == ["passed", "passed"]
    else:
        assert outcome.state is RunState.built and outcome.error_class is None
        assert outcome.message == ("Problems 2.1, 2.2 and 3 not graded: src/layernorm_kernel.cu is missing; see the "
                                   "build log. This worker has no GPU stage (no GPU, or GPU grading is off), so no "
                                   "score was given.")
        assert [problems[pid].message for pid in ("1.1", "1.2")] == ["not graded: no GPU stage on this worker"] * 2
        assert (tmp_path / "job/staged/minitorch/cuda_kernels/layernorm_kernel.so").is_file()  # the stand-in


@needs_nvcc
def test_when_no_problem_is_left_the_first_failure_is_the_build_error(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", replace={"softmax_kernel": BROKEN, "layernorm_kernel": "oops;\n"})
    stage = RecordingStage()
    outcome = grade(tmp_path, archive, cache, stage)
    assert stage.asked == []
    assert outcome.state is RunState.failed and outcome.error_class is ErrorClass.build_error
    assert outcome.message.startswith("softmax_kernel did not compile: src/softmax_kernel.cu(3): error")
    assert outcome.message.endswith("(and 1 more file(s) failed; see the build log)")
    three = by_id(outcome)["3"].message
    assert "src/softmax_kernel.cu did not compile" in three and "; and src/layernorm_kernel.cu did not compile" in three
    assert by_id(outcome)["2.1"].message.startswith("not graded: src/layernorm_kernel.cu did not compile: ")


def test_the_per_file_budget_is_the_build_sandboxs_wall_time_under_the_nvcc_ceiling() -> None:
    def wall(file_timeout_s: float | None = None, **given: float) -> float:
        build = {} if file_timeout_s is None else {"file_timeout_s": file_timeout_s}
        return engine_config.pipeline_config(Settings(build=build, **given), RUBRIC).build_limits.wall_s

    assert Settings().build.file_timeout_s < Settings().nvcc_timeout_s
    assert wall() == Settings().build.file_timeout_s
    assert wall(3) == 3
    assert wall(500, nvcc_timeout_s=300) == 300


@needs_nvcc
def test_a_compile_time_bomb_fails_its_kernel_at_the_per_file_budget_in_words(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", replace={"softmax_kernel": COMPILE_FOREVER})
    outcome = grade_submission(archive, RUBRIC, tmp_path / "job", config(cache, file_budget_s=3.0),
                               gpu_stage=RecordingStage())
    assert outcome.toolchain["build_seconds"]["softmax_kernel"] < 3.0 + 10  # the build slot is free again
    why = ("src/softmax_kernel.cu did not finish compiling within 3 s, the per-file budget; a whole build of "
           "the course's kernels normally takes well under that. Look for template recursion or huge unrolled loops.")
    problems = by_id(outcome)
    for pid in ("1.1", "1.2", "3"):
        assert problems[pid].status == "not_run" and problems[pid].message == f"not graded: {why}"
    assert outcome.message == ("Scored 28 / 100. Problems 1.1, 1.2 and 3 not graded: src/softmax_kernel.cu did not "
                               "finish compiling within 3 s, the per-file budget; see the build log.")
    assert "it ran past the wall-time limit" in outcome.stages["build"].log


@needs_nvcc
def test_a_bomb_in_every_problems_kernel_is_the_build_error_in_words(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", replace={"combine": COMPILE_FOREVER})
    outcome = grade_submission(archive, RUBRIC, tmp_path / "job", config(cache, file_budget_s=2.0))
    assert outcome.error_class is ErrorClass.build_error
    assert outcome.message.startswith("src/combine.cu did not finish compiling within 2 s, the per-file budget; ")


@needs_nvcc
def test_a_gpu_stage_answer_for_a_problem_left_out_never_scores(tmp_path: Path, cache: Path) -> None:
    archive = submission_zip(tmp_path / "up.zip", replace={"softmax_kernel": BROKEN})

    def everything(rubric, staged, reference, work, problems):  # type: ignore[no-untyped-def]
        return [ProblemMeasurement(p.id, routes={"abi": [OK], "binding": [OK]}) for p in rubric.problems]

    outcome = grade_submission(archive, RUBRIC, tmp_path / "job", config(cache), gpu_stage=everything)
    assert outcome.score == 28.0 and [by_id(outcome)[pid].points for pid in ALL] == [0, 0, 14, 14, 0]


@needs_nvcc
def test_the_gpu_stage_measures_against_the_calibrated_targets(tmp_path: Path, cache: Path) -> None:
    """Its stopping rule measures until clear of the targets that will score, not the rubric's."""
    seen: dict[str, float | None] = {}

    def record(rubric, staged, reference, work, problems):  # type: ignore[no-untyped-def]
        seen.update({p.id: p.scoring.target for p in rubric.problems})
        return [ProblemMeasurement(pid, routes={"abi": [OK], "binding": [OK]}) for pid in problems]

    outcome = grade_submission(submission_zip(tmp_path / "up.zip"), RUBRIC, tmp_path / "job", config(cache),
                               gpu_stage=record, targets={"1.1": 9.0, "2.1": 13.5})
    assert seen == {"1.1": 9.0, "1.2": 5.5, "2.1": 13.5, "2.2": 3.7, "3": 1.1}
    assert outcome.toolchain["targets_calibrated"] is True


# ---------------------------------------------------------------- the worker's GPU stage


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    seen: list[tuple[str, ...]] = []
    monkeypatch.setattr(engine_config, "gpu_available", lambda _settings: True)
    monkeypatch.setattr(engine_config, "gpu_stage_config", lambda _settings, _piece=None: StageConfig(
        limits=SandboxLimits(wall_s=1, cpu_s=1, memory_bytes=MiB, max_processes=1, file_size_bytes=MiB),
        policy=POLICY))
    monkeypatch.setattr(hw4_grade, "run_gpu_stage",
                        lambda rubric, staged, ref, work, cfg, progress: seen.append(cfg.problems) or [])
    yield seen


def test_the_workers_gpu_stage_runs_only_the_problems_passed(captured: list[tuple[str, ...]], tmp_path: Path) -> None:
    stage = engine_config.gpu_stage_for(Settings(), RUBRIC)
    assert stage is not None
    stage(RUBRIC, tmp_path, tmp_path, tmp_path, ("2.2", "2.1"))
    stage(RUBRIC, tmp_path, tmp_path, tmp_path, ALL)
    assert captured == [("2.1", "2.2"), ALL]  # in the stage's own order
