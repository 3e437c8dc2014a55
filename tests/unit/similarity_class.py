"""A seeded class of generated hw4 submissions for the similarity tests.

Each student starts from the student starter (our reference kit with its solutions stripped)
and fills every solution region with one of several implementations: the reference kit's own,
or one of the independently written ones below (different algorithms: two-pass vs fused
statistics, cub vs shuffles vs a shared-memory tree, online softmax, ...). Then a per-student
style is applied to the code they wrote: variable names, loop increments, casts, literals,
`const`, compound assignments. One pair is planted: the copier takes the original's files and
changes only their look (other names, comments, indentation, blank lines, two kernels
swapped in the file).
"""
from __future__ import annotations

import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from worker.rubric import Rubric
from worker.starter_kit import find_regions, render_starter

# Alternatives to the reference kit's body of each solution region (by label), dedented.
ALTERNATIVES: dict[str, list[str]] = {
    "Problem 1.1 ker_attn_softmax": [
        """\
        const int row = blockIdx.x;
        const int q = row % from_len;
        const int b = row / (nhead * from_len);
        float* x = inp + static_cast<size_t>(row) * to_len;
        const float* m = attn_mask == nullptr ? nullptr : attn_mask + static_cast<size_t>(b) * to_len;
        auto logit = [&](int j) -> float {
          if (mask_future && j > q) return -CUDART_INF_F;
          return m != nullptr ? x[j] + m[j] : x[j];
        };
        float mx = -CUDART_INF_F;
        for (int j = threadIdx.x; j < to_len; j += BLOCK_DIM) mx = fmaxf(mx, logit(j));
        mx = kg::block_reduce<kg::MaxOp>(mx);
        if (mx == -CUDART_INF_F) mx = 0.f;
        float total = 0.f;
        for (int j = threadIdx.x; j < to_len; j += BLOCK_DIM) total += expf(logit(j) - mx);
        total = kg::block_reduce<kg::SumOp>(total);
        const float norm = total > 0.f ? 1.f / total : 0.f;
        for (int j = threadIdx.x; j < to_len; j += BLOCK_DIM) x[j] = expf(logit(j) - mx) * norm;
        """,
        """\
        __shared__ float s_max[BLOCK_DIM];
        __shared__ float s_sum[BLOCK_DIM];
        const int tid = threadIdx.x;
        const int q = blockIdx.x % from_len;
        const int batch = blockIdx.x / (nhead * from_len);
        float* data = inp + static_cast<size_t>(blockIdx.x) * to_len;
        // online softmax: running maximum and rescaled running sum in one pass
        float run_max = -CUDART_INF_F;
        float run_sum = 0.f;
        for (int j = tid; j < to_len; j += BLOCK_DIM) {
          float v = -CUDART_INF_F;
          if (!(mask_future && j > q)) v = data[j] + (attn_mask ? attn_mask[static_cast<size_t>(batch) * to_len + j] : 0.f);
          if (v > run_max) {
            run_sum = run_sum * expf(run_max - v) + 1.f;
            run_max = v;
          } else if (v != -CUDART_INF_F) {
            run_sum += expf(v - run_max);
          }
        }
        s_max[tid] = run_max;
        s_sum[tid] = run_sum;
        __syncthreads();
        for (int stride = BLOCK_DIM / 2; stride > 0; stride >>= 1) {
          if (tid < stride) {
            const float m1 = s_max[tid];
            const float m2 = s_max[tid + stride];
            const float top = fmaxf(m1, m2);
            const float left = m1 == -CUDART_INF_F ? 0.f : s_sum[tid] * expf(m1 - top);
            const float right = m2 == -CUDART_INF_F ? 0.f : s_sum[tid + stride] * expf(m2 - top);
            s_max[tid] = top;
            s_sum[tid] = left + right;
          }
          __syncthreads();
        }
        const float top = s_max[0];
        const float denom = s_sum[0];
        for (int j = tid; j < to_len; j += BLOCK_DIM) {
          float v = -CUDART_INF_F;
          if (!(mask_future && j > q)) v = data[j] + (attn_mask ? attn_mask[static_cast<size_t>(batch) * to_len + j] : 0.f);
          data[j] = (v == -CUDART_INF_F || denom == 0.f) ? 0.f : expf(v - top) / denom;
        }
        """,
    ],
    "Problem 1.2 ker_attn_softmax_bw": [
        """\
        const int r = blockIdx.x * blockDim.y + threadIdx.y;
        if (r >= rows) return;
        float* g = grad + static_cast<size_t>(r) * softmax_len;
        const float* y = soft_out + static_cast<size_t>(r) * softmax_len;
        float acc = 0.f;
        for (int j = threadIdx.x; j < softmax_len; j += 32) acc += g[j] * y[j];
        for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
        acc = __shfl_sync(0xffffffffu, acc, 0);
        for (int j = threadIdx.x; j < softmax_len; j += 32) g[j] = y[j] * (g[j] - acc);
        """,
        """\
        cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
        const int r = blockIdx.x * blockDim.y + threadIdx.y;
        if (r >= rows) return;
        const size_t base = static_cast<size_t>(r) * softmax_len;
        float gv[ITERATIONS];
        float yv[ITERATIONS];
        float partial = 0.f;
        for (int it = 0; it < ITERATIONS; it++) {
          const int col = it * 32 + warp.thread_rank();
          gv[it] = col < softmax_len ? grad[base + col] : 0.f;
          yv[it] = col < softmax_len ? soft_out[base + col] : 0.f;
          partial += gv[it] * yv[it];
        }
        for (int mask = 16; mask >= 1; mask >>= 1) partial += warp.shfl_xor(partial, mask);
        for (int it = 0; it < ITERATIONS; it++) {
          const int col = it * 32 + warp.thread_rank();
          if (col < softmax_len) grad[base + col] = yv[it] * (gv[it] - partial);
        }
        """,
    ],
    "Problem 1.2 choose ITERATIONS": [
        """\
        const int chunks = kg::ceil_div(softmax_len, kg::kWarpSize);
        if (chunks <= 1) launch_softmax_bw_iters<1>(d_grad, d_soft, rows, softmax_len, stream);
        else if (chunks <= 2) launch_softmax_bw_iters<2>(d_grad, d_soft, rows, softmax_len, stream);
        else if (chunks <= 4) launch_softmax_bw_iters<4>(d_grad, d_soft, rows, softmax_len, stream);
        else if (chunks <= 8) launch_softmax_bw_iters<8>(d_grad, d_soft, rows, softmax_len, stream);
        else if (chunks <= 16) launch_softmax_bw_iters<16>(d_grad, d_soft, rows, softmax_len, stream);
        else if (chunks <= 32) launch_softmax_bw_iters<32>(d_grad, d_soft, rows, softmax_len, stream);
        else launch_softmax_bw_iters<64>(d_grad, d_soft, rows, softmax_len, stream);
        """,
        """\
        switch ((softmax_len + 255) / 256) {
          case 1: launch_softmax_bw_iters<8>(d_grad, d_soft, rows, softmax_len, stream); break;
          case 2: launch_softmax_bw_iters<16>(d_grad, d_soft, rows, softmax_len, stream); break;
          case 3:
          case 4: launch_softmax_bw_iters<32>(d_grad, d_soft, rows, softmax_len, stream); break;
          default: launch_softmax_bw_iters<64>(d_grad, d_soft, rows, softmax_len, stream); break;
        }
        """,
    ],
    "Problem 2.1 ker_layer_norm": [
        """\
        const int h = hidden4 * 4;
        const float* x = inp + static_cast<size_t>(blockIdx.x) * h;
        float* y = ln_res + static_cast<size_t>(blockIdx.x) * h;
        float s = 0.f;
        for (int i = threadIdx.x; i < h; i += blockDim.x) s += x[i];
        const float mu = kg::block_reduce<kg::SumOp>(s) / h;
        float sq = 0.f;
        for (int i = threadIdx.x; i < h; i += blockDim.x) {
          const float d = x[i] - mu;
          sq += d * d;
        }
        const float var = kg::block_reduce<kg::SumOp>(sq) / h;
        const float inv_std = 1.f / sqrtf(var + kg::kLnEpsilon);
        if (threadIdx.x == 0) {
          means[blockIdx.x] = mu;
          vars[blockIdx.x] = var;
        }
        for (int i = threadIdx.x; i < h; i += blockDim.x) y[i] = (x[i] - mu) * inv_std * scale[i] + bias[i];
        """,
        """\
        __shared__ float s_part[2][32];
        __shared__ float s_stats[2];
        const float4* xr = reinterpret_cast<const float4*>(inp) + static_cast<size_t>(blockIdx.x) * hidden4;
        float sum = 0.f;
        float sumsq = 0.f;
        for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
          const float4 v = xr[i];
          sum += v.x + v.y + v.z + v.w;
          sumsq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        sum = kg::warp_reduce<kg::SumOp>(sum);
        sumsq = kg::warp_reduce<kg::SumOp>(sumsq);
        const int lane = threadIdx.x % 32;
        const int wid = threadIdx.x / 32;
        if (lane == 0) {
          s_part[0][wid] = sum;
          s_part[1][wid] = sumsq;
        }
        __syncthreads();
        if (wid == 0) {
          const int nw = blockDim.x / 32;
          float a = lane < nw ? s_part[0][lane] : 0.f;
          float c = lane < nw ? s_part[1][lane] : 0.f;
          a = kg::warp_reduce<kg::SumOp>(a);
          c = kg::warp_reduce<kg::SumOp>(c);
          if (lane == 0) {
            const float n = hidden4 * 4.f;
            s_stats[0] = a / n;
            s_stats[1] = fmaxf(c / n - s_stats[0] * s_stats[0], 0.f);
            means[blockIdx.x] = s_stats[0];
            vars[blockIdx.x] = s_stats[1];
          }
        }
        __syncthreads();
        const float mu = s_stats[0];
        const float rs = rsqrtf(s_stats[1] + kg::kLnEpsilon);
        const float4* gs = reinterpret_cast<const float4*>(scale);
        const float4* bs = reinterpret_cast<const float4*>(bias);
        float4* yr = reinterpret_cast<float4*>(ln_res) + static_cast<size_t>(blockIdx.x) * hidden4;
        for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
          const float4 v = xr[i];
          const float4 g = gs[i];
          const float4 b = bs[i];
          float4 o;
          o.x = (v.x - mu) * rs * g.x + b.x;
          o.y = (v.y - mu) * rs * g.y + b.y;
          o.z = (v.z - mu) * rs * g.z + b.z;
          o.w = (v.w - mu) * rs * g.w + b.w;
          yr[i] = o;
        }
        """,
    ],
    "Problem 2.2 ker_ln_bw_dgamma_dbetta": [
        """\
        __shared__ float sg[32][33];
        __shared__ float sb[32][33];
        const int c = blockIdx.x * 32 + threadIdx.x;
        float pg = 0.f;
        float pb = 0.f;
        if (c < width) {
          for (int r = threadIdx.y; r < rows; r += 32) {
            const size_t k = static_cast<size_t>(r) * width + c;
            const float xh = (inp[k] - means[r]) * rsqrtf(vars[r] + kg::kLnEpsilon);
            pb += out_grad[k];
            pg += out_grad[k] * xh;
          }
        }
        sg[threadIdx.y][threadIdx.x] = pg;
        sb[threadIdx.y][threadIdx.x] = pb;
        __syncthreads();
        for (int s = 16; s > 0; s >>= 1) {
          if (threadIdx.y < s) {
            sg[threadIdx.y][threadIdx.x] += sg[threadIdx.y + s][threadIdx.x];
            sb[threadIdx.y][threadIdx.x] += sb[threadIdx.y + s][threadIdx.x];
          }
          __syncthreads();
        }
        if (threadIdx.y == 0 && c < width) {
          gamma_grad[c] = sg[0][threadIdx.x];
          betta_grad[c] = sb[0][threadIdx.x];
        }
        """,
        """\
        if (threadIdx.y != 0) return;
        const int col = blockIdx.x * blockDim.x + threadIdx.x;
        if (col >= width) return;
        float acc_gamma = 0.f;
        float acc_betta = 0.f;
        for (int r = 0; r < rows; ++r) {
          const float dy = out_grad[static_cast<size_t>(r) * width + col];
          const float centered = inp[static_cast<size_t>(r) * width + col] - means[r];
          acc_betta += dy;
          acc_gamma += dy * centered / sqrtf(vars[r] + kg::kLnEpsilon);
        }
        gamma_grad[col] = acc_gamma;
        betta_grad[col] = acc_betta;
        """,
    ],
    "Problem 2.2 ker_ln_bw_dinp": [
        """\
        const int h = hidden4 * 4;
        const size_t base = static_cast<size_t>(blockIdx.x) * h;
        const float mu = means[blockIdx.x];
        const float rs = rsqrtf(vars[blockIdx.x] + kg::kLnEpsilon);
        float s1 = 0.f;
        float s2 = 0.f;
        for (int i = threadIdx.x; i < h; i += blockDim.x) {
          const float dxh = out_grad[base + i] * gamma[i];
          s1 += dxh;
          s2 += dxh * (inp[base + i] - mu) * rs;
        }
        s1 = kg::block_reduce<kg::SumOp>(s1) / h;
        s2 = kg::block_reduce<kg::SumOp>(s2) / h;
        for (int i = threadIdx.x; i < h; i += blockDim.x) {
          const float dxh = out_grad[base + i] * gamma[i];
          const float xh = (inp[base + i] - mu) * rs;
          inp_grad[base + i] = (dxh - s1 - xh * s2) * rs;
        }
        """,
        """\
        const float4* go = reinterpret_cast<const float4*>(out_grad) + static_cast<size_t>(blockIdx.x) * hidden4;
        const float4* xi = reinterpret_cast<const float4*>(inp) + static_cast<size_t>(blockIdx.x) * hidden4;
        const float4* gm = reinterpret_cast<const float4*>(gamma);
        float4* gi = reinterpret_cast<float4*>(inp_grad) + static_cast<size_t>(blockIdx.x) * hidden4;
        const float mu = means[blockIdx.x];
        const float rs = rsqrtf(vars[blockIdx.x] + kg::kLnEpsilon);
        float stats[2] = {0.f, 0.f};
        for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
          const float4 d = go[i];
          const float4 xv = xi[i];
          const float4 w = gm[i];
          const float dv[4] = {d.x * w.x, d.y * w.y, d.z * w.z, d.w * w.w};
          const float xv4[4] = {(xv.x - mu) * rs, (xv.y - mu) * rs, (xv.z - mu) * rs, (xv.w - mu) * rs};
          for (int c = 0; c < 4; ++c) {
            stats[0] += dv[c];
            stats[1] += dv[c] * xv4[c];
          }
        }
        kg::block_reduce_n<kg::SumOp, 2>(stats);
        const float n = 4.f * hidden4;
        for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
          const float4 d = go[i];
          const float4 xv = xi[i];
          const float4 w = gm[i];
          float4 out;
          out.x = rs * (d.x * w.x - stats[0] / n - (xv.x - mu) * rs * stats[1] / n);
          out.y = rs * (d.y * w.y - stats[0] / n - (xv.y - mu) * rs * stats[1] / n);
          out.z = rs * (d.z * w.z - stats[0] / n - (xv.z - mu) * rs * stats[1] / n);
          out.w = rs * (d.w * w.w - stats[0] / n - (xv.w - mu) * rs * stats[1] / n);
          gi[i] = out;
        }
        """,
    ],
    "NumpyOps.attn_softmax_bw (CPU version of Problem 1.2)": [
        """\
        y = np.asarray(_np(soft_inp), dtype=np.float64)
        dy = np.asarray(_np(out_grad), dtype=np.float64)
        inner = np.einsum("...i,...i->...", dy, y)[..., None]
        return _wrap((y * dy - y * inner).astype(np.float32), out_grad.backend)
        """,
    ],
    "NumpyOps.layernorm_fw (CPU version of Problem 2.1)": [
        """\
        width = inp.shape[-1]
        rows = _np(inp).reshape(-1, width)
        mu = rows.sum(axis=1) / width
        centered = rows - mu[:, None]
        variance = (centered ** 2).sum(axis=1) / width
        normed = centered / np.sqrt(variance[:, None] + LN_EPS)
        result = normed * _np(gamma)[None, :] + _np(beta)[None, :]
        be = inp.backend
        return _wrap(result.reshape(inp.shape), be), _wrap(variance, be), _wrap(mu, be)
        """,
    ],
    "NumpyOps.layernorm_bw (CPU version of Problem 2.2)": [
        """\
        width = inp.shape[-1]
        dy = _np(out_grad).reshape(-1, width)
        inv = (_np(var).reshape(-1, 1) + LN_EPS) ** -0.5
        xn = (_np(inp).reshape(-1, width) - _np(mean).reshape(-1, 1)) * inv
        dxn = dy * _np(gamma).reshape(1, width)
        term1 = dxn.sum(axis=1, keepdims=True) / width
        term2 = (dxn * xn).sum(axis=1, keepdims=True) / width
        grad_in = (dxn - term1 - xn * term2) * inv
        be = out_grad.backend
        return _wrap(grad_in.reshape(inp.shape), be), _wrap((dy * xn).sum(axis=0), be), _wrap(dy.sum(axis=0), be)
        """,
    ],
    "CudaKernelOps.layernorm_fw": [
        """\
        width = inp.shape[-1]
        assert width % 4 == 0, "hidden size must be a multiple of 4"
        n_rows = inp.size // width
        results = [np.zeros(inp.size, np.float32), np.zeros(n_rows, np.float32), np.zeros(n_rows, np.float32)]
        lib = _lib("layernorm_kernel")
        lib.launch_layernorm(*[_ptr(a) for a in results], _ptr(_f32(inp)), _ptr(_f32(gamma)),
                             _ptr(_f32(beta)), n_rows, width, _stream())
        shapes = [inp.shape, (n_rows,), (n_rows,)]
        return tuple(_as_tensor(a, s, inp.backend) for a, s in zip(results, shapes))
        """,
    ],
    "CudaKernelOps.attn_softmax_bw": [
        """\
        n = out_grad.shape[-1]
        if n > 2048:
            raise ValueError("softmax backward supports rows of at most 2048")
        g = _f32(out_grad).copy()
        _lib("softmax_kernel").launch_attn_softmax_bw(_ptr(g), _ptr(_f32(soft_inp)), out_grad.size // n, n, _stream())
        return _as_tensor(g, out_grad.shape, out_grad.backend)
        """,
    ],
}

