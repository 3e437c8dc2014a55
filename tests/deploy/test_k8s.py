"""docker/k8s/ checked without a cluster: every core resource against the Kubernetes API schema
of a pinned version (the `kubernetes-validate` package, strict: an unknown field fails), KEDA's
resources (custom, outside those schemas) against a schema of the fields used here, the
commands and KG_* variables against the code, the GPU worker's needs (one GPU, the sandbox's
privileges, a grace period longer than a grade, its own lock and job folders), and the
autoscaling query run on a `runs` table.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from sqlalchemy import create_engine, insert, text

from grader.models import Run, RunState
from grader.reads.gpu_demand import GPU_DEMAND_SQL
from grader.settings import Settings
from tests.deploy.test_compose import _check_command

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "docker" / "k8s"
KUBERNETES_VERSION = "1.33.0"  # the schemas checked against (kubernetes-validate ships them)
SECRET = "kernelgrade-secrets"
SECRET_KEYS = {"KG_DATABASE_URL", "KG_BROKER_URL", "KG_SECRET_KEY", "KEDA_PG_CONNECTION"}
GRACE_NEEDED_S = Settings.model_fields["task_time_limit_s"].default  # the longest a task may run

# KEDA's ScaledObject and TriggerAuthentication (keda.sh/v1alpha1), the fields used here.
_NAMED = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}
_METADATA = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
KEDA_SCHEMAS: dict[str, dict[str, Any]] = {
    "ScaledObject": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"}, "metadata": _METADATA,
            "spec": {
                "type": "object", "required": ["scaleTargetRef", "triggers"], "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": _NAMED,
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "advanced": {"type": "object", "additionalProperties": False, "properties": {
                        "horizontalPodAutoscalerConfig": {"type": "object", "additionalProperties": False,
                                                          "properties": {"behavior": {"type": "object"}}}}},
                    "triggers": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "required": ["type", "metadata"], "additionalProperties": False,
                        "properties": {
                            "type": {"const": "postgresql"},
                            "authenticationRef": _NAMED,
                            "metadata": {  # KEDA reads every metadata value as a string
                                "type": "object", "required": ["query", "targetQueryValue"],
                                "additionalProperties": False,
                                "properties": {k: {"type": "string"} for k in (
                                    "query", "targetQueryValue", "activationTargetQueryValue")}}}}}}}}},
    "TriggerAuthentication": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"}, "metadata": _METADATA,
            "spec": {"type": "object", "required": ["secretTargetRef"], "additionalProperties": False, "properties": {
                "secretTargetRef": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["parameter", "name", "key"], "additionalProperties": False,
                    "properties": {k: {"type": "string", "minLength": 1} for k in ("parameter", "name", "key")}}}}}}},
}


def _documents() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    return [doc for name in listed for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return _documents()


def _of(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _containers(documents: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(resource name, its pod spec, a container) of every workload."""
    for doc in documents:
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            for container in pod["containers"]:
                yield doc["metadata"]["name"], pod, container


def test_core_resources_match_the_kubernetes_schema(documents: list[dict[str, Any]]) -> None:
    core = [d for d in documents if not d["apiVersion"].startswith("keda.sh/")]
    assert {d["kind"] for d in core} == {"Namespace", "ConfigMap", "PersistentVolumeClaim", "Job", "Deployment",
                                         "Service"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    # The check can fail: a misspelt field of a GPU worker's pod.
    broken = copy.deepcopy(_of(documents, "Deployment", "kernelgrade-gpu-worker"))
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 2100
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_keda_resources_match_their_schema(documents: list[dict[str, Any]]) -> None:
    keda = [d for d in documents if d["apiVersion"].startswith("keda.sh/")]
    assert sorted(d["kind"] for d in keda) == ["ScaledObject", "TriggerAuthentication"]
    for doc in keda:
        jsonschema.validate(doc, KEDA_SCHEMAS[doc["kind"]])
    scaled = _of(documents, "ScaledObject", "kernelgrade-gpu-worker")
    assert _of(documents, "Deployment", scaled["spec"]["scaleTargetRef"]["name"])
    (trigger,) = scaled["spec"]["triggers"]
    auth = _of(documents, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "connection", "name": SECRET, "key": "KEDA_PG_CONNECTION"}]
    broken = copy.deepcopy(scaled)
    broken["spec"]["triggers"][0]["metadata"]["targetQueryValue"] = 1  # not a string: KEDA refuses it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, KEDA_SCHEMAS["ScaledObject"])


