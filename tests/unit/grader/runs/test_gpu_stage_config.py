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


def test_the_sanitizer_setting_reaches_the_stage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """KG_SANITIZER (auto | off | a path) and KG_SANITIZER_CAP_S reach StageConfig.sanitizer
    (worker/sanitizer.py): off is none at all; a path that is no tool is kept as missing, which
    a run with a failed case notes."""
    assert gpu_stage_config(Settings.from_variables({"KG_SANITIZER": "off"})).sanitizer is None
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    found = gpu_stage_config(Settings.from_variables({"KG_SANITIZER": str(tool), "KG_SANITIZER_CAP_S": "30"})).sanitizer
    assert found is not None and found.executable == str(tool) and found.cap_s == 30.0
    missing = gpu_stage_config(Settings.from_variables({"KG_SANITIZER": str(tmp_path / "nope")})).sanitizer
    assert missing is not None and missing.executable is None and missing.cap_s == 120.0
    assert Settings(_env_file=None).sanitizer == "auto"  # type: ignore[call-arg]
