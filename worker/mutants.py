"""Mutants: realistic broken variants of a reference kit, for the grader's regression suite.

An assignment's mutant set is the file its plug-in names (worker.assignment; hw4's is
starter/mutants/hw4.yaml):

    mutants:
      - id: softmax_fw_no_syncthreads
        description: what a student got wrong
        kind: correctness            # or: speed (values right, speed credit must be lost), or
                                     # gaming (values right, the scored speedup must not rise)
        must_fail: ["1.1"]           # problem ids of the rubric it must fail / lose speed on
        detect: abi                  # optional hint for the GPU test: how the failure shows
        edits:
          - file: src/softmax_kernel.cu
            find: "exact text"       # must occur exactly once in the reference file
            replace: "new text"
          - file: minitorch/nn.py
            regex: "pattern"         # or a regular expression (Python re, MULTILINE),
            replace: "repl"          # which must match exactly once; replace may use \\1

`apply_mutant` copies the reference (markers kept, build outputs left out) and applies the
edits; it fails loudly (MutantError) when a `find` no longer matches exactly once, so the set
breaks visibly when the reference changes. Standard library + PyYAML only.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from worker.assignment import assignment_of
from worker.rubric import load_rubric
from worker.starter_kit import starter_files

KINDS = frozenset({"correctness", "speed", "gaming"})


class MutantError(ValueError):
    """A mutant set is malformed, or a mutant no longer applies to the reference."""


@dataclass(frozen=True)
class Edit:
    file: str
    replace: str
    find: str | None = None
    regex: str | None = None

    def apply(self, text: str, mutant_id: str) -> str:
        if self.find is not None:
            count = text.count(self.find)
            if count != 1:
                raise MutantError(
                    f"mutant {mutant_id}: in {self.file}, 'find' text occurs {count} times "
                    f"(must be exactly once): {self.find!r}"
                )
            return text.replace(self.find, self.replace, 1)
        assert self.regex is not None
        pattern = re.compile(self.regex, re.MULTILINE)
        matches = list(pattern.finditer(text))
        if len(matches) != 1:
            raise MutantError(
                f"mutant {mutant_id}: in {self.file}, 'regex' matches {len(matches)} times "
                f"(must be exactly once): {self.regex!r}"
            )
        return pattern.sub(self.replace, text, count=1)


@dataclass(frozen=True)
class Mutant:
    id: str
    description: str
    kind: str
    must_fail: tuple[str, ...]
    edits: tuple[Edit, ...]
    detect: str = "abi"

    @property
    def files(self) -> tuple[str, ...]:
        """The files this mutant edits, in first-edit order, without repeats."""
        return tuple(dict.fromkeys(e.file for e in self.edits))


def _parse_edit(raw: object, mutant_id: str) -> Edit:
    if not isinstance(raw, dict):
        raise MutantError(f"mutant {mutant_id}: each edit must be a mapping")
    unknown = set(raw) - {"file", "find", "regex", "replace"}
    if unknown:
        raise MutantError(f"mutant {mutant_id}: unknown edit keys {sorted(unknown)}")
    if "file" not in raw or "replace" not in raw:
        raise MutantError(f"mutant {mutant_id}: an edit needs 'file' and 'replace'")
    if ("find" in raw) == ("regex" in raw):
        raise MutantError(f"mutant {mutant_id}: an edit needs exactly one of 'find' or 'regex'")
    file = str(raw["file"])
    if file.startswith("/") or ".." in Path(file).parts:
        raise MutantError(f"mutant {mutant_id}: edit file must be relative inside the kit: {file}")
    find = raw.get("find")
    if find is not None and not str(find):
        raise MutantError(f"mutant {mutant_id}: empty 'find'")
    return Edit(
        file=file,
        replace=str(raw["replace"]),
        find=None if find is None else str(find),
        regex=None if raw.get("regex") is None else str(raw["regex"]),
    )


def parse_mutants(data: object, source: str = "<mutants>",
                  problem_ids: frozenset[str] | None = None) -> list[Mutant]:
    """The mutants of `data`; with `problem_ids` (the rubric's), each must_fail lies within them."""
    if not isinstance(data, dict) or not isinstance(data.get("mutants"), list):
        raise MutantError(f"{source}: expected a mapping with a 'mutants' list")
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for raw in data["mutants"]:
        if not isinstance(raw, dict) or "id" not in raw:
            raise MutantError(f"{source}: every mutant needs an 'id'")
        mid = str(raw["id"])
        if mid in seen:
            raise MutantError(f"{source}: duplicate mutant id {mid}")
        seen.add(mid)
        kind = str(raw.get("kind", ""))
        if kind not in KINDS:
            raise MutantError(f"mutant {mid}: kind must be one of {sorted(KINDS)}, not {kind!r}")
        must_fail = tuple(str(p) for p in raw.get("must_fail") or ())
        if not must_fail or (problem_ids is not None and not set(must_fail) <= problem_ids):
            raise MutantError(f"mutant {mid}: must_fail must be a non-empty subset of "
                              f"{sorted(problem_ids or ())}")
        edits = tuple(_parse_edit(e, mid) for e in raw.get("edits") or ())
        if not edits:
            raise MutantError(f"mutant {mid}: no edits")
        mutants.append(
            Mutant(
                id=mid,
                description=str(raw.get("description", "")).strip(),
                kind=kind,
                must_fail=must_fail,
                edits=edits,
                detect=str(raw.get("detect", "abi")),
            )
        )
    return mutants


def load_mutants(slug: str) -> list[Mutant]:
    """The mutant set of the assignment `slug`, checked against its rubric's problems."""
    rubric = load_rubric(slug)
    path = assignment_of(rubric).mutants_file
    if path is None or not path.is_file():
        raise MutantError(f"no mutant set for {slug!r}: {path or 'its plug-in names none'}")
    return parse_mutants(yaml.safe_load(path.read_text()), path.name, frozenset(p.id for p in rubric.problems))


def mutate_text(reference_dir: Path, mutant: Mutant) -> dict[str, str]:
    """The mutated text of every file the mutant edits (edits applied in order)."""
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        if edit.file not in texts:
            path = Path(reference_dir) / edit.file
            if not path.is_file():
                raise MutantError(f"mutant {mutant.id}: file {edit.file} not in the reference kit")
            texts[edit.file] = path.read_text()
        texts[edit.file] = edit.apply(texts[edit.file], mutant.id)
    return texts


def touched_kernels(mutant: Mutant, kernels, root: Path) -> list:
    """The kernel targets (worker.build.KernelTarget) a mutant affects: those whose source it
    edits, plus those that #include a header it edits (by file name). `root` holds the sources."""
    touched = set(mutant.files)
    headers = {Path(f).name for f in touched if f.endswith((".h", ".cuh", ".hpp", ".inl"))}
    chosen = []
    for target in kernels:
        if target.source in touched:
            chosen.append(target)
            continue
        source = Path(root) / target.source
        if headers and source.is_file():
            includes = set(re.findall(r'#\s*include\s+"(?:[^"]*/)?([^"/]+)"', source.read_text()))
            if headers & includes:
                chosen.append(target)
    return chosen


def apply_mutant(reference_dir: Path, mutant: Mutant, dest: Path) -> Path:
    """Copy `reference_dir` to `dest` (build outputs and caches left out, solution markers
    kept) with the mutant's edits applied. `dest` must not exist or be an empty folder.
    Raises MutantError when an edit no longer applies; nothing is written in that case."""
    reference_dir = Path(reference_dir)
    dest = Path(dest)
    texts = mutate_text(reference_dir, mutant)  # fail before writing anything
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"destination exists and is not an empty folder: {dest}")
    dest.mkdir(parents=True, exist_ok=True)
    for rel in starter_files(reference_dir):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(reference_dir / rel, target)
    for rel, text in texts.items():
        (dest / rel).write_text(text)
    return dest


