"""How kernelgrade runs submitted code (standard library only). Every piece of submitted code
runs in ONE fresh child per problem, started by `Sandbox.spawn` (spawn.py) with one of two
backends, each a `SandboxChild` (child.py):

- "process" (the default; process.py): a process of this host in its own PID, mount, UTS and
  network namespaces, built by a root launcher (namespaces.py starts launcher.py after the
  pre-exec hook of preexec.py) in a fresh root that holds only view.py's allow-list of the host;
  what it writes is capped and carried back into the job folder when it ends (overlay.py); a
  control group of its own (cgroups.py) caps its memory and processes where the host allows
  it, and a watchdog reads /proc (procfs.py) for its memory and processes;
- "docker" (`SandboxPolicy.docker`; docker.py): a fresh container per child.

The limits and the policy are limits.py. Without namespaces the process backend refuses to run
(SandboxError) unless `SandboxPolicy.require_namespaces` is False
(KG_SANDBOX_REQUIRE_NAMESPACES=false); then it runs with only what preexec.py applies.

What the deployer must ensure:
- The grading parent runs as root so the uid drop, RLIMIT_NPROC and the netns apply.
- The sandbox user owns nothing else. Namespaced, a child sees none of the host beyond the
  allow-list (view.py); without namespaces (allowed by the policy) it sees the whole host, so
  the blob store, database, hidden tests, other jobs' dirs and secrets must be root-owned
  0700/0600 (the service makes its data dir so).
  `spawn` chowns only the given cwd (recursively, never following symlinks, skipping
  hard-linked files) to the sandbox user, so anything the parent puts there is the
  child's to change: the parent must not trust files it reads back from cwd.
- The parent reads what a job wrote only through `worker.job_files.read_job_file`, never by
  path (`Path.read_bytes`, `open`, `np.load` follow links as root): it opens plain files of
  one name strictly beneath the job folder and refuses links, FIFOs, sockets, devices and
  hard links. A namespaced job's links and devices are also dropped when its writes are
  merged back (overlay.py); the docker backend and a job without namespaces write in place,
  where the reader is the only guard.
- Concurrent sandboxes should use distinct users (e.g. one per GPU slot): RLIMIT_NPROC
  counts all processes (threads, in fact) of a uid, and processes of one uid can signal
  and ptrace each other and read each other's job dirs.
- The interpreter/program in argv, and any trusted runner files it imports, must be
  readable and executable by the sandbox user along their whole path (see `usable_by`).
- `max_processes` is enforced by the watchdog on processes; RLIMIT_NPROC (threads of
  the whole uid) is set to 2*max_processes+64 as a backstop that bounds a fork bomb
  between scans.

Limits of the process backend (the docker backend has kernel-enforced memory and pids limits;
see ARCHITECTURE.md "Deployment"): without a control group (a host that lets the worker make
none) the memory and process caps are polled, so a fast allocator can overshoot the cap for up
to one scan interval; GPU memory is not counted. The allow-list is read-only but not empty: a
world-readable file inside an allowed folder (e.g. in /usr) is readable, as is /sys for a GPU
child; a host Unix socket is reachable only if it lies in an allowed folder (those are covered
when the job starts). Without namespaces (allowed by the policy): the whole host is the view,
no write cap, shared /tmp, host sockets reachable, and a process that calls setsid() and
double-forks within one scan interval can escape tracking (RLIMIT_NPROC still bounds it as root).
"""
from worker.sandbox.child import SandboxChild
from worker.sandbox.docker import SANDBOX_LABEL, DockerProcess, docker_command
from worker.sandbox.limits import DockerOptions, SandboxError, SandboxExit, SandboxLimits, SandboxPolicy
from worker.sandbox.process import SandboxedProcess
from worker.sandbox.spawn import Sandbox, usable_by

__all__ = ["SANDBOX_LABEL", "DockerOptions", "DockerProcess", "Sandbox", "SandboxChild", "SandboxError",
           "SandboxExit", "SandboxLimits", "SandboxPolicy", "SandboxedProcess", "docker_command", "usable_by"]
