"""`grader scale slurm`: GPU worker jobs submitted to Slurm for the runs that need a GPU
(grader/scale/slurm.py), once (`--once`, for cron) or every KG_SLURM_INTERVAL_S. Registered on
the main app by grader.cli."""
from __future__ import annotations

import logging
import time
from typing import Annotated

import typer
from sqlalchemy.exc import SQLAlchemyError

from grader.db import make_engine, make_session_factory
from grader.runs.reconcile_log import log_lines
from grader.scale.slurm import SlurmCluster, SlurmError, job_script, sbatch_argv, scale_pass
from grader.settings import get_settings

log = logging.getLogger("grader.scale")
scale_app = typer.Typer(help="Start GPU workers on a cluster's scheduler.", no_args_is_help=True)


@scale_app.command("slurm")
def slurm(
    once: Annotated[bool, typer.Option("--once", help="one pass, then exit (from cron)")] = False,
    interval: Annotated[float | None, typer.Option(help="seconds between passes; default KG_SLURM_INTERVAL_S")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the sbatch command and job script; submit nothing")] = False,
) -> None:
    """Submit Slurm jobs of one GPU worker each (partition, gres, time limit, account: KG_SLURM_*)
    for the runs that need a GPU, up to KG_SLURM_MAX_JOBS of ours pending or running; the workers
    leave by themselves once idle for KG_SLURM_IDLE_EXIT_S. One line per pass."""
    settings = get_settings()
    cluster = SlurmCluster(settings)
    if dry_run:
        typer.echo(" ".join(sbatch_argv(settings.slurm, cluster.folder / "worker.sbatch", cluster.folder, cluster.workdir)))
        typer.echo(job_script(cluster.grader, settings.slurm.idle_exit_s), nl=False)
        return
    log_lines((log.name,))
    sessions = make_session_factory(make_engine(settings))
    while True:
        try:
            log.info("%s", scale_pass(settings, sessions, cluster).summary())
        except (SlurmError, SQLAlchemyError) as exc:  # the next pass tries again
            log.error("pass failed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            if once:
                raise typer.Exit(1) from None
        if once:
            return
        time.sleep(interval or settings.slurm.interval_s)


def register(app: typer.Typer) -> None:
    app.add_typer(scale_app, name="scale")
