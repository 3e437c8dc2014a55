"""The site administrators' GPU workers page (/ops/workers): what `grader worker --gpus`'
supervisors recorded (grader.gpu_events), the GPUs out now (left out after their worker kept
exiting, and not started since) and the recent faults, newest first. Same refusal as /ops/lti
for anyone else."""
from __future__ import annotations

import signal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from grader.gpu_events import gpus_out, recent_faults
from grader.models import GpuWorkerEvent
from grader.pages.common import Db, Viewer, forbidden, page

router = APIRouter(include_in_schema=False)
SHOWN = 100  # faults listed


@router.get("/ops/workers", response_class=HTMLResponse)
def workers_page(request: Request, session: Db, user: Viewer) -> Response:
    if not user.site_admin:
        raise forbidden("Only a site administrator sees the GPU workers' faults (`grader user admin` names them).")
    return page(request, "ops_workers.html", user, out=gpus_out(session), faults=recent_faults(session, SHOWN),
                shown=SHOWN, describe=describe)


def how_it_exited(event: GpuWorkerEvent) -> str:
    if event.signal is not None:
        try:
            name = signal.Signals(event.signal).name
        except ValueError:
            name = "an unknown signal"
        return f"killed by signal {event.signal} ({name})"
    return f"exited with code {event.exit_code}"


def describe(event: GpuWorkerEvent) -> str:
    """One fault in words: how the worker ended and what the supervisor did."""
    if event.kind == "left_out":
        times = f"{event.restarts} restart{'' if event.restarts == 1 else 's'}"
        return f"Worker {how_it_exited(event)} after {times} in a row: GPU left out, no worker on it"
    if event.kind == "restarted":
        return f"Worker {how_it_exited(event)}: restarted (restart {event.restarts} in a row)"
    return "Worker started"
