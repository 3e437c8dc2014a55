"""grader.gradescope_pack: the autograder zip's layout, and its run_autograder run for real on
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

from grader.gradescope_pack import build_autograder_zip
from worker.rubric import load_rubric
from worker.starter_kit import starter_files

RUBRIC = load_rubric("hw4")


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_autograder_zip(RUBRIC, tmp_path_factory.mktemp("pack") / "autograder.zip", cuda_arch="sm_90")


def test_layout(autograder_zip: Path) -> None:
    with zipfile.ZipFile(autograder_zip) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        env = zf.read("kernelgrade.env").decode()
        run = zf.read("run_autograder").decode()
    assert {"setup.sh", "run_autograder", "kernelgrade.env", "pyproject.toml", "README.md", "rubrics/hw4.yaml",
            "grader/gradescope_run.py", "worker/pipeline.py", "worker/report.py", "worker/hw4/grade.py"} <= names
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert "KG_CUDA_ARCH=sm_90" in env and "KG_AUTOGRADER_ASSIGNMENT=hw4" in env
    assert '"$ROOT/results/results.json"' in run and '"$ROOT/submission"' in run
    kit = {f"starter/hw4/{p.as_posix()}" for p in starter_files(RUBRIC.starter_dir)}
    assert kit <= names and "starter/hw4/src/softmax_kernel.cu" in kit
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docker/", "var/"))]


def test_zip_is_reproducible(autograder_zip: Path, tmp_path: Path) -> None:
    again = build_autograder_zip(RUBRIC, tmp_path / "again.zip", cuda_arch="sm_90")
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
