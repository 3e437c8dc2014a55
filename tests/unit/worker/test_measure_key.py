"""The measurement key (worker.measure_key) changes with every input a measurement depends on and
with nothing else: a file outside the rubric's student files, the folder things sit in and the
host's name leave it alone; a byte of a kernel, the rubric file, the kit, nvcc's version or
flags, Python's version and the GPU model each change it. And the pipeline asks its Reuse after
staging, before the build: a run found measured before is never built."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from worker.build import Toolchain, ToolchainFault
from worker.measure_key import measurement_key
from worker.pipeline import Outcome, PipelineConfig, Reuse, grade_submission
from worker.rubric import Rubric, load_rubric
from worker.stage import stage_submission
from worker.states import RunState
from worker.unpack import UnpackLimits

VECADD = Path(__file__).resolve().parents[2] / "assignments" / "vecadd"
MiB = 1024 * 1024
TOOLCHAIN = {"nvcc": "Cuda compilation tools, release 13.0, V13.0.88", "nvcc_flags": ["-O2", "-arch=sm_90"],
             "python": "3.12.3", "host": "worker-1"}
CONTEXT = {"gpu_model": "NVIDIA H100 80GB HBM3", "targets": None, "seed": None}


def _student(tmp: Path, name: str, edits: dict[str, str] | None = None) -> Path:
    """A submission folder: the starter's files, edited."""
    root = tmp / name / "vecadd"
    shutil.copytree(VECADD / "starter", root)
    for rel, text in (edits or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _key(tmp: Path, name: str, rubric: Rubric, edits: dict[str, str] | None = None,
         toolchain: dict[str, Any] = TOOLCHAIN, context: dict[str, Any] = CONTEXT) -> str:
    staged = stage_submission(_student(tmp, name, edits), rubric, tmp / name / "staged")
    return measurement_key(staged.root, rubric, toolchain, context)


@pytest.fixture
def rubric() -> Rubric:
    return load_rubric("vecadd", search=[VECADD.parent])


def _copied_rubric(tmp: Path, edit: tuple[str, str, str] | None = None) -> Rubric:
    """vecadd's folder copied elsewhere (`edit`: a file of it, and a text replaced), loaded from there."""
    folder = tmp / "copy" / "vecadd"
    shutil.copytree(VECADD, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        rel, old, new = edit
        text = (folder / rel).read_text()
        assert old in text
        (folder / rel).write_text(text.replace(old, new))
    return load_rubric("vecadd", search=[folder.parent])


def test_the_same_inputs_give_the_same_key_and_a_readme_changes_nothing(tmp_path: Path, rubric: Rubric) -> None:
    first = _key(tmp_path, "a", rubric)
    assert len(first) == 64
    assert _key(tmp_path, "b", rubric) == first
    assert _key(tmp_path, "c", rubric, {"README.md": "my notes\n", "tests/test_mine.py": "x = 1\n"}) == first
    assert _key(tmp_path, "d", rubric, toolchain={**TOOLCHAIN, "host": "worker-2"}) == first


def test_one_changed_byte_of_a_kernel_changes_the_key(tmp_path: Path, rubric: Rubric) -> None:
    source = (VECADD / "starter" / "src" / "vecadd.cu").read_text()
    changed = source.replace("a[i] + b[i]", "a[i] + b[i] ")
    assert changed != source
    assert _key(tmp_path, "a", rubric) != _key(tmp_path, "b", rubric, {"src/vecadd.cu": changed})
    # a new file the rubric takes (src/*.cu) is in the staged tree too
    assert _key(tmp_path, "c", rubric) != _key(tmp_path, "d", rubric, {"src/extra.cu": "// mine\n"})


def test_the_rubric_and_the_kit_are_in_the_key(tmp_path: Path, rubric: Rubric) -> None:
    ours = _key(tmp_path, "a", rubric)
    assert _key(tmp_path, "b", _copied_rubric(tmp_path / "same")) == ours  # where it lies is not in it
    retitled = _copied_rubric(tmp_path / "title", ("rubric.yaml", "title: Vector add (vec_add)", "title: Vector add"))
    assert _key(tmp_path, "c", retitled) != ours
    # our reference's solution region: stripped from the starter, so the staged tree is the same
    kit = _copied_rubric(tmp_path / "kit", ("starter/src/vecadd.cu", "out[i] = a[i] + b[i];", "out[i] = b[i] + a[i];"))
    assert _key(tmp_path, "d", kit) != ours
    plugin = _copied_rubric(tmp_path / "plugin", ("plugin.py", "ATOL, RTOL = 1e-6, 1e-6", "ATOL, RTOL = 1e-5, 1e-6"))
    assert _key(tmp_path, "e", plugin) != ours


@pytest.mark.parametrize("change", [
    {"nvcc": "Cuda compilation tools, release 12.8, V12.8.93"},
    {"nvcc_flags": ["-O3", "-arch=sm_90"]},
    {"python": "3.13.1"},
])
def test_the_toolchain_is_in_the_key(tmp_path: Path, rubric: Rubric, change: dict[str, Any]) -> None:
    assert _key(tmp_path, "a", rubric) != _key(tmp_path, "b", rubric, toolchain={**TOOLCHAIN, **change})


@pytest.mark.parametrize("change", [{"gpu_model": "NVIDIA H200"}, {"targets": {"1": 2.0}}, {"seed": 7}])
def test_the_gpu_model_and_settings_are_in_the_key(tmp_path: Path, rubric: Rubric, change: dict[str, Any]) -> None:
    assert _key(tmp_path, "a", rubric) != _key(tmp_path, "b", rubric, context={**CONTEXT, **change})


def _zip(tmp: Path) -> Path:
    root = _student(tmp, "zipped")
    archive = tmp / "vecadd.zip"
    shutil.make_archive(str(archive.with_suffix("")), "zip", root.parent, "vecadd")
    return archive


def _config(tmp: Path) -> PipelineConfig:
    # An nvcc that does not exist: a build would fail (a toolchain fault), so a run that gets
    # past the look-up would say so
    return PipelineConfig(UnpackLimits(200 * MiB, 50 * MiB, 5000, 24, 100.0),
                          Toolchain(str(tmp / "no-nvcc"), ("-O2",)), None, 1, 65536)


def test_the_pipeline_asks_after_staging_and_a_found_run_is_not_built(tmp_path: Path, rubric: Rubric) -> None:
    asked: list[tuple[str, list[str]]] = []
    earlier = Outcome(state=RunState.scored, score=10.0, message="measured before", reused_from=3)

    def lookup(key: str, so_far: Outcome) -> Outcome:
        asked.append((key, list(so_far.stages)))
        return earlier

    def stage(*_args: object) -> list[Any]:
        raise AssertionError("the GPU stage ran")

    outcome = grade_submission(_zip(tmp_path), rubric, tmp_path / "job", _config(tmp_path), gpu_stage=stage,
                               reuse=Reuse(CONTEXT, lookup))
    assert outcome is earlier
    [(key, stages)] = asked
    assert stages == ["unpack", "stage"] and outcome.measure_key == key and len(key) == 64
    assert not (tmp_path / "job" / "build").exists()


def test_without_a_stage_or_a_lookup_nothing_is_reused(tmp_path: Path, rubric: Rubric) -> None:
    """No GPU stage: no look-up (nothing would be scored). A Reuse without a look-up (the setting
    off, a re-grade) measures: both reach the build, whose missing nvcc is a toolchain fault."""
    def lookup(_key: str, _so_far: Outcome) -> Outcome:
        raise AssertionError("looked up")

    archive = _zip(tmp_path)
    with pytest.raises(ToolchainFault):
        grade_submission(archive, rubric, tmp_path / "job-a", _config(tmp_path), reuse=Reuse(CONTEXT, lookup))
    with pytest.raises(ToolchainFault):
        grade_submission(archive, rubric, tmp_path / "job-b", _config(tmp_path), gpu_stage=lambda *_a: [],
                         reuse=Reuse(CONTEXT))
