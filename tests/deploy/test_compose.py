"""docker-compose.yml checked without a docker engine: its structure, that every command it
runs exists in the code with those options, that its KG_* variables are settings, and that its
queues are the ones the Celery routing uses. `docker compose config` (or the older
`docker-compose config`) runs too where a client is installed; it only parses, no engine needed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from grader.app import create_app
from grader.celery_app import TASK_GRADE_RUN, TASK_PREBUILD, make_celery
from grader.cli.main import app as grader_app
from grader.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
# What a deployer puts in .env (values are placeholders for parsing only).
DOTENV = {"POSTGRES_PASSWORD": "pw", "KG_SECRET_KEY": "sk", "DOCKER_GID": "999"}
OUR_IMAGES = ("kernelgrade-api", "kernelgrade-worker", "kernelgrade-sandbox")


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message}, enough for this file."""
    def value(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if name in env:
            return env[name]
        if op == ":?":
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg or ""
    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", value, text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(_interpolate(COMPOSE.read_text(), DOTENV))


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in _services(compose).items() if svc["image"].startswith(OUR_IMAGES)}


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def _settings(service: dict[str, Any]) -> Settings:
    return Settings.from_variables(_env(service))


def test_required_variables_are_refused_when_missing() -> None:
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD"):
        _interpolate(COMPOSE.read_text(), {})


def test_structure(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert {"postgres", "redis", "migrate", "api", "reconciler", "builder", "worker-gpu0", "worker-gpu1",
            "flower", "sandbox"} <= set(services)
    volumes = set(compose["volumes"])
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        for dep in svc.get("depends_on", {}):
            assert dep in services, (name, dep)
        for mount in svc.get("volumes", []):
            source = mount.split(":", 1)[0]
            assert source.startswith("/") or source in volumes, (name, mount)
    # Every image of ours is built by exactly one service (the others only use it).
    builders = [svc["image"].split(":")[0] for svc in services.values() if "build" in svc]
    assert sorted(builders) == sorted(OUR_IMAGES)
    for svc in services.values():
        if "build" in svc:
            dockerfile = ROOT / svc["build"]["dockerfile"]
            assert dockerfile.is_file()
            if "target" in svc["build"]:
                assert re.search(rf"^FROM .+ AS {svc['build']['target']}$", dockerfile.read_text(), re.M)
    assert services["migrate"]["restart"] == "no" and services["migrate"]["command"] == ["grader", "migrate"]
    for name in ("api", "reconciler", "builder", "worker-gpu0"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    for name in ("migrate", "reconciler"):  # they share the api image, whose check is the web app's
        assert services[name]["healthcheck"] == {"disable": True}
    assert "--appendonly" in services["redis"]["command"] and "redis-data:/data" in services["redis"]["volumes"]
    assert any(m.endswith(":/var/lib/postgresql/data") for m in services["postgres"]["volumes"])
    assert services["flower"]["profiles"] == ["monitoring"] and services["worker-gpu1"]["profiles"] == ["second-gpu"]


def test_gpu_workers_one_gpu_each_concurrency_one(compose: dict[str, Any]) -> None:
    workers = {n: s for n, s in _services(compose).items() if n.startswith("worker-gpu")}
    host_gpus = []
    for svc in workers.values():
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        (gpu,) = device["device_ids"]
        host_gpus.append(gpu)
        env = _env(svc)
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["KG_GPU_INDEX"] == "0"  # the container's one GPU
        assert env["KG_SANDBOX_DOCKER_GPU"] == gpu and env["KG_SANDBOX_BACKEND"] == "docker"
        assert "--concurrency" not in svc["command"]  # grader worker's default: 1
        assert "/var/lib/kernelgrade/jobs:/var/lib/kernelgrade/jobs" in svc["volumes"]  # same path on the host
    assert sorted(host_gpus) == ["0", "1"]
    # Apart from the GPU, the two workers are the same service: adding one is configuration.
    strip = {"deploy", "environment", "profiles"}
    first, second = ({k: v for k, v in s.items() if k not in strip} for s in workers.values())
    assert first == second


def test_every_kg_variable_is_a_setting(compose: dict[str, Any]) -> None:
    names = Settings.variable_names()
    for name, svc in _ours(compose).items():
        for key in _env(svc):
            if key.startswith("KG_"):
                assert key in names, (name, key)


def _check_command(argv: list[str]) -> None:
    """Resolve `grader SUB [SUB...] OPTIONS` to its command and parse the options (Typer's click
    raises on an unknown command or option)."""
    assert argv[0] == "grader", argv
    command = typer.main.get_command(grader_app)
    args = argv[1:]
    while hasattr(command, "commands"):  # a group: descend
        assert args and args[0] in command.commands, f"no command {args[:1]} in {argv}"
        command, args = command.commands[args[0]], args[1:]
    command.make_context(command.name, list(args))


def test_every_command_exists_with_its_options(compose: dict[str, Any]) -> None:
    for name, svc in _ours(compose).items():
        if name == "sandbox":  # built only; it runs as the docker backend's containers
            continue
        _check_command(svc["command"])
    with pytest.raises(Exception, match="No such option"):  # the check can fail
        _check_command(["grader", "worker", "--no-such-option"])
    with pytest.raises(AssertionError, match="no command"):
        _check_command(["grader", "no-such-command"])


def test_queues_match_the_celery_routing(compose: dict[str, Any]) -> None:
    services = _services(compose)
    api = _settings(services["api"])
    routes = make_celery(api).conf.task_routes
    run_queue, build_queue = routes[TASK_GRADE_RUN]["queue"], routes[TASK_PREBUILD]["queue"]
    assert run_queue == "gpu-h200" and build_queue == "build"
    for name in ("worker-gpu0", "worker-gpu1"):
        assert _settings(services[name]).task_queue == run_queue, name  # `grader worker` consumes it
    builder = _settings(services["builder"])
    assert builder.task_queue == build_queue and builder.gpu_grading == "off"
    assert _settings(services["reconciler"]).task_queue == run_queue


def test_health_check_path_is_a_route(tmp_path: Path) -> None:
    dockerfile = (ROOT / "docker" / "api.Dockerfile").read_text()
    path = re.search(r"http://127\.0\.0\.1:8000(/[\w/]+)", dockerfile).group(1)  # type: ignore[union-attr]
    app = create_app(Settings(_env_file=None, data_dir=tmp_path, database_url="sqlite://"))  # type: ignore[call-arg]
    assert path in {getattr(route, "path", None) for route in app.routes}


def _compose_client() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.parametrize("profiles", [[], ["second-gpu", "monitoring", "sandbox"]])
def test_docker_compose_config_accepts_the_file(profiles: list[str]) -> None:
    client = _compose_client()
    if client is None:
        pytest.skip("no `docker compose` plugin nor docker-compose here; the structural tests above still ran")
    args = [a for p in profiles for a in ("--profile", p)]
    result = subprocess.run([*client, "-f", str(COMPOSE), *args, "config", "--quiet"], capture_output=True,
                            text=True, env={"PATH": os.environ["PATH"], **DOTENV})
    assert result.returncode == 0, result.stderr