# Rewrites a student's style may include, applied to the code they wrote.
CUDA_STYLE = [
    (r"\+\+(\w+)\)", r"\1++)"),
    (r"static_cast<size_t>\(", "(size_t)("),
    (r"\b0\.f\b", "0.0f"),
    (r"\b1\.f\b", "1.0f"),
    (r"\bconst (float|int|size_t) ", r"\1 "),
    (r"^([ \t]*)(\w+(?:\[\w+\])?) \+= ([^;\n]+);$", r"\1\2 = \2 + (\3);"),
    (r"#pragma unroll\n", ""),
    (r"threadIdx\.x", "(int)threadIdx.x"),
]
PY_STYLE = [
    (r"np\.float32", '"float32"'),
    (r"\.reshape\(-1, (\w+)\)", r".reshape((-1, \1))"),
    (r"axis=(\d)", r"axis=(\1)"),
    (r"\breturn (.+)$", r"result = \1\n__INDENT__return result"),
]
# Local variables (of the written code only, never parameters) a student may name otherwise;
# the copier renames all of them. Renaming alone never changes what copydetect compares.
RENAMES = {
    "vals": "buf", "local_max": "tmax", "local_sum": "tsum", "shift": "max_shift", "inv": "recip",
    "acc": "sums", "dot": "gy", "xhat": "x_norm", "dxhat": "dx_norm", "dgamma": "dg", "dbetta": "db",
    "mx": "max_val", "total": "sum_exp", "norm": "sum_recip", "mu": "avg", "rs": "inv_sigma",
    "partial": "lane_sum", "stats": "moments", "centered": "xc", "query": "q_pos",
}