# --------------------------------------------------------------------------- probes
#
# Python-side mutants are detected by running the mutant tree's own MiniTorch in a child
# process (cwd = the tree, so `minitorch` and its relative .so paths resolve there):
#
#     python -m worker.mutants probe {binding_grads|fused_calls} {cuda|numpy}
#
# prints one JSON object. `cuda` uses CudaKernelOps (needs the built .so files, pycuda and
# torch); `numpy` uses the kit's NumpyOps (CPU), which carries the same fused-op interface.
# numpy and minitorch are imported inside the probes only: this module stays light.

FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")


def _probe_backend(name: str):  # pragma: no cover - runs in the child
    import minitorch

    if name == "cuda":
        from minitorch.cuda_kernel_ops import CudaKernelOps

        return minitorch, CudaKernelOps
    if name == "numpy":
        return minitorch, minitorch.NumpyOps
    raise SystemExit(f"unknown backend {name!r}")


def _close(got, want, atol: float, rtol: float) -> tuple[bool, str]:
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, f"shape {got.shape} != {want.shape}"
    diff = np.abs(got - want)
    good = np.isfinite(got) & (diff <= atol + rtol * np.abs(want))
    if good.all():
        return True, f"max_err {float(diff.max()) if diff.size else 0.0:.3g}"
    bad = int((~good).sum())
    return False, f"{bad} of {good.size} out of tolerance (atol={atol:g}, rtol={rtol:g})"


