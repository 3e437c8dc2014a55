"""grader.gradescope.pack: the autograder zip's layout, and its run_autograder run for real on
this machine (nvcc builds the reference kit; without a GPU nothing is scored and results.json
says so in Gradescope's format)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.gradescope.pack import PackError, build_autograder_zip
from worker.rubric import find_rubric, load_rubric
from worker.starter_kit import starter_files

RUBRIC = load_rubric("hw4")
VECADD = Path(__file__).resolve().parents[3] / "assignments" / "vecadd"


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_autograder_zip(find_rubric("hw4"), tmp_path_factory.mktemp("pack") / "autograder.zip", cuda_arch="sm_90")


def test_layout(autograder_zip: Path) -> None:
    with zipfile.ZipFile(autograder_zip) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        env = zf.read("kernelgrade.env").decode()
        run = zf.read("run_autograder").decode()
    assert {"setup.sh", "run_autograder", "kernelgrade.env", "pyproject.toml", "README.md", "rubrics/hw4/rubric.yaml",
            "grader/gradescope/run.py", "worker/pipeline.py", "worker/report.py", "rubrics/hw4/grade.py"} <= names
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert "chmod -R go-rwx starter " in zf_text(autograder_zip, "setup.sh") and "KG_RUBRIC_DIRS" not in env
    assert "KG_CUDA_ARCH=sm_90" in env and "KG_AUTOGRADER_ASSIGNMENT=hw4" in env
    assert '"$ROOT/results/results.json"' in run and '"$ROOT/submission"' in run
    kit = {f"starter/hw4/{p.as_posix()}" for p in starter_files(RUBRIC.starter_dir)}
    assert kit <= names and "starter/hw4/src/softmax_kernel.cu" in kit
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docker/", "var/"))]


def test_zip_is_reproducible(autograder_zip: Path, tmp_path: Path) -> None:
    again = build_autograder_zip(find_rubric("hw4"), tmp_path / "again.zip", cuda_arch="sm_90")
    assert again.read_bytes() == autograder_zip.read_bytes()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_run_autograder_builds_the_reference_kit_and_reports_no_gpu(autograder_zip: Path, tmp_path: Path) -> None:
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as zf:
        zf.extractall(root / "source")
    # as a student uploads it: the kit's files under one folder, build outputs left out
    for rel in starter_files(RUBRIC.starter_dir):
        target = root / "submission" / "llmsys_hw4" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(RUBRIC.starter_dir / rel, target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update(AUTOGRADER_ROOT=str(root), KG_AUTOGRADER_PYTHON=sys.executable, KG_GPU_GRADING="off")
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0.0
    assert "not scored (built)" in results["output"] and "no GPU" in results["output"]
    assert isinstance(results["execution_time"], int)
    assert [t["number"] for t in results["tests"]] == [p.id for p in RUBRIC.problems]
    for test, problem in zip(results["tests"], RUBRIC.problems):
        assert test["max_score"] == problem.points and test["score"] == 0.0
        assert test["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
        assert "no GPU" in test["output"]
    assert (root / "kg-data" / "build-cache").is_dir()  # KG_DATA_DIR defaults inside the autograder folder


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_run_autograder_reports_a_wrong_layout(autograder_zip: Path, tmp_path: Path) -> None:
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder_zip) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / "softmax_kernel.cu").write_text("// only one file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update(AUTOGRADER_ROOT=str(root), KG_AUTOGRADER_PYTHON=sys.executable, KG_GPU_GRADING="off")
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0.0 and "bad_archive" in results["output"]
    assert "src/layernorm_kernel.cu" in results["output"]


def zf_text(archive: Path, name: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        return zf.read(name).decode()


def _run_autograder(archive: Path, root: Path, files: dict[str, str]) -> dict[str, object]:
    """Unpack the autograder as Gradescope does, put `files` in the submission folder, run
    run_autograder with none of this shell's KG_* settings, and return results.json."""
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(root / "source")
    for rel, text in files.items():
        (root / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / rel).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update(AUTOGRADER_ROOT=str(root), KG_AUTOGRADER_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_a_course_assignment_is_packed_with_its_folder(tmp_path: Path) -> None:
    archive = build_autograder_zip(find_rubric("vecadd", search=[VECADD.parent]), tmp_path / "vecadd.zip", cuda_arch="sm_90")
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        env = zf.read("kernelgrade.env").decode()
    folder = {f"assignments/vecadd/{p.as_posix()}" for p in starter_files(VECADD)}
    assert {"assignments/vecadd/rubric.yaml", "assignments/vecadd/plugin.py",
            "assignments/vecadd/starter/src/vecadd.cu"} <= folder <= names
    assert not [n for n in names if n.startswith(("rubrics/", "starter/"))]  # hw4 is not packed along
    assert "KG_AUTOGRADER_ASSIGNMENT=vecadd" in env and """KG_RUBRIC_DIRS='["assignments"]'""" in env
    assert "chmod -R go-rwx assignments " in zf_text(archive, "setup.sh")


def test_a_course_folder_of_rubric_files_is_searched_in_its_own_folder(tmp_path: Path) -> None:
    """A course's rubric kept as a lone <slug>.yaml (not <slug>/rubric.yaml) is found, packed,
    in the folder that holds it."""
    course = tmp_path / "course"
    shutil.copytree(VECADD, course, ignore=shutil.ignore_patterns("__pycache__"))
    (course / "rubric.yaml").rename(course / "vecadd.yaml")
    archive = build_autograder_zip(find_rubric("vecadd", search=[course]), tmp_path / "flat.zip", cuda_arch="sm_90")
    with zipfile.ZipFile(archive) as zf:
        assert "assignments/vecadd/vecadd.yaml" in zf.namelist()
        assert """KG_RUBRIC_DIRS='["assignments/vecadd"]'""" in zf.read("kernelgrade.env").decode()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="run_autograder builds vecadd with nvcc")