@dataclass
class Student:
    name: str
    bodies: dict[str, str]  # region label -> code written
    files: dict[str, str]  # relative path -> text, the rubric's student files only


def _indent(body: str, indent: str) -> str:
    return "".join(indent + line if line.strip() else line for line in body.splitlines(keepends=True))


def _restyle(body: str, suffix: str, rng: random.Random) -> str:
    rules = CUDA_STYLE if suffix != ".py" else PY_STYLE
    for pattern, replacement in rules:
        if rng.random() < 0.5:
            body = _apply(pattern, replacement, body)
    for old, new in RENAMES.items():
        if rng.random() < 0.4:
            body = re.sub(rf"\b{old}\b", new, body)
    return body


def _apply(pattern: str, replacement: str, body: str) -> str:
    if "__INDENT__" not in replacement:
        return re.sub(pattern, replacement, body, flags=re.M)
    out = []
    for line in body.splitlines(keepends=True):
        indent = line[: len(line) - len(line.lstrip())]
        if line.count("(") != line.count(")"):  # a statement that goes on: leave it
            out.append(line)
            continue
        out.append(re.sub(pattern, replacement.replace("__INDENT__", indent), line.rstrip("\n")) + "\n")
    return "".join(out)


class ClassGenerator:
    def __init__(self, rubric: Rubric, work: Path) -> None:
        self.rubric = rubric
        self.starter = work / "starter"
        render_starter(rubric.starter_dir, self.starter)
        self.reference: dict[str, tuple[str, str]] = {}  # label -> (suffix, dedented body)
        for path in rubric.starter_dir.rglob("*"):
            if path.suffix in (".cu", ".py") and path.is_file():
                for region in find_regions(path.read_text(), path.suffix, str(path)):
                    body = textwrap.dedent("\n".join(region.body) + "\n")
                    self.reference[region.label] = (path.suffix, body)

    def student(self, name: str, rng: random.Random) -> Student:
        bodies = {}
        for label, (suffix, body) in sorted(self.reference.items()):
            choice = rng.choice([body, *(textwrap.dedent(alt) for alt in ALTERNATIVES.get(label, []))])
            bodies[label] = _restyle(choice, suffix, rng)
        return Student(name, bodies, self._fill(bodies, name))

    def _fill(self, bodies: dict[str, str], author: str) -> dict[str, str]:
        """The starter with `bodies` in its regions; a file written in starts with a comment
        naming `author`: like real students' files, two generated ones differ in text the
        tokenizer ignores (two students drawing the same few alternatives would otherwise hand in
        identical files, which the similarity check rightly counts as a literal copy)."""
        files = {}
        for pattern in self.rubric.student_files:
            for path in sorted(self.starter.glob(pattern)):
                text = path.read_text()
                for label, body in bodies.items():
                    stub = re.compile(rf"^([ \t]*)(// TODO\({re.escape(label)}\): your code here|"
                                      rf"raise NotImplementedError\(\"{re.escape(label)}: your code here\"\))\n", re.M)
                    text = stub.sub(lambda m, b=body: _indent(b, m.group(1)), text)
                if text != path.read_text():
                    text = ("# " if path.suffix == ".py" else "// ") + f"written by {author}\n" + text
                files[path.relative_to(self.starter).as_posix()] = text
        return files

    def disguise(self, original: Student, name: str) -> Student:
        """The copier: the original's code with every local renamed, comments rewritten, another
        indentation, more blank lines and two kernels swapped in their file."""
        bodies = {}
        for label, body in original.bodies.items():
            for old, new in RENAMES.items():
                body = re.sub(rf"\b{old}\b", new + "_v", body)
            bodies[label] = body
        files = {}
        for path, text in self._fill(bodies, name).items():
            if path.endswith((".cu", ".h", ".cuh")):
                text = re.sub(r"//[^\n]*", "// (my notes)", text)
                text = text.replace("\n\n", "\n\n\n").replace("\n  ", "\n    ")
                text = _swap_kernels(text, "__global__ void ker_ln_bw_dgamma_dbetta", "__global__ void ker_ln_bw_dinp")
            else:
                text = re.sub(r"^(\s*)#[^\n]*", r"\1# see lecture 7", text, flags=re.M)
            files[path] = text
        return Student(name, bodies, files)


