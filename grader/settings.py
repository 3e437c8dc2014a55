"""The one settings object. Every knob of the service lives here, read from KG_* variables.

The defaults are the embedded profile: SQLite and a SQLite-backed broker under `data_dir`,
so one machine runs everything with no server. Production sets KG_DATABASE_URL to
PostgreSQL and KG_BROKER_URL to Redis; the code path is the same.
"""
from __future__ import annotations

import functools
import ipaddress
import json
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from grader.roles import Role

MiB = 1024 * 1024


class ExposedSecretFile(ValueError):
    """A file that holds the service's secrets (the `.env`, the session key) which other users of
    the host may read or change: the service refuses to start on it."""


def refuse_exposed(path: Path) -> None:
    """ExposedSecretFile, in one line naming the file and the chmod that fixes it, when `path`
    exists and its group or others may read or write it."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o066:
        where = path.resolve()
        raise ExposedSecretFile(f"refusing to start: {where} holds secrets and other users of this host can read or "
                                f"change it (mode {mode:04o}); run chmod 600 {where} and start again")


class ChildSettings(BaseModel):
    """What one kind of sandboxed child may use (worker/sandbox/): CPU seconds, summed resident
    memory, processes (RLIMIT_NPROC counts threads) and the largest file it may write, and the
    image its container starts from under the docker backend. Used twice: `build` (a
    submission's nvcc) and `sandbox` (a problem's run), so their limits are read one way."""

    model_config = ConfigDict(frozen=True)

    cpu_s: int
    memory_bytes: int
    max_processes: int
    file_size_bytes: int
    docker_image: str


class BuildSettings(ChildSettings):
    """The build of a submission (worker/build.py), KG_BUILD_*; its user, network and backend
    are the sandbox's."""

    # When set, each run is first built by a CPU worker on this queue (grader/runs/tasks.py:
    # prebuild); the GPU worker then finds its kernels in the shared build cache.
    queue: str = ""
    jobs: int = 3  # nvcc processes at once
    # Wall time of one nvcc of a submission (one source file), below nvcc_timeout_s: the course's
    # whole build (every kernel, `jobs` at once) takes 18-26 s, so 90 s leaves more than 3x for a
    # loaded worker, and a compile-time bomb frees its build slot after 90 s, not 300.
    file_timeout_s: float = 90.0
    # Where built libraries are kept by content hash (worker/build.py): default data_dir/build-cache.
    # Shared by every worker that builds (a prebuild's CPU worker and the GPU worker after it).
    cache_dir: Path | None = None


class SandboxSettings(ChildSettings):
    """The sandbox every piece of submitted code runs in (worker/sandbox/), KG_SANDBOX_*."""

    user: str | None = "nobody"
    isolate_network: bool = True
    wall_s: float = 900.0  # per problem child
    # All a job may write (job folder, /tmp, /dev/shm, ...): a tmpfs of this size, so it is RAM
    # too; a build's children get the same
    disk_bytes: int = 1024 * MiB
    # Without PID/mount namespaces (an unprivileged container, a non-root worker) the process
    # backend refuses to run submitted code; false: it runs it with the weaker isolation left
    require_namespaces: bool = True
    backend: Literal["process", "docker"] = "process"  # docker: a fresh container per child
    docker_gpu: str = ""  # `docker run --gpus device=` (host index or UUID); "" = gpu_index
    docker_cpus: float = 4.0


class UnpackSettings(BaseModel):
    """Safe unpacking of submissions (worker/unpack.py), KG_UNPACK_MAX_*."""

    model_config = ConfigDict(frozen=True)

    max_total_bytes: int = 200 * MiB
    max_file_bytes: int = 50 * MiB
    max_files: int = 5000
    max_depth: int = 24
    max_ratio: float = 100.0  # uncompressed / compressed, whole archive and per entry


