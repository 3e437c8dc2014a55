"""How many Slurm worker jobs `grader scale slurm` submits (grader/scale/decision.py), and the
commands it runs (grader/scale/slurm.py): the job script, sbatch's options, squeue's answer read."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from grader.scale.decision import Demand, Jobs, Limits, jobs_to_submit, jobs_wanted
from grader.scale.slurm import SlurmCluster, SlurmError, job_script, parse_squeue, sbatch_argv, squeue_argv
from grader.settings import Settings, SlurmSettings


def test_one_job_per_run_needing_a_gpu_up_to_the_maximum() -> None:
    assert jobs_to_submit(Demand(3), Jobs(0, 0), Limits(8)) == 3
    assert jobs_to_submit(Demand(30), Jobs(0, 0), Limits(8)) == 8
    assert jobs_to_submit(Demand(0), Jobs(0, 0), Limits(8)) == 0


def test_pending_and_running_jobs_count_as_workers_already_coming() -> None:
    assert jobs_to_submit(Demand(5), Jobs(pending=2, running=1), Limits(8)) == 2
    assert jobs_to_submit(Demand(5), Jobs(pending=5, running=0), Limits(8)) == 0
    # more jobs than runs (a burst drained): nothing submitted, nothing cancelled (they leave when idle)
    assert jobs_to_submit(Demand(1), Jobs(pending=0, running=4), Limits(8)) == 0
    # the maximum counts ours already there
    assert jobs_to_submit(Demand(30), Jobs(pending=3, running=4), Limits(8)) == 1


def test_a_worker_grading_several_runs_at_once_serves_that_many() -> None:
    assert jobs_wanted(Demand(5, runs_per_job=2), Limits(8)) == 3
    assert jobs_wanted(Demand(4, runs_per_job=2), Limits(8)) == 2


def test_the_minimum_keeps_workers_before_a_deadline_but_never_passes_the_maximum() -> None:
    assert jobs_to_submit(Demand(0), Jobs(0, 1), Limits(8, min_jobs=3)) == 2
    assert jobs_wanted(Demand(0), Limits(2, min_jobs=3)) == 2
    assert jobs_wanted(Demand(-1), Limits(2)) == 0  # a nonsense count submits nothing


def test_squeue_lines_are_counted_by_state() -> None:
    assert parse_squeue("12 PENDING\n13 RUNNING\n14 CONFIGURING\n\n15 RUNNING\n") == Jobs(pending=2, running=2)
    assert parse_squeue("") == Jobs(0, 0)


def test_sbatch_asks_for_one_gpu_with_the_settings_options(tmp_path: Path) -> None:
    slurm = SlurmSettings(partition="gpu", gres="gpu:h100:1", time_limit="02:00:00", account="cs149",
                          cpus_per_job=6, grace_s=240, extra_args="--qos=course --mem=32G")
    argv = sbatch_argv(slurm, tmp_path / "worker.sbatch", tmp_path, tmp_path)
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-1] == str(tmp_path / "worker.sbatch")
    for option in ("--job-name=kernelgrade-worker", "--gres=gpu:h100:1", "--partition=gpu", "--account=cs149",
                   "--time=02:00:00", "--cpus-per-task=6", "--signal=B:TERM@240", "--qos=course", "--mem=32G",
                   f"--output={tmp_path}/%x-%j.out"):
        assert option in argv, option
    bare = sbatch_argv(SlurmSettings(gres="", grace_s=0), tmp_path / "w", tmp_path, tmp_path)
    assert not [a for a in bare if a.startswith(("--gres", "--partition", "--account", "--signal"))], bare
    assert "--name=kernelgrade-worker" in squeue_argv(slurm, "grader")


def test_the_job_script_runs_the_worker_with_its_idle_exit_on_the_jobs_gpu(tmp_path: Path) -> None:
    script = job_script(["/opt/kg/bin/python", "-m", "grader"], 120)
    assert "exec /opt/kg/bin/python -m grader worker --idle-exit 120 --gpus \"$SLURM_JOB_GPUS\"" in script
    assert script.rstrip().endswith("exec /opt/kg/bin/python -m grader worker --idle-exit 120")
    path = tmp_path / "worker.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_the_slurm_settings_are_read_from_kg_slurm_variables() -> None:
    settings = Settings.from_variables({"KG_SLURM_MAX_JOBS": "12", "KG_SLURM_GRES": "gpu:a100:1",
                                        "KG_WORKER_IDLE_EXIT_S": "60"})
    assert settings.slurm.max_jobs == 12 and settings.slurm.gres == "gpu:a100:1"
    assert settings.slurm.idle_exit_s == SlurmSettings().idle_exit_s and settings.worker_idle_exit_s == 60


def test_a_missing_or_refusing_slurm_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = SlurmCluster(Settings.from_variables({"KG_DATA_DIR": str(tmp_path)}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue here
    with pytest.raises(SlurmError, match="^squeue could not be run"):
        cluster.ours()
    refusing = tmp_path / "sbatch"
    refusing.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n")
    refusing.chmod(0o755)
    with pytest.raises(SlurmError, match="^sbatch exited 1: sbatch: error: invalid partition specified: gpu$"):
        cluster.submit()