def _swap_kernels(text: str, first: str, second: str) -> str:
    """Swap two adjacent top-level definitions (each with its preceding comment block)."""
    start_a = text.find(first)
    start_b = text.find(second)
    if start_a < 0 or start_b < 0:
        return text
    begin_a = _block_start(text, start_a)
    begin_b = _block_start(text, start_b)
    end_b = text.find("\n}\n", start_b) + 3
    block_a, block_b = text[begin_a:begin_b], text[begin_b:end_b]
    return text[:begin_a] + block_b + "\n" + block_a.rstrip("\n") + "\n" + text[end_b:]


def _block_start(text: str, at: int) -> int:
    lines_before = text[:at].split("\n")
    i = len(lines_before) - 1
    while i > 0 and lines_before[i - 1].startswith("//"):
        i -= 1
    return len("\n".join(lines_before[:i])) + (1 if i else 0)


def generate_class(rubric: Rubric, work: Path, size: int, seed: int,
                   planted: tuple[int, int]) -> dict[str, Student]:
    """`size` students named s00...; planted[1] is a disguised copy of planted[0]."""
    rng = random.Random(seed)
    generator = ClassGenerator(rubric, work)
    students: dict[str, Student] = {}
    for i in range(size):
        name = f"s{i:02d}"
        students[name] = (generator.disguise(students[f"s{planted[0]:02d}"], name) if i == planted[1]
                          else generator.student(name, rng))
    return students
