"""The settings' groups: build and sandbox, two of one type (grader.settings.ChildSettings),
unpack, smtp, throttle, argon2, sso, saml and slurm. Each field keeps the KG_* name it had as a flat setting (smtp.from_ is still
KG_SMTP_FROM): a deployment's variables still land."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from grader.settings import BuildSettings, ChildSettings, SandboxSettings, Settings

# Every KG_* name of the groups, the field it sets, and a value unlike its default.
VARIABLES = {
    "KG_BUILD_QUEUE": ("build", "queue", "builds", "builds"),
    "KG_BUILD_JOBS": ("build", "jobs", "7", 7),
    "KG_BUILD_FILE_TIMEOUT_S": ("build", "file_timeout_s", "12.5", 12.5),
    "KG_BUILD_CPU_S": ("build", "cpu_s", "31", 31),
    "KG_BUILD_MEMORY_BYTES": ("build", "memory_bytes", "1048576", 1 << 20),
    "KG_BUILD_MAX_PROCESSES": ("build", "max_processes", "5", 5),
    "KG_BUILD_FILE_SIZE_BYTES": ("build", "file_size_bytes", "4096", 4096),
    "KG_BUILD_DOCKER_IMAGE": ("build", "docker_image", "nvcc:12", "nvcc:12"),
    "KG_BUILD_CACHE_DIR": ("build", "cache_dir", "/srv/cache", Path("/srv/cache")),
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
    "KG_UNPACK_MAX_TOTAL_BYTES": ("unpack", "max_total_bytes", "1048576", 1 << 20),
    "KG_UNPACK_MAX_FILE_BYTES": ("unpack", "max_file_bytes", "2048", 2048),
    "KG_UNPACK_MAX_FILES": ("unpack", "max_files", "12", 12),
    "KG_UNPACK_MAX_DEPTH": ("unpack", "max_depth", "3", 3),
    "KG_UNPACK_MAX_RATIO": ("unpack", "max_ratio", "7.5", 7.5),
    "KG_SMTP_HOST": ("smtp", "host", "mail.example.edu", "mail.example.edu"),
    "KG_SMTP_PORT": ("smtp", "port", "25", 25),
    "KG_SMTP_SECURITY": ("smtp", "security", "tls", "tls"),
    "KG_SMTP_USER": ("smtp", "user", "kg", "kg"),
    "KG_SMTP_PASSWORD": ("smtp", "password", "secret", "secret"),
    "KG_SMTP_FROM": ("smtp", "from_", "grader@example.edu", "grader@example.edu"),
    "KG_SMTP_TIMEOUT_S": ("smtp", "timeout_s", "2.5", 2.5),
    "KG_THROTTLE_ACCOUNT_FREE": ("throttle", "account_free", "3", 3),
    "KG_THROTTLE_ACCOUNT_LOCK_AFTER": ("throttle", "account_lock_after", "7", 7),
    "KG_THROTTLE_ADDRESS_FREE": ("throttle", "address_free", "40", 40),
    "KG_THROTTLE_ADDRESS_LOCK_AFTER": ("throttle", "address_lock_after", "200", 200),
    "KG_THROTTLE_BACKOFF_S": ("throttle", "backoff_s", "0.5", 0.5),
    "KG_THROTTLE_LOCK_S": ("throttle", "lock_s", "60", 60.0),
    "KG_THROTTLE_FORGET_S": ("throttle", "forget_s", "7200", 7200.0),
    "KG_ARGON2_TIME_COST": ("argon2", "time_cost", "2", 2),
    "KG_ARGON2_MEMORY_KIB": ("argon2", "memory_kib", "131072", 131072),
    "KG_ARGON2_PARALLELISM": ("argon2", "parallelism", "2", 2),
    "KG_SSO_ISSUER": ("sso", "issuer", "https://login.example.edu", "https://login.example.edu"),
    "KG_SSO_CLIENT_ID": ("sso", "client_id", "grader-7", "grader-7"),
    "KG_SSO_CLIENT_SECRET": ("sso", "client_secret", "s3cret", "s3cret"),
    "KG_SSO_LOGIN_CLAIM": ("sso", "login_claim", "email", "email"),
    "KG_SSO_DOMAINS": ("sso", "domains", "Example.edu, @cs.example.edu", ["example.edu", "cs.example.edu"]),
    "KG_SSO_LABEL": ("sso", "label", "Sign in with Example U", "Sign in with Example U"),
    "KG_SAML_IDP_METADATA_URL": ("saml", "idp_metadata_url", "https://idp.example.edu/metadata",
                                 "https://idp.example.edu/metadata"),
    "KG_SAML_IDP_METADATA_FILE": ("saml", "idp_metadata_file", "/etc/kg/idp.xml", "/etc/kg/idp.xml"),
    "KG_SAML_ENTITY_ID": ("saml", "entity_id", "https://g.example.edu/sp", "https://g.example.edu/sp"),
    "KG_SAML_LOGIN_ATTRIBUTE": ("saml", "login_attribute", "uid", "uid"),
    "KG_SAML_KEY_FILE": ("saml", "key_file", "/etc/kg/sp-key.pem", "/etc/kg/sp-key.pem"),
    "KG_SAML_CERT_FILE": ("saml", "cert_file", "/etc/kg/sp-cert.pem", "/etc/kg/sp-cert.pem"),
    "KG_SAML_LABEL": ("saml", "label", "Sign in with Example U (SAML)", "Sign in with Example U (SAML)"),
    "KG_SLURM_PARTITION": ("slurm", "partition", "gpu", "gpu"),
    "KG_SLURM_GRES": ("slurm", "gres", "gpu:h100:1", "gpu:h100:1"),
    "KG_SLURM_TIME_LIMIT": ("slurm", "time_limit", "1:00:00", "1:00:00"),
    "KG_SLURM_ACCOUNT": ("slurm", "account", "cs149", "cs149"),
    "KG_SLURM_CPUS_PER_JOB": ("slurm", "cpus_per_job", "8", 8),
    "KG_SLURM_MAX_JOBS": ("slurm", "max_jobs", "16", 16),
    "KG_SLURM_MIN_JOBS": ("slurm", "min_jobs", "2", 2),
    "KG_SLURM_JOB_NAME": ("slurm", "job_name", "kg-w", "kg-w"),
    "KG_SLURM_IDLE_EXIT_S": ("slurm", "idle_exit_s", "90", 90.0),
    "KG_SLURM_GRACE_S": ("slurm", "grace_s", "120", 120),
    "KG_SLURM_INTERVAL_S": ("slurm", "interval_s", "15", 15.0),
    "KG_SLURM_EXTRA_ARGS": ("slurm", "extra_args", "--qos=x", "--qos=x"),
}
# Set under every variable tried: KG_SMTP_HOST alone is refused (mail needs a sender), KG_SSO_ISSUER
# without a client id or the service's address too.
BASE = {"KG_SMTP_FROM": "base@example.edu", "KG_SSO_CLIENT_ID": "base-client", "KG_PUBLIC_URL": "https://g.example.edu"}


def test_every_field_of_the_groups_has_its_variable_here() -> None:
    groups = Settings.groups()
    assert set(groups) == {"build", "sandbox", "unpack", "smtp", "throttle", "argon2", "sso", "saml", "slurm"}
    assert groups["build"] is BuildSettings and groups["sandbox"] is SandboxSettings
    named = {(group, field) for group, field, _, _ in VARIABLES.values()}
    assert named == {(group, f) for group, model in groups.items() for f in model.model_fields}
    assert set(ChildSettings.model_fields) <= set(BuildSettings.model_fields) & set(SandboxSettings.model_fields)
    assert set(VARIABLES) <= Settings.variable_names()
    assert {"KG_DATA_DIR", "KG_NVCC_TIMEOUT_S"} <= Settings.variable_names()
    assert not {"KG_BUILD", "KG_SANDBOX", "KG_UNPACK", "KG_SMTP", "KG_SMTP_FROM_", "KG_THROTTLE",
                "KG_ARGON2", "KG_SSO", "KG_SAML", "KG_SLURM"} & Settings.variable_names()


def test_no_other_field_is_named_as_a_groups_field() -> None:
    """KG_<GROUP>_<REST> is read into the group: a flat field named so would never be set."""
    groups = Settings.groups()
    flat = [name for name in Settings.model_fields if name not in groups]
    assert [name for name in flat if name.partition("_")[0] in groups] == []


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_the_flat_variable_sets_its_field_and_no_other(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, text in BASE.items():
        if name != variable:
            monkeypatch.setenv(name, text)
    default = Settings(_env_file=None)  # type: ignore[call-arg]
    group, field, text, value = VARIABLES[variable]
    monkeypatch.setenv(variable, text)
    changed = Settings(_env_file=None)  # type: ignore[call-arg]
    assert getattr(getattr(changed, group), field) == value != getattr(getattr(default, group), field)
    assert getattr(changed, group).model_copy(update={field: getattr(getattr(default, group), field)}) == \
        getattr(default, group)
    assert changed.model_copy(update={group: getattr(default, group)}) == default  # every other field as it was


def test_variables_in_a_mapping_are_read_as_the_environment_is() -> None:
    mapped = Settings.from_variables({"KG_BUILD_JOBS": "9", "KG_SANDBOX_USER": "", "KG_TASK_QUEUE": "q", "PATH": "/x"},
                                     gpu_index=2)
    assert mapped.build.jobs == 9 and mapped.build.cpu_s == 300  # the rest of the group keeps its defaults
    assert mapped.sandbox.user == "" and mapped.sandbox.wall_s == 900.0
    assert mapped.task_queue == "q" and mapped.gpu_index == 2
    mail = Settings.from_variables({"KG_SMTP_HOST": "mail.example.edu", "KG_SMTP_FROM": "grader@example.edu",
                                    "KG_UNPACK_MAX_FILES": "12"})
    assert mail.smtp.host == "mail.example.edu" and mail.smtp.from_ == "grader@example.edu"
    assert mail.smtp.port == 587 and mail.unpack.max_files == 12 and mail.unpack.max_depth == 24


@pytest.mark.parametrize("group", ["build", "sandbox", "unpack", "smtp", "throttle", "argon2", "sso", "saml"])
def test_the_groups_are_read_only(group: str) -> None:
    field = next(iter(Settings.groups()[group].model_fields))
    with pytest.raises(ValueError, match="frozen"):
        setattr(getattr(Settings(_env_file=None), group), field, None)  # type: ignore[call-arg]


def test_a_timing_task_has_time_to_wait_its_turn_behind_the_other_slots() -> None:
    """Four slots of 300 s budgets fit the default 1500 s soft limit; five do not, and the error
    names the figure to set (or fewer slots); without the split, slots never queue timings."""
    assert Settings(_env_file=None, gpu_slots=4).split_slots == 4  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match=r"KG_GPU_SLOTS=5 .* at least 1800 .* or use fewer slots"):
        Settings(_env_file=None, gpu_slots=5)  # type: ignore[call-arg]
    assert Settings(_env_file=None, gpu_slots=5, task_soft_time_limit_s=1800,  # type: ignore[call-arg]
                    task_time_limit_s=2100).gpu_slots == 5
    assert Settings(_env_file=None, gpu_slots=8, timing_split=False).split_slots is None  # type: ignore[call-arg]