class SmtpSettings(BaseModel):
    """Run notices by e-mail (grader/notify.py), KG_SMTP_*: when host is set, a student whose
    account has an address gets one when their run ends (its grade, or why it was not graded,
    and a link). security: "starttls" upgrades a plain connection, "tls" connects with TLS,
    "none" neither."""

    # `from` is a keyword: the field is from_, read by its alias "from" (KG_SMTP_FROM) and by
    # its name (so that a from_= given is never silently ignored).
    model_config = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)

    host: str = ""  # empty: no e-mail
    port: int = 587
    security: Literal["starttls", "tls", "none"] = "starttls"
    user: str = ""  # empty: no login
    password: str = ""
    from_: str = Field(default="", alias="from")  # the sender's address; required with host
    timeout_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _mail_needs_a_sender(self) -> SmtpSettings:
        if self.host and not self.from_:
            raise ValueError("KG_SMTP_HOST is set but KG_SMTP_FROM is not: set the address run notices are sent from")
        return self


class ThrottleSettings(BaseModel):
    """Guessing passwords, reset requests and API tokens (grader/auth/throttle.py), KG_THROTTLE_*.
    Per account, and per client address (KG_TRUSTED_PROXIES says how it is found): the first
    `*_free` failures cost nothing, each further one doubles a wait starting at `backoff_s`,
    and the `*_lock_after`-th locks the account or address for `lock_s`; a failure comes on
    top of the earlier ones until `forget_s` pass without one (a right password forgets the
    account's). An address is shared by many people behind a NAT, hence its larger counts."""

    model_config = ConfigDict(frozen=True)

    account_free: int = Field(default=5, ge=0)
    account_lock_after: int = Field(default=10, ge=1)
    address_free: int = Field(default=30, ge=0)
    address_lock_after: int = Field(default=100, ge=1)
    backoff_s: float = Field(default=1.0, ge=0)
    lock_s: float = Field(default=900.0, gt=0)
    forget_s: float = Field(default=3600.0, gt=0)


class Argon2Settings(BaseModel):
    """The cost of each new password hash (grader/passwords.py), KG_ARGON2_*: Argon2id through
    argon2-cffi, by default RFC 9106's low-memory profile (3 passes over 64 MiB, 4 lanes). A hash
    records its own cost, so a change applies to new hashes; an older one is redone at its
    owner's next login. Lower only where no real password is kept (a test suite)."""

    model_config = ConfigDict(frozen=True)

    time_cost: int = Field(default=3, ge=1)
    memory_kib: int = Field(default=64 * 1024, ge=8)
    parallelism: int = Field(default=4, ge=1)

    @model_validator(mode="after")
    def _memory_for_every_lane(self) -> Argon2Settings:
        if self.memory_kib < 8 * self.parallelism:
            raise ValueError(f"KG_ARGON2_MEMORY_KIB={self.memory_kib} is too little: Argon2 needs 8 KiB per lane, "
                             f"{8 * self.parallelism} for KG_ARGON2_PARALLELISM={self.parallelism}")
        return self


