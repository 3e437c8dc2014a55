"""The build and sandbox settings are two groups of one type (grader.settings.ChildSettings),
and each keeps the KG_* name it had as a flat setting: a deployment's variables still land."""
from __future__ import annotations

import pytest

from grader.settings import BuildSettings, ChildSettings, SandboxSettings, Settings

# Every KG_* name of the two groups, the field it sets, and a value unlike its default.
VARIABLES = {
    "KG_BUILD_QUEUE": ("build", "queue", "builds", "builds"),
    "KG_BUILD_JOBS": ("build", "jobs", "7", 7),
    "KG_BUILD_FILE_TIMEOUT_S": ("build", "file_timeout_s", "12.5", 12.5),
    "KG_BUILD_CPU_S": ("build", "cpu_s", "31", 31),
    "KG_BUILD_MEMORY_BYTES": ("build", "memory_bytes", "1048576", 1 << 20),
    "KG_BUILD_MAX_PROCESSES": ("build", "max_processes", "5", 5),
    "KG_BUILD_FILE_SIZE_BYTES": ("build", "file_size_bytes", "4096", 4096),
    "KG_BUILD_DOCKER_IMAGE": ("build", "docker_image", "nvcc:12", "nvcc:12"),
    "KG_SANDBOX_USER": ("sandbox", "user", "kg-run", "kg-run"),
    "KG_SANDBOX_ISOLATE_NETWORK": ("sandbox", "isolate_network", "false", False),
    "KG_SANDBOX_WALL_S": ("sandbox", "wall_s", "60", 60.0),
    "KG_SANDBOX_CPU_S": ("sandbox", "cpu_s", "61", 61),
    "KG_SANDBOX_MEMORY_BYTES": ("sandbox", "memory_bytes", "2097152", 2 << 20),
    "KG_SANDBOX_MAX_PROCESSES": ("sandbox", "max_processes", "17", 17),
    "KG_SANDBOX_FILE_SIZE_BYTES": ("sandbox", "file_size_bytes", "8192", 8192),
    "KG_SANDBOX_DISK_BYTES": ("sandbox", "disk_bytes", "16384", 16384),
    "KG_SANDBOX_REQUIRE_NAMESPACES": ("sandbox", "require_namespaces", "false", False),
    "KG_SANDBOX_BACKEND": ("sandbox", "backend", "docker", "docker"),
    "KG_SANDBOX_DOCKER_IMAGE": ("sandbox", "docker_image", "sbx:2", "sbx:2"),
    "KG_SANDBOX_DOCKER_GPU": ("sandbox", "docker_gpu", "GPU-3", "GPU-3"),
    "KG_SANDBOX_DOCKER_CPUS": ("sandbox", "docker_cpus", "1.5", 1.5),
}


def test_every_field_of_the_groups_has_its_variable_here() -> None:
    named = {(group, field) for group, field, _, _ in VARIABLES.values()}
    assert named == {("build", f) for f in BuildSettings.model_fields} | {("sandbox", f) for f in SandboxSettings.model_fields}
    assert set(ChildSettings.model_fields) <= set(BuildSettings.model_fields) & set(SandboxSettings.model_fields)
    assert set(VARIABLES) <= Settings.variable_names()
    assert {"KG_DATA_DIR", "KG_NVCC_TIMEOUT_S"} <= Settings.variable_names()
    assert not {"KG_BUILD", "KG_SANDBOX"} & Settings.variable_names()


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_the_flat_variable_sets_its_field_and_no_other(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    default = Settings(_env_file=None)  # type: ignore[call-arg]
    group, field, text, value = VARIABLES[variable]
    monkeypatch.setenv(variable, text)
    changed = Settings(_env_file=None)  # type: ignore[call-arg]
    assert getattr(getattr(changed, group), field) == value != getattr(getattr(default, group), field)
    assert getattr(changed, group).model_copy(update={field: getattr(getattr(default, group), field)}) == \
        getattr(default, group)
    other = "sandbox" if group == "build" else "build"
    assert getattr(changed, other) == getattr(default, other)


def test_variables_in_a_mapping_are_read_as_the_environment_is() -> None:
    mapped = Settings.from_variables({"KG_BUILD_JOBS": "9", "KG_SANDBOX_USER": "", "KG_TASK_QUEUE": "q", "PATH": "/x"},
                                     gpu_index=2)
    assert mapped.build.jobs == 9 and mapped.build.cpu_s == 300  # the rest of the group keeps its defaults
    assert mapped.sandbox.user == "" and mapped.sandbox.wall_s == 900.0
    assert mapped.task_queue == "q" and mapped.gpu_index == 2


def test_the_groups_are_read_only() -> None:
    with pytest.raises(ValueError, match="frozen"):
        Settings(_env_file=None).build.jobs = 4  # type: ignore[call-arg,misc]
