"""What a Celery worker of this service does before it takes a job, however it was started
(`grader worker`, which execs Celery, `grader dev`'s worker, or `celery -A
grader.runs.celery_app worker`).

Its umask is 022 whatever it inherited (the `grader` command's 077, a systemd `UMask=0077`):
the sandbox launcher (worker/sandbox/launcher.py) builds each child's view, a fresh /etc and the
mount points of its allow-list, with this process's umask, and the sandbox user must be able to
read that view. The worker's own files in the data dir do not depend on it: they are made
owner-only explicitly (grader/datadir.py), the embedded broker's SQLite file included, here,
before kombu opens it.
"""
from __future__ import annotations

import os
from typing import Any

from celery.signals import worker_init

from grader.datadir import private_dir, private_file
from grader.settings import get_settings

SANDBOX_VIEW_UMASK = 0o022


@worker_init.connect
def _before_taking_jobs(**_: Any) -> None:
    os.umask(SANDBOX_VIEW_UMASK)  # the pool's processes, forked later, inherit it
    settings = get_settings()
    private_dir(settings.data_dir)
    if not settings.broker_url:
        private_file(settings.embedded_broker_path)