def _site_address(value: str) -> bool:
    """An http(s) address of a site (scheme and host, an optional path; no query or fragment)."""
    parts = urlsplit(value.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not parts.query and not parts.fragment


def _text_list(value: Any) -> Any:
    """A list given as text: a JSON list, or words separated by commas (KG_PASSWORD_LOGIN_ROLES=instructor)."""
    if not isinstance(value, str):
        return value or []
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [word.strip() for word in text.split(",") if word.strip()]


class SsoSettings(BaseModel):
    """Single sign-on with the university's OpenID Connect provider (grader/auth/sso.py,
    docs/sso.md), KG_SSO_*: off while issuer is empty. The provider is found through
    <issuer>/.well-known/openid-configuration; `login_claim` is the claim of its id_token that
    names the account here at a first sign-in; `domains`, when given, are the only e-mail and
    login domains let in (exact names, compared case-insensitively); `label` is the login page's
    button."""

    model_config = ConfigDict(frozen=True)

    issuer: str = ""  # empty: no single sign-on
    client_id: str = ""
    client_secret: str = ""  # empty: a public client (PKCE only), for providers that register one so
    login_claim: str = "preferred_username"
    domains: Annotated[list[str], NoDecode] = Field(default_factory=list)
    label: str = "Sign in with your university account"

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        if value and not _site_address(value):
            raise ValueError(f"KG_SSO_ISSUER {value!r} is not a provider's issuer; give the address its "
                             "/.well-known/openid-configuration is under, such as https://login.example.edu")
        return value.strip()

    @field_validator("domains", mode="before")
    @classmethod
    def _domain_names(cls, value: Any) -> Any:
        return [str(name).strip().lstrip("@").lower() for name in _text_list(value)]

    @model_validator(mode="after")
    def _issuer_needs_a_client(self) -> SsoSettings:
        if self.issuer and not (self.client_id and self.login_claim.strip()):
            raise ValueError("KG_SSO_ISSUER is set but KG_SSO_CLIENT_ID (or KG_SSO_LOGIN_CLAIM) is empty: set the "
                             "client id the provider registered for this service")
        return self


class SamlSettings(BaseModel):
    """SAML 2.0 single sign-on (grader/auth/saml.py, docs/sso.md), KG_SAML_*: off while neither
    the identity provider's metadata address nor its file is set. `entity_id` is this service's
    name at the provider (empty: <KG_PUBLIC_URL>/saml/metadata, where its metadata is served);
    `login_attribute` is the attribute (its name, an urn:oid:, or its friendly name) that names
    the account here at a first sign-in; `key_file` and `cert_file` are this service's signing
    and decryption pair (empty: a pair made on first use under the data dir); `label` is the
    login page's button."""

    model_config = ConfigDict(frozen=True)

    idp_metadata_url: str = ""  # one of these two: where the identity provider publishes its metadata,
    idp_metadata_file: str = ""  # or a copy of it on this host
    entity_id: str = ""
    login_attribute: str = "eduPersonPrincipalName"
    key_file: str = ""
    cert_file: str = ""
    label: str = "Sign in with your university account"

    @property
    def enabled(self) -> bool:
        return bool(self.idp_metadata_url or self.idp_metadata_file)

    @field_validator("idp_metadata_url")
    @classmethod
    def _metadata_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if value.strip() and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise ValueError(f"KG_SAML_IDP_METADATA_URL {value!r} is not an address; give the http(s) address the "
                             "identity provider publishes its metadata at")
        return value.strip()

    @model_validator(mode="after")
    def _one_source_and_a_whole_pair(self) -> SamlSettings:
        if self.idp_metadata_url and self.idp_metadata_file:
            raise ValueError("KG_SAML_IDP_METADATA_URL and KG_SAML_IDP_METADATA_FILE are both set: set one")
        if self.enabled and bool(self.key_file) != bool(self.cert_file):
            raise ValueError("KG_SAML_KEY_FILE and KG_SAML_CERT_FILE go together: set both (a key and its "
                             "certificate), or neither for a pair made in the data dir")
        if self.enabled and not self.login_attribute.strip():
            raise ValueError("KG_SAML_LOGIN_ATTRIBUTE is empty: name the attribute that gives a person's login")
        return self


class SlurmSettings(BaseModel):
    """GPU workers as Slurm jobs (`grader scale slurm`, grader/scale/), KG_SLURM_*: one job per
    GPU, each running `grader worker` until it has been idle for `idle_exit_s`."""

    model_config = ConfigDict(frozen=True)

    partition: str = ""  # empty: the cluster's default partition
    gres: str = "gpu:1"  # one GPU per job; a model by its gres type, e.g. "gpu:h100:1"; empty: none
    time_limit: str = "04:00:00"  # sbatch --time
    account: str = ""  # sbatch --account; empty: the user's default
    cpus_per_job: int = Field(default=4, ge=1)  # the worker, its builds (KG_BUILD_JOBS) and the timing cores
    max_jobs: int = Field(default=4, ge=0)  # our worker jobs pending or running at once
    # Jobs kept pending or running even with nothing queued: before a deadline, what `grader
    # capacity` says the course needs (0: none when idle)
    min_jobs: int = Field(default=0, ge=0)
    job_name: str = "kernelgrade-worker"  # how our jobs are told apart in squeue
    idle_exit_s: float = Field(default=300.0, gt=0)  # a job's worker exits after this long without a task
    # At the time limit's approach: this many seconds before it the worker is asked to stop taking
    # runs and finish the one under way (sbatch --signal=B:TERM@grace); runs still going at the
    # limit are given back (the cluster's KillWait is the time they have to do so)
    grace_s: int = Field(default=300, ge=0)
    interval_s: float = Field(default=30.0, gt=0)  # `grader scale slurm`'s loop
    extra_args: str = ""  # more sbatch options, split as a shell would (e.g. "--qos=course --mem=32G")


# A timing task's seconds beyond its GPU stage: unpack, build from the cache, children's stop.
TIMING_TASK_MARGIN_S = 300.0


class Settings(BaseSettings):
    # The groups (build, sandbox, unpack, smtp, throttle, argon2, sso, saml, slurm) keep their flat names: KG_BUILD_JOBS is
    # build.jobs, KG_UNPACK_MAX_FILES is unpack.max_files, and one such variable changes only its
    # own field. So no other field's name may start with a group's name and "_".
    model_config = SettingsConfigDict(env_prefix="KG_", env_file=".env", extra="ignore",
                                      env_nested_delimiter="_", env_nested_max_split=1,
                                      nested_model_default_partial_update=True)

    # Storage
    data_dir: Path = Path("var")
    database_url: str = ""  # default: sqlite file in data_dir
    broker_url: str = ""  # default: SQLite-backed kombu transport in data_dir
    task_queue: str = "grading"
    # The GPU model runs are graded on (e.g. "H200"): unless KG_TASK_QUEUE is set, the run queue
    # is then named after it ("gpu-h200"), so each model's workers have their own queue.
    gpu_model: str = ""
    # The service's CPU queue: similarity reports (grader/similarity/jobs.py), roster imports
    # (grader/course/roster_jobs.py) and the LMS's services (grader/lti/tasks.py: grades sent, rosters
    # read) are done by a worker consuming it, kept off the run queue so they neither wait behind
    # runs nor hold a GPU worker.
    similarity_queue: str = "similarity"
    # A similarity base fetched from a git repository (grader/similarity/fetch.py): only https URLs
    # to these hosts (a JSON list, e.g. ["github.com"]; empty: none, staff upload the starter's
    # zip), never to an address of the service's own machine or network unless that network is
    # listed (a course's own git server on the campus network); a clone is stopped past the time
    # and size caps. ca_file: the certificate authorities trusted instead of the system's (a campus CA).
    similarity_base_hosts: list[str] = Field(default_factory=list)
    similarity_base_private_networks: list[str] = Field(default_factory=list)
    similarity_base_ca_file: str = ""
    similarity_base_timeout_s: float = Field(default=120.0, gt=0)
    similarity_base_max_bytes: int = Field(default=200 * MiB, gt=0)

    # Uploads
    max_upload_bytes: int = 50 * MiB

    # Safe unpacking of submissions (UnpackSettings)
    unpack: UnpackSettings = UnpackSettings()

    # Builds
    nvcc: str = "nvcc"
    cuda_arch: str = "sm_90"
    nvcc_timeout_s: float = 300.0  # wall time of one nvcc, ours or a submission's (the ceiling)
    # A submission's nvcc, one sandboxed child per source file (BuildSettings)
    build: BuildSettings = BuildSettings(cpu_s=300, memory_bytes=4 * 1024 * MiB, max_processes=64,
                                         file_size_bytes=512 * MiB,
                                         docker_image="kernelgrade-worker")  # an image with nvcc at the worker's paths

    # GPU grading (the run stage). "auto": grade on the GPU when NVML reports one.
    gpu_grading: str = "auto"  # auto | on | off
    gpu_index: int = 0
    # Cores of the timing phase, "parent,timed" (worker/affinity.py): "auto" picks two of the
    # worker's cores, a different two per gpu_index; "off" leaves it to the scheduler.
    timing_cpus: str = "auto"
    # The sandbox every piece of submitted code runs in (SandboxSettings)
    sandbox: SandboxSettings = SandboxSettings(cpu_s=1800, memory_bytes=32 * 1024 * MiB,
                                               max_processes=256,  # room for CUDA/OpenMP threads
                                               file_size_bytes=4 * 1024 * MiB, docker_image="kernelgrade-sandbox")
    grading_seed: int | None = None  # fixed only for reproducing a grade; None = fresh inputs
    # The most wall time one run's GPU stage may hold the GPU: a correct grade takes 160-210 s
    # on an H200 (docs/benchmarks/grade-time.md), an honest slow one up to ~250 s (Problem 3's own budget is
    # 180 s); past it, what is left is settled as not run and the run is still scored.
    gpu_budget_s: float = Field(default=300.0, gt=0)
    # A GPU worker grades a run in two pieces (worker.pieces): its checks, sharing the GPU with the
    # checks of other runs, end it `checked` with every correctness verdict; its timing, a task of
    # its own queued behind every waiting check, holds the GPU (and its timing cores) alone and
    # scores it. False: one task grades the whole run, as before.
    timing_split: bool = True
    # Worker processes per GPU (`grader worker`'s default concurrency): with the split, that many
    # runs' builds and checks share the GPU while a timing waits for them and then runs alone.
    gpu_slots: int = Field(default=1, ge=1, le=16)
    # Days a GPU worker's start, restart or leaving out stays recorded (grader.gpu_events; /ops/workers):
    # a GPU's newest row, which says whether it is out, is always kept.
    gpu_event_retention_days: float = Field(default=90.0, gt=0)
    # CUDA's compute-sanitizer on a kernel problem's smallest failed case (worker/sanitizer.py):
    # "auto" (on PATH, beside nvcc, in $CUDA_HOME/bin), "off", or the tool's path; its findings
    # are shown beside the lost points and never change them. sanitizer_cap_s bounds a run's
    # whole use of it (within what is left of the GPU budget); a correct submission never runs it.
    sanitizer: str = "auto"
    sanitizer_cap_s: float = Field(default=120.0, gt=0)

    # Worker
    task_soft_time_limit_s: int = 1500
    task_time_limit_s: int = 1800
    heartbeat_interval_s: float = 5.0
    heartbeat_timeout_s: float = 60.0  # a claim older than this is presumed dead
    max_attempts: int = 3  # infrastructure retries before a run is failed as infra_error
    # A run whose staged sources, rubric, engine, toolchain, GPU model and stage settings equal
    # those of the same student's earlier scored run takes that run's measurements instead of
    # measuring again (grader/runs/reuse.py); a staff re-grade always measures. False: every run measures.
    reuse_measurements: bool = True
    # A queued run whose task was sent this long ago without being claimed is sent again (the
    # fallback when the broker cannot be read: the embedded SQLite transport, Redis down).
    requeue_after_s: float = 900.0
    reconcile_interval_s: float = 30.0
    # A queued run sent this long ago whose task a Redis broker no longer holds (neither waiting
    # nor delivered) is sent again: lost messages are re-sent within this plus reconcile_interval_s.
    resend_unheld_after_s: float = Field(default=20.0, gt=0)
    # A worker whose claim of a run failed on a database error, or that could not end a claim it
    # saved (grader/runs/lifecycle.py), retries the task after this long (a Celery retry carrying
    # the claim: the message is never acknowledged away, and the claim is taken back).
    claim_retry_after_s: float = Field(default=5.0, gt=0)
    # A worker exits (warm shutdown) after this many seconds without a task; 0: never. `grader
    # worker --idle-exit` sets it; a Slurm job's worker gets KG_SLURM_IDLE_EXIT_S.
    worker_idle_exit_s: float = Field(default=0.0, ge=0)
    stage_log_limit_bytes: int = 64 * 1024

    # Browser sessions: a row per login (grader/auth/sessions.py), its id in a signed cookie. Empty
    # secret_key: a random key kept in data_dir/secret_key (created on first use); production
    # sets KG_SECRET_KEY. A session ends after session_idle_s without a request (each request
    # renews it), and session_max_age_s after login however much it is used.
    secret_key: str = ""
    session_idle_s: int = Field(default=2 * 3600, ge=60)
    session_max_age_s: int = Field(default=24 * 3600, ge=60)
    session_https_only: bool = False  # set true behind HTTPS: the cookie gets `Secure`
    password_min_length: int = Field(default=8, ge=8)  # passwords chosen on the web page or `grader user add`
    # A password reset link (grader/auth/password_reset.py) works once, for this long after it is issued
    password_reset_max_age_s: int = Field(default=24 * 3600, ge=60)
    # The cost of a password hash (Argon2Settings)
    argon2: Argon2Settings = Argon2Settings()
    # Single sign-on (SsoSettings), and the site roles whose accounts may still log in with a
    # password here (a JSON list or comma-separated, e.g. "instructor"; by default every role).
    # An account of another role is refused on the password form and gets no /forgot link;
    # single sign-on, LMS launches and API tokens are not affected.
    sso: SsoSettings = SsoSettings()
    slurm: SlurmSettings = SlurmSettings()  # GPU workers as Slurm jobs (SlurmSettings)
    saml: SamlSettings = SamlSettings()  # SAML 2.0 single sign-on (SamlSettings), beside or instead of sso
    password_login_roles: Annotated[list[Role], NoDecode] = Field(default_factory=lambda: list(Role))

    # Roster import (CSV of students): the largest file the page accepts
    roster_max_bytes: int = 1 * MiB

    # Run notices by e-mail (SmtpSettings)
    smtp: SmtpSettings = SmtpSettings()
    # A course's staff get one mail about failed grading (infra_error) per this many seconds at
    # most: the runs an outage fails within it are in that one mail's link, not a mail each (grader/notify.py)
    staff_mail_quiet_s: int = Field(default=900, ge=0)
    # The address users reach the service at (e.g. https://grader.example.edu): every absolute link
    # the service hands out is built on it (never on the request's Host header), and forms are
    # accepted only from its origin (grader/security.py)
    public_url: str = ""
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (addresses or CIDR
    # blocks, a JSON list); by default none: the client's address is the connection's
    # (grader/auth/client_address.py)
    trusted_proxies: list[str] = Field(default_factory=list)
    # Login, /forgot and API-token attempts (ThrottleSettings)
    throttle: ThrottleSettings = ThrottleSettings()

    # Uploads per student (grader/ratelimit.py): at most upload_rate_limit in any window of
    # upload_rate_window_s seconds, counted per user in the database (every web process shares
    # the counts); 0 turns it off.
    upload_rate_limit: int = 30
    upload_rate_window_s: float = 300.0
    # The bytes each student may keep in one assignment (grader/course/storage.py: each distinct
    # upload once; staff exempt; 0: no quota); an assignment's settings page may set its own
    storage_quota_bytes: int = Field(default=200 * MiB, ge=0)
    # A re-send of the same bytes by the same student to the same assignment within this many
    # seconds answers with the earlier submission instead of a new one (grader/service.py; 0: off)
    upload_dedup_window_s: float = Field(default=120.0, ge=0)
    # The collector (grader/storage/collector.py) removes an unreferenced blob only once it is older than
    # the longest an upload may take between its move into place and its commit
    upload_max_duration_s: float = Field(default=3600.0, gt=0)
    collect_interval_s: float = Field(default=600.0, gt=0)  # `grader reconcile --loop` collects this often

    # Course operations: graded runs per student in any rolling window (grader/course/quotas.py; staff
    # exempt; 0: off) and the zone deadlines are shown and entered in (stored in UTC)
    quota_runs: int = 0
    quota_window_s: float = 24 * 3600.0
    course_timezone: str = "UTC"

    # Gradebook page: students per page (the charts and exports always cover every student)
    gradebook_page_size: int = Field(default=100, ge=1)

    # Run page: a queued run's ETA is the median duration of this many recent finished runs
    eta_recent_runs: int = 20

    # Bootstrap: the assignments graded here, by rubric slug (the first is the default one);
    # "hw4" is the project's own assignment (rubrics/hw4/rubric.yaml)
    rubrics: list[str] = Field(default_factory=lambda: ["hw4"])
    # Folders searched for <slug>.yaml after the project's rubrics/, e.g. a course's own
    # assignments, as a JSON list; each rubric's plug-in module must be importable
    # (worker.assignment). Nothing global: every service call that loads a rubric by slug passes
    # these to worker.rubric.load_rubric(slug, search=...).
    rubric_dirs: list[Path] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The sources pydantic-settings reads, in its order; a `.env` others can read is refused
        before a line of it is read (ExposedSecretFile)."""
        if isinstance(dotenv_settings, DotEnvSettingsSource):
            files = dotenv_settings.env_file
            for name in [files] if isinstance(files, str | Path) else files or []:
                refuse_exposed(Path(name))
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @classmethod
    def groups(cls) -> dict[str, type[BaseModel]]:
        """The grouped fields (build, sandbox, unpack, smtp, throttle, argon2, sso, saml, slurm) and their models."""
        return {name: type(field.default) for name, field in cls.model_fields.items()
                if isinstance(field.default, BaseModel)}

    @classmethod
    def variable_names(cls) -> set[str]:
        """Every KG_* variable read: KG_<FIELD>, and KG_<GROUP>_<FIELD> for a group's field (its
        alias where it has one: KG_SMTP_FROM)."""
        groups = cls.groups()
        return {f"KG_{name}_{info.alias or field}".upper() for name, model in groups.items()
                for field, info in model.model_fields.items()} | {
            f"KG_{name}".upper() for name in cls.model_fields if name not in groups}

    @classmethod
    def from_variables(cls, variables: Mapping[str, str], **given: Any) -> Settings:
        """Settings from KG_* variables held in a mapping (a compose file's, a worker's
        environment-to-be), read as the process environment is read: KG_BUILD_JOBS sets
        build.jobs and leaves the group's other fields alone. `given` wins over both."""
        groups = cls.groups()
        values: dict[str, Any] = {}
        for key, value in variables.items():
            if not key.upper().startswith("KG_"):
                continue
            name = key[3:].lower()
            group, _, field = name.partition("_")
            if group in groups and field:
                values.setdefault(group, {})[field] = value
            else:
                values[name] = value
        return cls(_env_file=None, **{**values, **given})  # type: ignore[call-arg]

    @model_validator(mode="after")
    def _queue_per_gpu_model(self) -> Settings:
        if self.gpu_model and "task_queue" not in self.model_fields_set:
            self.task_queue = "gpu-" + re.sub(r"[^a-z0-9]+", "-", self.gpu_model.lower()).strip("-")
        return self

    @model_validator(mode="after")
    def _a_timing_can_wait_its_turn(self) -> Settings:
        # With the split, a timing task may wait for the GPU alone behind every other slot's
        # timing before its own: each holds it for at most the GPU budget (its queueing is not
        # counted against its own budget, worker.gpu.budget), and the task also unpacks, builds
        # and stops its children (TIMING_TASK_MARGIN_S). A soft time limit below that would stop a
        # healthy timing as a fault, again on every retry.
        worst = (self.split_slots or 1) * self.gpu_budget_s + TIMING_TASK_MARGIN_S
        if (self.split_slots or 1) > 1 and self.task_soft_time_limit_s < worst:
            raise ValueError(
                f"KG_GPU_SLOTS={self.gpu_slots} with KG_GPU_BUDGET_S={self.gpu_budget_s:g} lets a timing task take up "
                f"to {worst:g} s (waiting its turn on the GPU behind the other slots' timings), past "
                f"KG_TASK_SOFT_TIME_LIMIT_S={self.task_soft_time_limit_s}: raise KG_TASK_SOFT_TIME_LIMIT_S to at least "
                f"{worst:g} (and KG_TASK_TIME_LIMIT_S above it), or use fewer slots")
        return self

    @model_validator(mode="after")
    def _sso_needs_the_address(self) -> Settings:
        if self.sso.enabled and not self.public_url:
            raise ValueError("KG_SSO_ISSUER is set but KG_PUBLIC_URL is not: the provider sends people back to "
                             "<KG_PUBLIC_URL>/login/sso/callback, so set the address users reach the service at")
        if self.saml.enabled and not self.public_url:
            raise ValueError("KG_SAML_IDP_METADATA_URL (or _FILE) is set but KG_PUBLIC_URL is not: the identity "
                             "provider posts its answers to <KG_PUBLIC_URL>/saml/acs, so set the address users "
                             "reach the service at")
        return self

    @field_validator("password_login_roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        return _text_list(value)

    @field_validator("public_url")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        if value and not _site_address(value):
            raise ValueError(f"KG_PUBLIC_URL {value!r} is not the service's address; give one such as "
                             "https://grader.example.edu (scheme and host, an optional path)")
        return value.strip().rstrip("/")

    @field_validator("trusted_proxies", "similarity_base_hosts", "similarity_base_private_networks", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        """A JSON list given as text (Settings.from_variables reads variables as text)."""
        return json.loads(value) if isinstance(value, str) and value.strip() else value or []

    @field_validator("trusted_proxies", "similarity_base_private_networks")
    @classmethod
    def _networks(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"KG_{(info.field_name or '').upper()}: {entry!r} is not an address or CIDR block "
                                 "(e.g. [\"10.0.0.5\", \"172.16.0.0/12\"])") from None
        return value

    @field_validator("course_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"KG_COURSE_TIMEZONE {value!r} is not a time zone name; use one such as "
                             "America/New_York, or UTC") from None
        return value

    @property
    def secret_key_path(self) -> Path:
        """Where the embedded default keeps the session key it made (when KG_SECRET_KEY is unset)."""
        return self.data_dir / "secret_key"

    @property
    def embedded_database_path(self) -> Path:
        return self.data_dir / "kernelgrade.db"

    @property
    def embedded_broker_path(self) -> Path:
        return self.data_dir / "broker.db"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.embedded_database_path.resolve()}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.embedded_broker_path.resolve()}"

    @property
    def is_embedded(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def course_zone(self) -> ZoneInfo:
        """The course's time zone: every page and notice shows instants in it."""
        return ZoneInfo(self.course_timezone)

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def split_slots(self) -> int | None:
        """Check slots per GPU when runs are graded in two pieces (the queue's two waits); None: whole grades."""
        return self.gpu_slots if self.timing_split and self.gpu_grading != "off" else None

    @property
    def gpu_lock_dir(self) -> Path:
        """The GPU locks of this host's workers (worker.gpu.gpu_lock): one folder per data dir."""
        return self.data_dir / "gpu-locks"

    @property
    def build_cache_dir(self) -> Path:
        return self.build.cache_dir or self.data_dir / "build-cache"


@functools.cache
def get_settings() -> Settings:
    return Settings()
