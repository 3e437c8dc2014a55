"""The worker's GPU stage takes its sandbox backend from the settings."""
from __future__ import annotations

from grader.runs.engine_config import gpu_stage_config
from grader.settings import Settings


def test_docker_backend_reaches_the_sandbox_policy() -> None:
    settings = Settings(_env_file=None, sandbox={"backend": "docker"}, gpu_index=1)  # type: ignore[call-arg]
    docker = gpu_stage_config(settings).policy.docker
    assert docker is not None and docker.image == settings.sandbox.docker_image and docker.gpu == "1"


def test_process_backend_has_no_docker_options() -> None:
    assert gpu_stage_config(Settings(_env_file=None)).policy.docker is None  # type: ignore[call-arg]


def test_the_gpu_budget_reaches_the_stage() -> None:
    """KG_GPU_BUDGET_S bounds the stage (worker.gpu.budget): 300 s by default, above a correct grade's 160-210 s."""
    assert gpu_stage_config(Settings(_env_file=None)).budget_s == 300.0  # type: ignore[call-arg]
    settings = Settings.from_variables({"KG_GPU_BUDGET_S": "240"})
    assert gpu_stage_config(settings).budget_s == 240.0
