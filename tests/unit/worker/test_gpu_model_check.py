"""A worker named for a GPU model refuses another model's GPU (or none)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from worker.telemetry import gpu_count, gpu_model_mismatch

GRADER = Path(sys.executable).with_name("grader")


def test_names_agree_ignoring_case_punctuation_and_vendor_prefix() -> None:
    assert gpu_model_mismatch("H200", "NVIDIA H200") is None
    assert gpu_model_mismatch("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3") is None
    assert "another model" in (gpu_model_mismatch("H200", "NVIDIA A100-SXM4-80GB") or "")
    assert gpu_model_mismatch("H20", "NVIDIA H200") is not None  # a word prefix is not the model
    assert "sees no GPU" in (gpu_model_mismatch("H200", None) or "")


def test_grader_worker_refuses_to_start_on_the_wrong_gpu(tmp_path: Path) -> None:
    if gpu_count() > 0:
        return  # this check needs a machine without the named model; CI has no GPU
    env = {**os.environ, "KG_DATA_DIR": str(tmp_path), "KG_GPU_MODEL": "NVIDIA H200", "KG_GPU_GRADING": "auto"}
    done = subprocess.run([str(GRADER), "worker"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "sees no GPU" in done.stderr, (done.returncode, done.stderr[-500:])
