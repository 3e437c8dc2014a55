"""The measurement key: one sha256 over everything a run's measurements depend on, so a run whose
key equals an earlier scored run's may take that run's measurements instead of measuring again
(grader.runs.reuse; issue 55, "never measure the same thing twice").

What goes in, each under its own name so no two inputs can run together:
- the staged tree (worker.stage): every file's path and bytes. It is the rubric's student files
  laid over our rendered starter, so a file outside `student_files` (a README, a test) changes
  nothing, and one changed byte of a kernel changes the key;
- the rubric: its file (problems, scoring, cases), the reference kit our baseline is built from
  and the `kit_library` source;
- the engine: the worker package's code and the plug-in's own folder, which make the cases'
  inputs and do the measuring (a deploy that changes how we measure measures afresh);
- the toolchain: nvcc's version and flags, Python's version (not the host's name);
- `context`, from the caller: the GPU model, the targets and the stage's settings.

Every file is read each time (about a megabyte for hw4): a kit edited on disk under a running
worker is seen at once.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from worker.rubric import PROJECT_ROOT, Rubric

KEY_VERSION = 1  # bump when what goes into the key changes: old keys then match nothing
TOOLCHAIN_FIELDS = ("nvcc", "nvcc_flags", "python")  # of worker.pipeline.toolchain_info; not "host"
ENGINE_DIR = Path(__file__).resolve().parent
ENGINE_SUFFIXES = (".py", ".cu")
SKIPPED_DIRS = {"__pycache__"}


def _files(root: Path, paths: Iterable[Path]) -> str:
    """sha256 over (path relative to `root`, size, bytes) of each file, in path order."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix().encode()
        if path.is_symlink():  # staging makes none; named as a link, never followed
            data = b"link:" + str(path.readlink()).encode()
        else:
            data = path.read_bytes()
        digest.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def tree_digest(root: Path, suffixes: tuple[str, ...] | None = None) -> str:
    """Every file under `root` (of those suffixes, where given), caches left out."""
    paths = [p for p in root.rglob("*")
             if (p.is_file() or p.is_symlink()) and not SKIPPED_DIRS & set(p.relative_to(root).parts)
             and (suffixes is None or p.suffix in suffixes)]
    return _files(root, paths)


def _plugin_folder(rubric: Rubric) -> Path | None:
    """The folder of the rubric's plug-in module (a .py file, or a module name found on the path)."""
    if rubric.plugin is None:
        return None
    if rubric.plugin.endswith(".py"):
        return Path(rubric.plugin).parent
    spec = importlib.util.find_spec(rubric.plugin)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def rubric_inputs(rubric: Rubric) -> dict[str, str]:
    """Digests of what is graded and how: the rubric file, the kit, our basic ops, the engine."""
    inputs = {
        "rubric_file": _files(rubric.path.parent, [rubric.path]) if rubric.path else rubric.slug,
        "kit": tree_digest(rubric.starter_dir),
        "engine": tree_digest(ENGINE_DIR, ENGINE_SUFFIXES),
    }
    if rubric.kit_library is not None:
        inputs["kit_library"] = _files(PROJECT_ROOT, [PROJECT_ROOT / rubric.kit_library.source])
    plugin = _plugin_folder(rubric)
    if plugin is not None and plugin != ENGINE_DIR and ENGINE_DIR not in plugin.parents:
        inputs["plugin"] = _files(plugin, [p for p in plugin.glob("*.py") if p.is_file()])
    return inputs


def measurement_key(staged_root: Path, rubric: Rubric, toolchain: Mapping[str, Any],
                    context: Mapping[str, Any]) -> str:
    """The key of measuring the staged tree at `staged_root` by `rubric` with `toolchain`
    (worker.pipeline.toolchain_info's record) in `context` (JSON-able: GPU model, targets, settings)."""
    inputs = {
        "version": KEY_VERSION,
        "staged": tree_digest(staged_root),
        "rubric": rubric_inputs(rubric),
        "toolchain": {name: toolchain.get(name) for name in TOOLCHAIN_FIELDS},
        "context": context,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
