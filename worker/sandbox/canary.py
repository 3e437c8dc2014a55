"""The sandbox proven before a worker's first job: one canary child, started exactly as a job's
child is (`Sandbox.spawn` with the job's limits and policy), reports from inside what it got,
and the parent holds that against what the sandbox promises (worker/sandbox/__init__.py):

- namespaces of its own: PID, mount, network (unless the policy keeps the network), UTS, IPC
  and cgroup, each read from /proc/self/ns and compared with the parent's;
- the syscall filter: seccomp in filter mode, and a new user namespace and the kernel keyring
  refused with EPERM;
- the control group caps: memory and processes held by the kernel (the process backend's
  `cgroup`; a container's own caps under docker);
- the view: none of the host paths the caller names (the data dir, the service's folder) can
  be seen.
What is missing comes back in words, one item each; an empty list is a sandbox that holds.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

from worker.sandbox.limits import SandboxError, SandboxLimits, SandboxPolicy
from worker.sandbox.spawn import Sandbox

CANARY_LIMITS = SandboxLimits(wall_s=30, cpu_s=10, memory_bytes=256 << 20, max_processes=16,
                              file_size_bytes=1 << 20, disk_bytes=16 << 20)
NAMESPACES = ("pid", "mnt", "net", "uts", "ipc", "cgroup")
# The canary: standard library only, run as `python -I -S -c CANARY PATHS_JSON`.
CANARY = textwrap.dedent("""
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    def refused(call):
        ctypes.set_errno(0)
        return call() == -1 and ctypes.get_errno() == 1
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    print(json.dumps({
        "ns": {name: os.readlink(f"/proc/self/ns/{name}") for name in sys.argv[2].split(",")},
        "seccomp": status.get("Seccomp", "").strip(),
        "user_namespace_refused": refused(lambda: libc.unshare(0x10000000)),
        "keyring_refused": refused(lambda: libc.syscall(SYS_KEYCTL, 0, -3, 0, 0, 0)),
        "seen": [p for p in json.loads(sys.argv[1]) if os.path.lexists(p)],
    }))
""")
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}


def _own_namespaces(policy: SandboxPolicy) -> tuple[str, ...]:
    return tuple(ns for ns in NAMESPACES if ns != "net" or policy.isolate_network)


def prove_sandbox(policy: SandboxPolicy, hidden: Sequence[Path], jobs: Path | None = None,
                  limits: SandboxLimits = CANARY_LIMITS) -> list[str]:
    """Run the canary under `policy` in a job folder made in `jobs` (where the worker's job
    folders go, so that its view is a job's; the system's temporary folder by default); what
    the sandbox lacks, in words (empty: nothing). `hidden`: host paths a job must not see."""
    try:
        sandbox = Sandbox(limits, policy)
    except SandboxError as exc:
        return [str(exc)]
    wanted = _own_namespaces(policy)
    code = CANARY.replace("SYS_KEYCTL", str(SYS_KEYCTL.get(os.uname().machine, -1)))
    with tempfile.TemporaryDirectory(prefix="kg-canary-", dir=jobs) as folder:
        os.chmod(folder, 0o755)
        try:
            child = sandbox.spawn([sys.executable, "-I", "-S", "-c", code, json.dumps([str(p) for p in hidden]),
                                   ",".join(wanted)], Path(folder), {})
        except (OSError, SandboxError) as exc:
            return [f"the canary child could not start: {exc}"]
        ended = child.wait()
        lines = child.output_tail().strip().splitlines()
    try:
        found = json.loads(lines[-1])
    except (IndexError, ValueError):
        return [f"the canary child did not report ({ended.reason}: {ended.detail}): {' '.join(lines[-3:])}"]
    missing = [f"no {ns} namespace of its own" for ns in wanted
               if found["ns"].get(ns) == os.readlink(f"/proc/self/ns/{ns}")]
    if found["seccomp"] != "2" or not (found["user_namespace_refused"] and found["keyring_refused"]):
        missing.append("no syscall filter (seccomp)")
    if policy.docker is None and "cgroup" not in ended.isolation:
        missing.append("no control group caps (memory and processes are only polled)")
    missing += [f"the job can see {path}" for path in found["seen"]]
    return missing
