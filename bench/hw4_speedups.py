"""Course-style speedups of the reference kit (starter/hw4) on this machine's GPU.

    python3 bench/hw4_speedups.py          (from the project root, on a GPU machine)

Builds a copy of the kit with nvcc into a temporary folder (as tests/gpu/conftest.py does),
chdirs there, and times, for each problem, the MiniTorch composition (baseline, on combine.so)
against the fused op through the binding (custom), as the course defines the speedup:
warm-up, then interleaved baseline/custom pairs on fresh inputs, median and interquartile
range of the per-pair ratio. Problem 3 times whole training steps of DecoderLM unfused vs fused.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.build import Toolchain, build_kernels, cuda_include_dirs  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402

TRIALS = int(os.environ.get("KG_BENCH_TRIALS", "30"))
WARMUP = 3
TARGETS = {"1.1": 6.5, "1.2": 5.5, "2.1": 15.8, "2.2": 3.7, "3": 1.1}


def build_kit(tmp: Path) -> Path:
    rubric = load_rubric("hw4")
    root = tmp / "llmsys_hw4"
    shutil.copytree(rubric.starter_dir, root, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    arch = os.environ.get("KG_CUDA_ARCH", "native")
    toolchain = Toolchain(
        nvcc=os.environ.get("KG_NVCC", "nvcc"),
        flags=(*rubric.nvcc_flags, f"-arch={arch}"),
        include_dirs=cuda_include_dirs(),
    )
    for r in build_kernels(root, list(rubric.kernels), toolchain):
        if not r.ok:
            raise SystemExit(f"build of {r.name} failed:\n{r.log}")
    return root


def pair_stats(base: list[float], cust: list[float]):
    ratios = np.array(base) / np.array(cust)
    return (
        float(np.median(base)) * 1e3,
        float(np.median(cust)) * 1e3,
        float(np.median(ratios)),
        float(np.percentile(ratios, 25)),
        float(np.percentile(ratios, 75)),
    )


def interleaved(make_inputs, run_base, run_custom, trials=TRIALS, warmup=WARMUP):
    """Each trial: fresh inputs, then baseline and custom (order alternating), each timed alone."""
    for _ in range(warmup):
        run_base(make_inputs())
        run_custom(make_inputs())
    base, cust = [], []
    for i in range(trials):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            inputs = make_inputs()
            fn = run_base if which == 0 else run_custom
            t = fn(inputs)
            (base if which == 0 else cust).append(t)
    return pair_stats(base, cust)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="kg-bench-"))
    try:
        root = build_kit(tmp)
        os.chdir(root)
        sys.path.insert(0, str(root))
        import minitorch as mt
        import torch
        from minitorch.cuda_kernel_ops import CudaKernelOps

        CB = mt.TensorBackend(CudaKernelOps)
        rng = np.random.default_rng(0)

        def T(a, grad=False):
            return mt.tensor_from_numpy(np.asarray(a, dtype=np.float32), backend=CB, requires_grad=grad)

        rows_out = []

        # ---- 1.1 / 1.2 softmax
        for batch, seq in [(16, 64), (8, 128), (2, 512)]:
            shape = (batch, 8, seq, seq)

            def make(shape=shape, batch=batch, seq=seq):
                x = rng.standard_normal(shape).astype(np.float32)
                mask = np.where(rng.random((batch, seq)) < 0.1, -1e8, 0.0).astype(np.float32)
                mask[:, 0] = 0
                g = rng.standard_normal(shape).astype(np.float32)
                return x, mask, g

            def fw_base(inp, batch=batch, seq=seq):
                x, mask, _ = inp
                xt, mt_ = T(x), T(mask.reshape(batch, 1, 1, seq))
                return timed(lambda: mt.nn.softmax(xt + mt_, dim=3))

            def fw_cust(inp):
                x, mask, _ = inp
                xt, mt_ = T(x), T(mask)
                return timed(lambda: xt.attn_softmax(mt_))

            def bw_base(inp, batch=batch, seq=seq):
                x, mask, g = inp
                xt = T(x, True)
                out = mt.nn.softmax(xt + T(mask.reshape(batch, 1, 1, seq)), dim=3)
                gt = T(g)
                return timed(lambda: out.backward(gt))

            def bw_cust(inp):
                x, mask, g = inp
                xt = T(x, True)
                out = xt.attn_softmax(T(mask))
                gt = T(g)
                return timed(lambda: out.backward(gt))

            rows_out.append(("1.1 softmax fw", f"{shape}", *interleaved(make, fw_base, fw_cust)))
            rows_out.append(("1.2 softmax bw", f"{shape}", *interleaved(make, bw_base, bw_cust)))

        # ---- 2.1 / 2.2 layernorm
        for rows, hidden in [(1024, 32), (512, 32), (1024, 1024), (1024, 4096)]:

            def make(rows=rows, hidden=hidden):
                return (
                    rng.standard_normal((rows, hidden)).astype(np.float32),
                    rng.standard_normal(hidden).astype(np.float32),
                    rng.standard_normal(hidden).astype(np.float32),
                    rng.standard_normal((rows, hidden)).astype(np.float32),
                )

            def composed(x, gamma, beta):
                mean = x.mean(1)
                var = x.var(1)
                return (x - mean) / ((var + 1e-8) ** 0.5) * gamma + beta

            def fw_base(inp):
                x, gm, bt, _ = inp
                xt, gt, bt_ = T(x), T(gm), T(bt)
                return timed(lambda: composed(xt, gt, bt_))

            def fw_cust(inp):
                x, gm, bt, _ = inp
                xt, gt, bt_ = T(x), T(gm), T(bt)
                return timed(lambda: xt.layernorm(gt, bt_))

            def bw_base(inp):
                x, gm, bt, g = inp
                out = composed(T(x, True), T(gm, True), T(bt, True))
                gg = T(g)
                return timed(lambda: out.backward(gg))

            def bw_cust(inp):
                x, gm, bt, g = inp
                out = T(x, True).layernorm(T(gm, True), T(bt, True))
                gg = T(g)
                return timed(lambda: out.backward(gg))

            rows_out.append(("2.1 layernorm fw", f"({rows}, {hidden})", *interleaved(make, fw_base, fw_cust)))
            rows_out.append(("2.2 layernorm bw", f"({rows}, {hidden})", *interleaved(make, bw_base, bw_cust)))

        # ---- 3: DecoderLM training steps, unfused vs fused
        def make_trainer(fused: bool, batch: int, cfg: dict):
            mt.seed(1)
            model = mt.DecoderLM(**cfg, p_dropout=0.1, ln_eps=1e-5, bias=True, backend=CB, use_fused_kernel=fused)
            opt = mt.Adam(model.parameters(), lr=1e-4)
            data = np.random.default_rng(2)

            def step():
                seqs = data.integers(0, cfg["n_vocab"], (batch, cfg["n_positions"] + 1))
                t0 = time.perf_counter()
                opt.zero_grad()
                loss = mt.cross_entropy_loss(model(seqs[:, :-1]), seqs[:, 1:])
                loss.backward()
                opt.step()
                return time.perf_counter() - t0, loss.item()

            return step

        cfg = dict(n_vocab=10000, n_embd=256, n_head=8, n_positions=40)
        batch = 128
        steps = {f: make_trainer(f, batch, cfg) for f in (False, True)}
        probe, _ = steps[False]()
        if probe > 6.0:
            batch = 32
            steps = {f: make_trainer(f, batch, cfg) for f in (False, True)}
            steps[False]()
        steps[True]()
        pairs = int(os.environ.get("KG_BENCH_STEPS", "4"))
        base, cust, losses = [], [], []
        for i in range(pairs):
            for fused in ((False, True) if i % 2 == 0 else (True, False)):
                t, loss = steps[fused]()
                (cust if fused else base).append(t)
                losses.append(loss)
        rows_out.append(("3 DecoderLM step", f"batch {batch}, seq 40, V 10000, d 256, h 8", *pair_stats(base, cust)))

        print()
        print(f"GPU: {torch.cuda.get_device_name(0)}   trials per row: {TRIALS} (Problem 3: {pairs} step pairs)")
        head = f"{'problem':<18} {'shape':<42} {'baseline ms':>11} {'custom ms':>10} {'speedup [p25, p75]':>24} {'course':>7}"
        print(head)
        print("-" * len(head))
        for prob, shape, b, c, med, p25, p75 in rows_out:
            target = TARGETS[prob.split()[0]]
            print(f"{prob:<18} {shape:<42} {b:>11.3f} {c:>10.3f} {med:>8.2f}x [{p25:5.2f}, {p75:5.2f}] {target:>6.1f}x")
        print(f"Problem 3 losses finite: {bool(np.isfinite(losses).all())}; total bench time {time.perf_counter() - started:.0f} s")
        return 0
    finally:
        os.chdir(ROOT)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
