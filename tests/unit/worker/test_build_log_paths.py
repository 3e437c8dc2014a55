"""Stage logs stored for a run show no path of the worker (issue 18): not its job folder (nvcc
runs in the submission's folder, its messages rewritten relative to it: worker.build), and
not its install paths in the build commands (worker.pipeline.shown_command), built or from
the cache. Real nvcc on tiny sources, no GPU needed."""
from __future__ import annotations

from pathlib import Path

from test_build import BROKEN, NVCC, needs_nvcc
from test_build_isolation import RUBRIC, grade, submission_zip

from worker.build import cuda_include_dirs
from worker.pipeline import shown_command


def test_shown_command_names_the_compiler_and_shortens_install_paths() -> None:
    command = ["/opt/site/cuda-13.0/bin/nvcc", "--shared", "-I/srv/venv/lib/python3.11/site-packages/nvidia/cu13/include",
               "-I/usr/include", "-o", "minitorch/cuda_kernels/combine.so", "src/combine.cu"]
    assert shown_command(command) == ("nvcc --shared -I.../cu13/include -I/usr/include "
                                      "-o minitorch/cuda_kernels/combine.so src/combine.cu")
    assert shown_command([]) == ""


@needs_nvcc
def test_stage_logs_hold_no_worker_paths(tmp_path: Path) -> None:
    assert NVCC is not None
    cache = tmp_path / "cache"
    archive = submission_zip(tmp_path / "up.zip", replace={"softmax_kernel": BROKEN})
    server = [str(tmp_path), str(tmp_path.resolve()), NVCC, *cuda_include_dirs()]
    for attempt in ("built", "cached"):  # the second time, the kernels that built come from the cache
        job = tmp_path / attempt
        job.mkdir()
        outcome = grade(job, archive, cache, None)
        logs = {name: stage.log for name, stage in outcome.stages.items()}
        assert set(logs) == {"unpack", "stage", "build"}, attempt
        for name, log in logs.items():
            for path in server:
                assert path not in log, f"{attempt}: the {name} log shows {path}"
        build = logs["build"]
        assert "src/softmax_kernel.cu(3): error" in build  # the student's file, as they know it
        for k in RUBRIC.kernels:
            assert f" -o {k.output} {k.source}" in build and "\n$ nvcc " in build, attempt
    assert "== combine (cached" in build
