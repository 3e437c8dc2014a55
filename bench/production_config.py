"""Production's configuration for the fidelity and gaming benches: the PipelineConfig and
GPU stage config that grader.runs.engine_config builds from grader.settings.Settings (its
defaults and KG_* variables). On the bare GPU machine pydantic (for Settings) may not be
installed, nor what engine_config's imports need; the fallbacks read the same definitions
from their source files.
"""
from __future__ import annotations
import __future__

import ast
import os
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_common import ROOT

from worker.rubric import Rubric


def _field_default(default: Any = None, default_factory: Callable[[], Any] | None = None, **_: Any) -> Any:
    return default_factory() if default_factory is not None else default


def _alias(default_expr: ast.expr | None) -> str | None:
    """The `alias=` of a `Field(...)` default: pydantic reads the variable by it (KG_SMTP_FROM)."""
    call = default_expr
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Field":
        return next((kw.value.value for kw in call.keywords
                     if kw.arg == "alias" and isinstance(kw.value, ast.Constant)), None)
    return None


def _coerce(text: str, annotation: str, default: Any) -> Any:
    """An environment value as pydantic would read it for these simple annotations."""
    optional = "None" in annotation
    if optional and text.strip().lower() in ("null", "none"):
        return None
    if "bool" in annotation or isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if annotation.startswith("int") or (isinstance(default, int) and not isinstance(default, bool)):
        return None if optional and not text.strip() else int(text)
    if annotation.startswith("float") or isinstance(default, float):
        return None if optional and not text.strip() else float(text)
    if "Path" in annotation:
        return Path(text)
    return text


def settings_from_source(source: Path, data_dir: Path, environ: dict[str, str]) -> types.SimpleNamespace:
    """Settings' declared defaults read from grader/settings.py (with KG_<FIELD> overrides from
    `environ`), for a machine without pydantic. A group (a field whose default calls a model
    class of the file, as `build: BuildSettings = BuildSettings(cpu_s=300, ...)`) is a namespace
    of that class's fields (its bases' too) with the call's arguments over their defaults and
    KG_<GROUP>_<FIELD> (the field's alias in place of its name where it has one) over both.
    Fields whose default is not a plain expression are left out; data_dir is `data_dir` and
    build_cache_dir under it."""
    tree = ast.parse(source.read_text())
    scope: dict[str, Any] = {"Path": Path, "Field": _field_default, "__builtins__": {}}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            try:
                value = eval(compile(ast.Expression(node.value), str(source), "eval"), scope)
            except Exception:
                continue
            for t in node.targets:
                scope[t.id] = value  # module constants such as MiB
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
    if "Settings" not in classes:
        raise SystemExit(f"{source} has no class Settings: update bench/production_config.py")

    def evaluate(expr: ast.expr) -> Any:
        return eval(compile(ast.Expression(expr), str(source), "eval"), scope)

    def fields(name: str, given: dict[str, Any], prefix: str) -> dict[str, Any]:
        node = classes[name]
        values: dict[str, Any] = {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                values.update(fields(base.id, given, prefix))
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            field, default_expr = item.target.id, item.value
            if (isinstance(default_expr, ast.Call) and isinstance(default_expr.func, ast.Name)
                    and default_expr.func.id in classes):  # a group
                args = {kw.arg: evaluate(kw.value) for kw in default_expr.keywords if kw.arg}
                values[field] = types.SimpleNamespace(**fields(default_expr.func.id, args, f"{prefix}{field}_"))
                continue
            if field in given:
                default = given[field]
            elif default_expr is None:
                continue
            else:
                try:
                    default = evaluate(default_expr)
                except Exception:
                    continue
            variable = f"{prefix}{_alias(default_expr) or field}".upper()
            env = next((v for k, v in environ.items() if k.upper() == variable), None)
            values[field] = default if env is None else _coerce(env, ast.unparse(item.annotation), default)
        return values

    values = fields("Settings", {}, "KG_")
    values["data_dir"] = data_dir
    values["build_cache_dir"] = data_dir / "build-cache"
    return types.SimpleNamespace(**values)


def functions_from_source(source: Path, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """The module-level functions `names` of `source`, compiled in a namespace holding the
    names its own imports provide (imports that fail here are skipped) and every other
    function of the file (which they may call): the production code itself, without the
    imports this machine lacks."""
    tree = ast.parse(source.read_text())
    namespace: dict[str, Any] = {"__name__": f"fidelity_copy_of_{source.stem}"}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            try:
                exec(compile(ast.Module([node], []), str(source), "exec"), namespace)
            except Exception:  # ImportError, or a package present in an unusable version
                continue
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    missing = set(names) - {n.name for n in functions}
    if missing:
        raise SystemExit(f"{source} has no function(s) {sorted(missing)}: update bench/production_config.py")
    code = compile(ast.Module(functions, []), str(source), "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return {n: namespace[n] for n in names}


def production_settings(data_dir: Path) -> tuple[Any, str]:
    try:
        from grader.settings import Settings
    except Exception:  # no pydantic (the bare GPU machine)
        return (settings_from_source(ROOT / "grader" / "settings.py", data_dir, dict(os.environ)),
                "grader/settings.py defaults + KG_* (no pydantic here)")
    return Settings(data_dir=data_dir), "grader.settings.Settings"


def production_builders() -> tuple[Callable[..., Any], Callable[..., Any], str]:
    try:
        from grader.runs.engine_config import gpu_stage_config, pipeline_config
    except Exception:  # an import this machine lacks (the bare GPU machine)
        found = functions_from_source(ROOT / "grader" / "runs" / "engine_config.py",
                                      ("pipeline_config", "build_policy", "gpu_stage_config"))
        return found["pipeline_config"], found["gpu_stage_config"], "grader/runs/engine_config.py functions"
    return pipeline_config, gpu_stage_config, "grader.runs.engine_config"


def _no_empty_user(policy: Any) -> Any:
    """KG_SANDBOX_USER="" (tests/gpu/suite.sh, when 'nobody' cannot use the GPU) means no uid
    drop, as the GPU tests read it."""
    return replace(policy, user=None) if policy.user == "" else policy


def production_configs(rubric: Rubric, data_dir: Path, problems: tuple[str, ...]) -> tuple[Any, Any, str]:
    settings, settings_source = production_settings(data_dir)
    pipeline_config, gpu_stage_config, builders_source = production_builders()
    config = pipeline_config(settings, rubric)
    config = replace(config, build_policy=_no_empty_user(config.build_policy))
    from rubrics.hw4.grade import GpuStageConfig  # the settings' StageConfig with hw4's own knobs

    stage = GpuStageConfig.of(gpu_stage_config(settings))
    stage = replace(stage, policy=_no_empty_user(stage.policy), problems=problems)
    return config, stage, f"{settings_source} through {builders_source}"

