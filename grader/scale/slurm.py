"""GPU workers as Slurm jobs: the job script, `sbatch` to submit one, `squeue` to count ours, and
one scaling pass (`scale_pass`) that `grader scale slurm` runs once (cron) or in a loop.

Each job asks for one GPU (KG_SLURM_GRES) and runs `grader worker --idle-exit`, which leaves once
it has had no task for KG_SLURM_IDLE_EXIT_S: the queue's end is the jobs' end, and nothing here
cancels a job. The job inherits the environment `grader scale slurm` runs in (sbatch's default
--export=ALL, so the KG_* settings) and its folder (the `.env`); the interpreter is this one, so
the nodes need the same installation path (a shared filesystem, as the data dir is already).

How a job ends without losing a run (grader/runs/worker_stop.py): `--signal=B:TERM@grace` asks
the worker, KG_SLURM_GRACE_S before the time limit, to stop taking runs and finish the one under
way; a job Slurm ends (scancel, the time limit, preemption) gets SIGTERM in every process, and
the run in flight is given back and sent again within the cluster's KillWait.
"""
from __future__ import annotations

import getpass
import logging
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from grader.datadir import private_dir
from grader.db import session_scope
from grader.reads.gpu_demand import gpu_demand
from grader.scale.decision import Demand, Jobs, Limits, jobs_to_submit
from grader.settings import Settings, SlurmSettings

log = logging.getLogger(__name__)
PENDING_STATES = ("PENDING", "CONFIGURING")
RUNNING_STATES = ("RUNNING",)  # a COMPLETING job's worker has left already


class SlurmError(RuntimeError):
    """sbatch or squeue could not be run or refused; the text says which and why."""


def job_script(grader: Sequence[str], idle_exit_s: float) -> str:
    """The batch script: `grader worker` on the job's GPU (Slurm names it in SLURM_JOB_GPUS,
    host indexes, which `--gpus` pins the worker to), exec'd so the worker is the batch step's
    main process and gets the time limit's early TERM itself."""
    worker = f"{shlex.join(grader)} worker --idle-exit {idle_exit_s:g}"
    return (
        "#!/bin/bash\n"
        "# A kernelgrade GPU worker, submitted by `grader scale slurm`: it grades until it has been\n"
        "# idle for its --idle-exit seconds, then exits (docs/deploy.md, section 7).\n"
        "set -eu\n"
        'if [ -n "${SLURM_JOB_GPUS:-}" ]; then\n'
        f'  exec {worker} --gpus "$SLURM_JOB_GPUS"\n'
        "fi\n"
        f"exec {worker}\n"
    )


def sbatch_argv(slurm: SlurmSettings, script: Path, output_dir: Path, workdir: Path) -> list[str]:
    """`sbatch --parsable` with the settings' options (one GPU, CPUs, time limit, partition,
    account, the early TERM) and the extra ones, then the script."""
    argv = ["sbatch", "--parsable", f"--job-name={slurm.job_name}", f"--cpus-per-task={slurm.cpus_per_job}",
            f"--time={slurm.time_limit}", f"--output={output_dir / '%x-%j.out'}", f"--chdir={workdir}",
            "--ntasks=1", "--nodes=1"]
    argv += [f"--gres={slurm.gres}"] if slurm.gres else []
    argv += [f"--partition={slurm.partition}"] if slurm.partition else []
    argv += [f"--account={slurm.account}"] if slurm.account else []
    argv += [f"--signal=B:TERM@{slurm.grace_s}"] if slurm.grace_s else []
    return [*argv, *shlex.split(slurm.extra_args), str(script)]


def squeue_argv(slurm: SlurmSettings, user: str) -> list[str]:
    return ["squeue", "--noheader", f"--name={slurm.job_name}", f"--user={user}",
            f"--states={','.join(PENDING_STATES + RUNNING_STATES)}", "--format=%i %T"]


def parse_squeue(text: str) -> Jobs:
    """squeue's `%i %T` lines: our jobs, pending and running."""
    states = [line.split()[-1] for line in text.splitlines() if line.strip()]
    return Jobs(pending=sum(s in PENDING_STATES for s in states), running=sum(s in RUNNING_STATES for s in states))


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{argv[0]} could not be run: {exc}") from None
    if done.returncode != 0:
        raise SlurmError(f"{argv[0]} exited {done.returncode}: {(done.stderr or done.stdout).strip()[:500]}")
    return done.stdout


@dataclass
class SlurmCluster:
    """Our worker jobs on the cluster the environment's Slurm commands reach (SLURM_CONF)."""

    settings: Settings
    grader: list[str] = field(default_factory=lambda: [sys.executable, "-m", "grader"])
    workdir: Path = field(default_factory=Path.cwd)

    @property
    def folder(self) -> Path:
        """Where the job script is written and the jobs' logs go (in the data dir, which the nodes share)."""
        return self.settings.data_dir.resolve() / "slurm"

    def ours(self) -> Jobs:
        return parse_squeue(_run(squeue_argv(self.settings.slurm, getpass.getuser())))

    def write_script(self) -> Path:
        script = private_dir(self.folder) / "worker.sbatch"
        script.write_text(job_script(self.grader, self.settings.slurm.idle_exit_s))
        script.chmod(0o700)
        return script

    def submit(self) -> str:
        """Submit one worker job; its id."""
        argv = sbatch_argv(self.settings.slurm, self.write_script(), self.folder, self.workdir)
        return _run(argv).strip().split(";")[0]  # --parsable: "id" or "id;cluster"


@dataclass
class ScalePass:
    demand: int
    jobs: Jobs
    submitted: list[str]

    def summary(self) -> str:
        return (f"{self.demand} runs need a GPU; our jobs: {self.jobs.pending} pending, {self.jobs.running} running; "
                f"submitted {len(self.submitted)}{' (' + ', '.join(self.submitted) + ')' if self.submitted else ''}")


def scale_pass(settings: Settings, sessions: sessionmaker[Session], cluster: SlurmCluster) -> ScalePass:
    """Count the runs needing a GPU and our jobs, and submit the jobs the decision asks for."""
    with session_scope(sessions) as session:
        runs = gpu_demand(session)
    jobs = cluster.ours()
    limits = Limits(settings.slurm.max_jobs, settings.slurm.min_jobs)
    count = jobs_to_submit(Demand(runs, settings.gpu_slots), jobs, limits)
    submitted = [cluster.submit() for _ in range(count)]
    return ScalePass(runs, jobs, submitted)