@pytest.mark.parametrize("body, points", [(None, 10.0), ("out[i] = a[i] - b[i];", 0.0)])
def test_a_packed_course_assignment_grades_a_submission(tmp_path: Path, body: str | None, points: float) -> None:
    """The packed copy finds its rubric, starter and plug-in by itself (none of this checkout's
    paths), and vecadd's CPU stage scores the submission in Gradescope's format."""
    archive = build_autograder_zip(find_rubric("vecadd", search=[VECADD.parent]), tmp_path / "vecadd.zip", cuda_arch="sm_90")
    source = (VECADD / "starter" / "src" / "vecadd.cu").read_text()
    if body is not None:
        source = source.replace("out[i] = a[i] + b[i];", body)
    results = _run_autograder(archive, tmp_path / "autograder", {"src/vecadd.cu": source})
    assert results["score"] == points, results
    [test] = results["tests"]  # type: ignore[misc]
    assert test["number"] == "1" and test["score"] == points and test["max_score"] == 10.0


def _course_copy(tmp_path: Path, rubric_edit: tuple[str, str]) -> Path:
    course = tmp_path / "course"
    shutil.copytree(VECADD, course / "vecadd")
    rubric = course / "vecadd" / "rubric.yaml"
    rubric.write_text(rubric.read_text().replace(*rubric_edit))
    return rubric


@pytest.mark.parametrize("edit, says", [
    (("starter: starter", "starter: ../kit"), "its starter"),
    (("plugin: plugin.py", "plugin: ../plugin.py"), "its plug-in"),
    (("plugin: plugin.py", "plugin: coursepkg.vecadd"), "not part of kernelgrade"),
])
def test_a_course_assignment_whose_parts_leave_its_folder_is_refused(
    tmp_path: Path, edit: tuple[str, str], says: str,
) -> None:
    rubric = _course_copy(tmp_path, edit)
    shutil.copytree(VECADD / "starter", tmp_path / "course" / "kit")
    shutil.copyfile(VECADD / "plugin.py", tmp_path / "course" / "plugin.py")
    with pytest.raises(PackError, match=says):
        build_autograder_zip(rubric, tmp_path / "out.zip", cuda_arch="sm_90")
    assert not (tmp_path / "out.zip").exists()