def probe_binding_grads(backend_name: str) -> dict:
    """Tensor.attn_softmax / Tensor.layernorm forward and autodiff backward through the
    tree's binding, against float64 references with the course's tolerances.
    Returns {problem id: {"ok": bool, "message": str}} for 1.1, 1.2, 2.1, 2.2."""
    import numpy as np

    mt, ops = _probe_backend(backend_name)
    backend = mt.TensorBackend(ops)
    results: dict[str, dict] = {}

    def record(problem: str, ok: bool, message: str) -> None:
        prev = results.get(problem)
        if prev is None or (prev["ok"] and not ok):
            results[problem] = {"ok": ok, "message": message}

    def t(arr, grad=False):
        return mt.tensor_from_numpy(np.asarray(arr, dtype=np.float32), backend=backend, requires_grad=grad)

    for batch, from_len, to_len, future in ((2, 9, 9, True), (2, 40, 100, False), (1, 33, 33, False)):
        rng = np.random.default_rng(1000 * batch + to_len)
        x = rng.standard_normal((batch, 4, from_len, to_len)).astype(np.float32) * 2
        mask = np.where(rng.random((batch, to_len)) < 0.3, -1e8, 0.0).astype(np.float32)
        mask[:, 0] = 0.0
        g = rng.standard_normal(x.shape).astype(np.float32)
        z = x.astype(np.float64) + mask.astype(np.float64)[:, None, None, :]
        if future:
            z = np.where(np.triu(np.ones((from_len, to_len), bool), 1), -np.inf, z)
        y = np.exp(z - z.max(-1, keepdims=True))
        y /= y.sum(-1, keepdims=True)
        dx = y * (g - (g * y).sum(-1, keepdims=True))
        try:
            inp = t(x, True)
            out = inp.attn_softmax(t(mask), mask_future=future)
            record("1.1", *_close(out.to_numpy(), y, 1e-3, 1e-3))
        except Exception as exc:  # a crash in the binding is a failure of the problem
            record("1.1", False, f"forward: {type(exc).__name__}: {exc}")
            record("1.2", False, "forward failed")
            continue
        try:
            out.backward(t(g))
            if inp.grad is None:
                record("1.2", False, "inp.grad is None")
            else:
                record("1.2", *_close(inp.grad.to_numpy(), dx, 1e-2, 1e-3))
        except Exception as exc:
            record("1.2", False, f"backward: {type(exc).__name__}: {exc}")

    for rows, hidden in ((7, 32), (64, 256), (5, 1024)):
        rng = np.random.default_rng(rows + hidden)
        x = (rng.standard_normal((rows, hidden)) * 2 + 1).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, hidden).astype(np.float32)
        beta = rng.standard_normal(hidden).astype(np.float32)
        g = rng.standard_normal((rows, hidden)).astype(np.float32)
        x64 = x.astype(np.float64)
        rstd = 1.0 / np.sqrt(x64.var(1, keepdims=True) + 1e-8)
        xhat = (x64 - x64.mean(1, keepdims=True)) * rstd
        gx = g * gamma.astype(np.float64)
        want = {
            "inp": rstd * (gx - gx.mean(1, keepdims=True) - xhat * (gx * xhat).mean(1, keepdims=True)),
            "gamma": (g * xhat).sum(0),
            "beta": g.astype(np.float64).sum(0),
        }
        try:
            xs, gs, bs = t(x, True), t(gamma, True), t(beta, True)
            out = xs.layernorm(gs, bs)
            record("2.1", *_close(out.to_numpy(), xhat * gamma + beta, 1e-2, 1e-3))
        except Exception as exc:
            record("2.1", False, f"forward: {type(exc).__name__}: {exc}")
            record("2.2", False, "forward failed")
            continue
        try:
            out.backward(t(g))
            for name, tensor in (("inp", xs), ("gamma", gs), ("beta", bs)):
                if tensor.grad is None:
                    record("2.2", False, f"{name}.grad is None")
                    continue
                ok, message = _close(tensor.grad.to_numpy(), want[name], 1e-3, 1e-2)
                record("2.2", ok, f"{name}.grad: {message}")
        except Exception as exc:
            record("2.2", False, f"backward: {type(exc).__name__}: {exc}")
    return results