def test_commands_and_variables_are_the_codes(documents: list[dict[str, Any]]) -> None:
    names = Settings.variable_names()
    settings = _of(documents, "ConfigMap", "kernelgrade-settings")["data"]
    assert set(settings) <= names
    for name, _, container in _containers(documents):
        _check_command(container["command"])
        assert {e["name"] for e in container.get("env", [])} <= names, name
        refs = container["envFrom"]
        assert {"configMapRef": {"name": "kernelgrade-settings"}} in refs and {"secretRef": {"name": SECRET}} in refs
    assert SECRET_KEYS - {"KEDA_PG_CONNECTION"} <= names
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert all(key in docs for key in SECRET_KEYS)  # the Secret the deployer makes is documented


def test_queues_builders_and_the_web_app(documents: list[dict[str, Any]]) -> None:
    shared = _of(documents, "ConfigMap", "kernelgrade-settings")["data"]
    api = Settings.from_variables(shared)
    builder = _of(documents, "Deployment", "kernelgrade-builder")["spec"]["template"]["spec"]["containers"][0]
    built = Settings.from_variables({**shared, **{e["name"]: e["value"] for e in builder["env"]}})
    assert built.task_queue == api.build.queue == "build" and built.gpu_grading == "off"
    worker = _of(documents, "Deployment", "kernelgrade-gpu-worker")["spec"]["template"]["spec"]["containers"][0]
    graded = Settings.from_variables({**shared, **{e["name"]: e["value"] for e in worker["env"]}})
    assert graded.task_queue == api.task_queue == "gpu-h200" and graded.gpu_index == 0
    web = _of(documents, "Deployment", "kernelgrade-api")["spec"]
    assert web["replicas"] == 1 and web["strategy"] == {"type": "Recreate"}  # uploads on one host


def test_gpu_worker_pod(documents: list[dict[str, Any]]) -> None:
    pod = _of(documents, "Deployment", "kernelgrade-gpu-worker")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["terminationGracePeriodSeconds"] > GRACE_NEEDED_S  # SIGTERM: the grade under way ends first
    assert container["command"] == ["grader", "worker"]  # execs Celery: PID 1 gets the SIGTERM
    security = container["securityContext"]
    assert security["runAsUser"] == 0 and security["capabilities"]["add"] == ["SYS_ADMIN"]
    assert security["seccompProfile"] == {"type": "Unconfined"} and security["appArmorProfile"] == {"type": "Unconfined"}
    assert security["privileged"] is False  # privileged would show it every GPU of the node
    assert "hostUsers" not in pod
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    data = "/var/lib/kernelgrade"
    assert volumes[mounts[data]]["persistentVolumeClaim"] == {"claimName": "kernelgrade-data"}
    for own in ("jobs", "gpu-locks"):  # the pod's own, not the shared volume's
        assert "emptyDir" in volumes[mounts[f"{data}/{own}"]], own
    settings = Settings(_env_file=None, data_dir=Path(data))  # type: ignore[call-arg]
    assert {str(settings.jobs_dir), str(settings.gpu_lock_dir)} <= set(mounts)


def _count(query: str, rows: list[tuple[RunState, datetime | None]]) -> int:
    engine = create_engine("sqlite://")
    Run.__table__.create(engine)  # type: ignore[attr-defined]
    with engine.begin() as connection:
        for state, sent in rows:
            connection.execute(insert(Run).values(submission_id=1, state=state.name, enqueued_at=sent,
                                                            reason="upload", attempts=0))
        return int(connection.execute(text(query)).scalar_one())


def test_the_autoscaling_query_counts_runs_needing_a_gpu(documents: list[dict[str, Any]]) -> None:
    (trigger,) = _of(documents, "ScaledObject", "kernelgrade-gpu-worker")["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    now = datetime.now(UTC)
    need: list[tuple[RunState, datetime | None]] = [(RunState.queued, now), (RunState.building, now), (RunState.running, now), (RunState.checked, now),
            (RunState.timing, now)]
    held_back: list[tuple[RunState, datetime | None]] = [(RunState.queued, None)]  # fair share or a paused assignment: not in the broker
    over: list[tuple[RunState, datetime | None]] = [(RunState.scored, now), (RunState.failed, now), (RunState.built, now)]
    assert _count(query, need + held_back + over) == len(need)
    assert _count(query, []) == 0
    # one definition: `grader scale slurm` counts with the same statement (grader/reads/gpu_demand.py)
    assert " ".join(query.split()) == GPU_DEMAND_SQL
