"""/api/v1/metrics: the service's metrics for a Prometheus scraper (grader.reads.service_metrics),
with a staff token holding `read:all` (e.g. `grader token create prof --scope read:all`): the run
figures of the assignments its owner teaches, and the broker's queues."""
from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter
from fastapi.responses import Response

from grader.api.deps import DB, Caller, Context, require
from grader.api.errors import ERRORS
from grader.auth.credentials import SCOPE_READ_ALL
from grader.models import utcnow
from grader.reads.service_metrics import broker_metrics, exposition, run_metrics
from grader.runs.dispatch import queue_lengths
from grader.runs.reconcile import broker_queues

router = APIRouter()
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/metrics", response_class=Response,
            responses={**ERRORS, 200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"}},
            summary="Prometheus metrics: runs by state, waiting, recent durations and outcomes; broker queues")
def metrics(ctx: Context, session: DB, caller: Caller) -> Response:
    require(caller, SCOPE_READ_ALL)
    taught = [aid for aid in caller.roles if caller.teaches(aid)]
    figures = run_metrics(session, taught, utcnow(), timedelta(seconds=ctx.settings.heartbeat_timeout_s))
    queues = [*broker_queues(ctx.settings), ctx.settings.similarity_queue]
    lengths = queue_lengths(ctx.celery, queues)
    return Response(exposition(figures + broker_metrics(lengths)), media_type=CONTENT_TYPE)