def probe_fused_calls(backend_name: str) -> dict:
    """Train-step of a small DecoderLM fused and unfused (same seed, no dropout): the fused
    model's calls of each backend fused op (counted by wrapping the ops class before the
    backend is built) and both losses. A fused path that silently composes basic ops shows as
    a zero count with a loss equal to the unfused one."""
    import numpy as np

    mt, ops = _probe_backend(backend_name)
    counts = {name: 0 for name in FUSED_OPS}
    for name in FUSED_OPS:
        original = getattr(ops, name)

        def counted(*args, __name=name, __fn=original, **kwargs):
            counts[__name] += 1
            return __fn(*args, **kwargs)

        setattr(ops, name, staticmethod(counted))
    backend = mt.TensorBackend(ops)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 50, (2, 12))
    targets = rng.integers(0, 50, (2, 12))
    losses: dict[str, float] = {}
    fused_counts: dict[str, int] = {}
    for fused in (False, True):
        for name in counts:
            counts[name] = 0
        mt.seed(5)
        model = mt.DecoderLM(
            n_vocab=50, n_embd=32, n_head=4, n_positions=12, p_dropout=0.0, ln_eps=1e-8,
            bias=True, backend=backend, use_fused_kernel=fused,
        )
        loss = mt.cross_entropy_loss(model(ids), targets)
        loss.backward()
        losses["fused" if fused else "unfused"] = float(loss.item())
        if fused:
            fused_counts = dict(counts)
        else:
            unfused_counts = dict(counts)
    return {"fused_counts": fused_counts, "unfused_counts": unfused_counts, "losses": losses}


PROBES = {"binding_grads": probe_binding_grads, "fused_calls": probe_fused_calls}


def probe_command(detect: str, backend: str) -> list[str]:
    """argv (minus the interpreter) of a probe child: run it with cwd = the mutant tree and
    the project root on PYTHONPATH (see probe_env)."""
    if detect not in PROBES:
        raise MutantError(f"no probe for detect={detect!r}")
    return ["-m", "worker.mutants", "probe", detect, backend]


def probe_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a probe child: the project root first on PYTHONPATH."""
    import os

    env = dict(os.environ if base is None else base)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _main(argv: list[str]) -> int:  # pragma: no cover - exercised through subprocesses
    import json
    import sys

    if len(argv) != 3 or argv[0] != "probe" or argv[1] not in PROBES:
        print("usage: python -m worker.mutants probe {binding_grads|fused_calls} {cuda|numpy}", file=sys.stderr)
        return 2
    # the tree under test (cwd) must win over anything else named minitorch
    sys.path.insert(0, str(Path.cwd()))
    result = PROBES[argv[1]](argv[2])
    print("PROBE_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(_main(sys.argv[1:]))
