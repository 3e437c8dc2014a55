"""The run lifecycle, the service's side of grading: the Celery app and its tasks, sending runs
to the broker (dispatch, fair share), the reconciler, claiming and recording a run around the
engine's pipeline (lifecycle), and the settings turned into the engine's configuration
(engine_config). The engine (`worker/`) knows none of it."""
