"""REST API v1: submit, list and read submissions and runs, re-grade, gradebook exports (a
course's Canvas CSV too), bulk (every upload as one zip, grades imported from a CSV),
regrade requests and comments, the run that counts, the service's metrics, a course's TA powers
and run quotas.

Bearer-token auth (deps). Every 4xx/5xx answer under /api/ has the body
`{"error": {"code": ..., "message": ...}}` (errors). One router per resource."""
from __future__ import annotations

from fastapi import APIRouter

from grader.api import assignments, bulk, counted, course_settings, courses, metrics, runs, submissions, workflow

router = APIRouter(prefix="/api/v1", tags=["v1"])
for resource in (submissions, runs, assignments, bulk, courses, course_settings, workflow, counted, metrics):
    router.include_router(resource.router)
