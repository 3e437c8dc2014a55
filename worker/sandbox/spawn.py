"""`Sandbox`: the one way to start a sandboxed child. It resolves the sandbox user, hands it the
job folder, and starts the child with the policy's backend (process.py or docker.py)."""
from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

from worker.sandbox import namespaces
from worker.sandbox.child import SandboxChild
from worker.sandbox.docker import start_container
from worker.sandbox.limits import SandboxError, SandboxLimits, SandboxPolicy
from worker.sandbox.process import start_process

SPAWN_RETRY_S = 5.0


def usable_by(path: Path, uid: int, gid: int, mode: int = os.R_OK | os.X_OK) -> bool:
    """True when `uid`/`gid` (without supplementary groups) can search every directory above
    `path` and has `mode` on `path` itself, by the permission bits (root always can).
    Symlinks are resolved first."""
    if uid == 0:
        return True
    target = Path(os.path.realpath(path))
    checks = [(p, os.X_OK) for p in reversed(target.parents)] + [(target, mode)]
    for p, want in checks:
        try:
            st = os.stat(p)
        except OSError:
            return False
        if st.st_uid == uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        if bits & want != want:
            return False
    return True


class Sandbox:
    def __init__(self, limits: SandboxLimits, policy: SandboxPolicy = SandboxPolicy()) -> None:
        self.limits = limits
        self.policy = policy
        self.ids: tuple[int, int] | None = None
        if policy.user is not None and os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(policy.user)
            except KeyError as exc:
                raise SandboxError(f"sandbox user {policy.user!r} does not exist") from exc
            if pw.pw_uid == 0:
                raise SandboxError(f"sandbox user {policy.user!r} is root")
            self.ids = (pw.pw_uid, pw.pw_gid)
        self.namespaced = policy.docker is None and namespaces.namespaces_unavailable() is None
        if policy.docker is None and not self.namespaced and policy.require_namespaces:
            raise SandboxError(f"this host cannot give sandboxed jobs their own PID and mount namespaces "
                               f"({namespaces.namespaces_unavailable()}); refusing to run submitted code without them "
                               f"(KG_SANDBOX_REQUIRE_NAMESPACES=false runs it with weaker isolation)")

    def _give_cwd(self, cwd: Path) -> None:
        """chown cwd and everything under it to the sandbox user, never following symlinks
        and leaving hard-linked files alone (they could be someone else's inode)."""
        uid, gid = self.ids  # type: ignore[misc]
        os.chown(cwd, uid, gid, follow_symlinks=False)
        os.chmod(cwd, 0o700)
        for root, dirs, files in os.walk(cwd, followlinks=False):
            for name in dirs + files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                if not os.path.isdir(p) and not os.path.islink(p) and st.st_nlink > 1:
                    continue
                os.chown(p, uid, gid, follow_symlinks=False)

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> SandboxChild:
        cwd = Path(os.path.abspath(cwd))  # the launcher places it in the job's root by this path
        if not cwd.is_dir() or cwd.is_symlink():
            raise SandboxError(f"sandbox cwd {cwd} is not a directory")
        if self.ids is not None:
            self._give_cwd(cwd)
        child_env = {str(k): str(v) for k, v in env.items()}
        if self.policy.docker is not None:
            return start_container(self.policy.docker, self.limits, self.ids, self.policy.gpu_index, argv, cwd,
                                   child_env, tuple(pass_fds))
        if self.policy.gpu_index is not None:
            child_env["CUDA_VISIBLE_DEVICES"] = str(self.policy.gpu_index)
        # execve fails with EAGAIN while the sandbox uid is at its RLIMIT_NPROC, e.g. just
        # after another sandbox of the same uid was killed and init has not reaped its
        # orphans yet: retry for a few seconds before giving up.
        deadline = time.monotonic() + SPAWN_RETRY_S
        while True:
            try:
                return start_process(self.limits, self.policy, self.ids, self.namespaced, argv, cwd, child_env,
                                     tuple(pass_fds))
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
