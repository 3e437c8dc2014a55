"""The Celery app is made by a factory (issue 34): importing the task modules builds no app and
reads no settings; an app made by make_celery knows every task by its name; the command line's
`celery -A grader.celery_app` finds the app of the environment's settings as `celery`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import grader.celery_app as app_module
import grader.course.roster_jobs, grader.runs.tasks, grader.similarity.jobs
from grader.celery_app import TASK_GRADE_RUN, TASK_PREBUILD, make_celery
from grader.course.roster_jobs import TASK_ROSTER
from grader.settings import Settings
from grader.similarity.jobs import TASK_SIMILARITY
assert app_module.worker_app.cache_info().currsize == 0, "importing the task modules built an app"
app = make_celery(Settings.from_variables({"KG_BROKER_URL": "redis://127.0.0.1:1/0", "KG_TASK_QUEUE": "q-probe"}))
names = {TASK_GRADE_RUN, TASK_PREBUILD, TASK_ROSTER, TASK_SIMILARITY}
assert names <= set(app.tasks), sorted(app.tasks)
assert app.conf.task_default_queue == "q-probe"
found = app_module.celery
assert found is app_module.worker_app() and found is not app and found.conf.task_default_queue == "q-env"
try:
    app_module.app
except AttributeError:
    print("ok")
"""


def test_task_modules_build_no_app_and_every_app_knows_the_tasks() -> None:
    env = {"PATH": "/usr/bin:/bin", "KG_TASK_QUEUE": "q-env", "KG_BROKER_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
