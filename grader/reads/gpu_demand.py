"""The runs that need a GPU worker now, counted in the database: the one figure both autoscalers
scale on (Kubernetes' KEDA trigger, docker/k8s/gpu-worker-autoscaling.yaml, runs this very query;
`grader scale slurm` calls `gpu_demand`).

Counted: runs sent to the broker and not yet taken (queued, enqueued_at set) and runs a worker
holds (building, running, timing; checked: its timing piece waits). Left out: runs held back in
the database (a student's further uploads under fair share, a paused assignment's runs), which no
worker could take. Why not the broker's list length: docs/deploy.md, "Autoscaling"."""
from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

# One line, as KEDA's YAML folds it (tests/deploy/test_k8s.py holds the two equal)
GPU_DEMAND_SQL = ("SELECT count(*) FROM runs WHERE state IN ('building', 'running', 'checked', 'timing') "
                  "OR (state = 'queued' AND enqueued_at IS NOT NULL)")


def gpu_demand(session: Session) -> int:
    """How many runs need a GPU worker now (see the module's text)."""
    return int(session.execute(text(GPU_DEMAND_SQL)).scalar_one())
