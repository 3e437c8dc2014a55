"""Can CUDA's compute-sanitizer run inside the GPU child's sandbox, and what does it cost? (issue 33)

    bash tests/gpu/suite.sh --bench bench/sanitizer_probe.py      (GPU machine)

Builds four small programs with nvcc -lineinfo: one kernel writes one element past its buffer
(memcheck's case), one reads shared memory that a thread of another warp writes without a
barrier (racecheck's), one has a barrier that part of its block never reaches (synccheck's),
one reads global memory that nothing wrote (initcheck's). Runs each plain and under its tool, first directly, then inside
the sandbox as the GPU stage spawns its children (worker.sandbox: the sandbox user from
KG_SANDBOX_USER, default nobody, the GPU, the network cut, the default-deny view with the
sanitizer's folder added read-only), and prints each run's exit, wall seconds and the
sanitizer's report lines that name an error, a kernel or a source line; last, whether a socket
handed to a program run under the tool, sandboxed, still reaches it (the GPU child's channel to
its parent travels so). Writes nothing else.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy  # noqa: E402

PROGRAMS = {
    "oob": ("memcheck", """#include <cstdio>
__global__ void write_past_end(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // line 4: i == n writes one element past the buffer
}
int main() {
  float* d = nullptr;
  cudaMalloc(&d, 256 * sizeof(float));
  write_past_end<<<2, 256>>>(d, 256);
  printf("sync: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""),
    "race": ("racecheck", """#include <cstdio>
__global__ void shift_left(float* out) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = t;
  out[t] = s[(t + 1) % 256];  // line 6: no __syncthreads() before reading another thread's write
}
int main() {
  float* d = nullptr;
  cudaMalloc(&d, 256 * sizeof(float));
  shift_left<<<1, 256>>>(d);
  printf("sync: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""),
    "barrier": ("synccheck", """#include <cstdio>
__global__ void half_barrier(float* out) {
  __shared__ float s[64];
  int t = threadIdx.x;
  s[t] = t;
  if (t < 48) __syncthreads();  // line 6: a barrier that a part of the block never reaches
  out[t] = s[63 - t];
}
int main() {
  float* d = nullptr;
  cudaMalloc(&d, 64 * sizeof(float));
  half_barrier<<<1, 64>>>(d);
  printf("sync: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""),
    "uninit": ("initcheck", """#include <cstdio>
__global__ void add_into(float* out, const float* in) {
  int t = threadIdx.x;
  out[t] += in[t];  // line 4: out was allocated, never written
}
int main() {
  float *out = nullptr, *in = nullptr;
  cudaMalloc(&out, 64 * sizeof(float));
  cudaMalloc(&in, 64 * sizeof(float));
  cudaMemset(in, 0, 64 * sizeof(float));
  add_into<<<1, 64>>>(out, in);
  printf("sync: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""),
}
TELLING = ("error", "invalid", "uninitialized", "hazard", "at ", "by thread", "address", "summary", ".cu:", "sync:")
LIMITS = SandboxLimits(wall_s=120, cpu_s=120, memory_bytes=8 << 30, max_processes=64, file_size_bytes=1 << 30)


def telling(text: str, limit: int = 12) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return [ln for ln in lines if any(w in ln.lower() for w in TELLING)][:limit]


def run_direct(argv: list[str]) -> tuple[int, float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return done.returncode, time.monotonic() - started, done.stdout + done.stderr


def run_sandboxed(argv: list[str], cwd: Path, read_only: tuple[str, ...]) -> tuple[str, float, str]:
    user = os.environ.get("KG_SANDBOX_USER", "nobody") or None
    policy = SandboxPolicy(user=user, isolate_network=True, gpu_index=0, read_only=read_only)
    started = time.monotonic()
    child = Sandbox(LIMITS, policy).spawn(argv, cwd=cwd, env={"PATH": os.defpath, "HOME": "/tmp"})
    ended = child.wait(LIMITS.wall_s)
    return (f"{ended.reason} {ended.returncode} {ended.detail}".strip(), time.monotonic() - started,
            child.output_tail(16384))


def fd_passes_through(sanitizer: str, cwd: Path, read_only: tuple[str, ...]) -> str:
    """Whether a program run under the tool, sandboxed, still writes to a socket its parent
    handed down (the GPU child's channel to the parent travels so)."""
    parent, child = socket.socketpair()
    user = os.environ.get("KG_SANDBOX_USER", "nobody") or None
    policy = SandboxPolicy(user=user, isolate_network=True, gpu_index=0, read_only=read_only)
    program = f"import os; os.write({child.fileno()}, b'through')"
    proc = Sandbox(LIMITS, policy).spawn([sanitizer, "--tool", "memcheck", sys.executable, "-c", program], cwd=cwd,
                                         env={"PATH": os.defpath, "HOME": "/tmp"}, pass_fds=(child.fileno(),))
    child.close()
    parent.settimeout(60)
    try:
        got = parent.recv(64).decode(errors="replace")
    except OSError as exc:
        got = f"nothing ({exc})"
    ended = proc.wait(LIMITS.wall_s)
    return f"read {got!r}; ended {ended.reason} {ended.returncode}; output {telling(proc.output_tail(4000), 4)}"


def main() -> int:
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(sanitizer).exists():
        print("compute-sanitizer: not found on this machine")
        return 1
    real = Path(os.path.realpath(sanitizer))
    print(f"compute-sanitizer: {sanitizer} -> {real}")
    print(run_direct([sanitizer, "--version"])[2].strip().splitlines()[-1])
    nvcc = os.environ.get("KG_NVCC", "nvcc")
    with tempfile.TemporaryDirectory(prefix="kg-sanitizer-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        for name, (tool, source) in PROGRAMS.items():
            (work / f"{name}.cu").write_text(source)
            built = subprocess.run([nvcc, "-lineinfo", "-arch=native", "-o", str(work / name), str(work / f"{name}.cu")],
                                   capture_output=True, text=True)
            if built.returncode != 0:
                print(f"{name}: nvcc failed\n{built.stderr[-2000:]}")
                return 1
            (work / name).chmod(0o755)
            print(f"\n== {name} ({tool})")
            for label, args in (("plain", []), (tool, [sanitizer, "--tool", tool, "--show-backtrace", "no"])):
                code, seconds, out = run_direct([*args, str(work / name)])
                print(f"direct {label}: exit {code}, {seconds:.2f} s")
                for line in telling(out):
                    print(f"    {line}")
                try:
                    ended, seconds, out = run_sandboxed([*args, f"./{name}"], work,
                                                        (str(real.parent), str(real.parent.parent)))
                except Exception as exc:  # noqa: BLE001 - a probe reports whatever stops it
                    print(f"sandboxed {label}: could not start: {type(exc).__name__}: {exc}")
                    continue
                print(f"sandboxed {label}: {ended}, {seconds:.2f} s")
                for line in telling(out):
                    print(f"    {line}")
        print("\n== the child's channel through the tool, sandboxed")
        try:
            print(fd_passes_through(sanitizer, work, (str(real.parent), str(real.parent.parent))))
        except Exception as exc:  # noqa: BLE001 - a probe reports whatever stops it
            print(f"could not start: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
