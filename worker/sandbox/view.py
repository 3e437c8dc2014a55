"""What a namespaced job sees of the host: an allow-list, decided here by the parent and built by
the launcher (launcher.py) as a fresh root. Nothing else of the host is in it: no home folders,
no service folder, no data dir, no other job, no /etc beyond what the dynamic loader and the
toolchain read, no host Unix socket, no /sys unless the job uses the GPU.

The allow-list, all read-only:
- the system's programs and libraries: /usr and the top-level /bin, /sbin, /lib* (a symlink on
  merged-/usr hosts is recreated as the same symlink), and any library folder /etc/ld.so.conf
  names outside them;
- from /etc, only the dynamic loader's cache and configuration and Debian's alternatives links;
  passwd, group, hosts and nsswitch.conf are written fresh, naming the sandbox user alone;
- the Python runtime: this interpreter's prefixes and the folder of its real executable, and the
  folder of the job's program;
- this project's engine package (`worker/`), never the project folder itself (a `.env` or the
  embedded default's data dir lives there);
- the folders of the job's PYTHONPATH, LD_LIBRARY_PATH and CUDA_HOME, and the folders or files
  the caller adds (`SandboxPolicy.read_only`: the CUDA toolkit and include folders of a build;
  the .py files of an assignment's plug-in package for its GPU child, worker.gpu.client);
- /dev/null, zero, full, random and urandom; for a GPU job also /dev/nvidia* and /sys.
A folder that holds the job folder (so, the data dir) or this project is never bound: the job
folder comes as its own overlay, the project as its `worker/` package.
"""
from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ENGINE = PROJECT_ROOT / "worker"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_KEPT = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
DEVICES = ("null", "zero", "full", "random", "urandom")
PATH_VARIABLES = ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME")


@dataclass(frozen=True)
class View:
    """The job's root, as the launcher builds it (every path absolute, as on the host)."""

    binds: tuple[str, ...]  # host paths bound read-only at the same place (outermost only)
    links: Mapping[str, str]  # path -> target: symlinks recreated (merged-/usr, a linked PYTHONPATH entry)
    devices: tuple[str, ...]  # /dev entries bound from the host
    etc: Mapping[str, str] = field(default_factory=dict)  # files of the fresh /etc: name -> content

    def config(self) -> dict[str, object]:
        return {"binds": list(self.binds), "links": dict(self.links), "devices": list(self.devices),
                "etc": dict(self.etc)}


def _contains(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def loader_folders(conf: str = "/etc/ld.so.conf") -> list[str]:
    """The library folders the dynamic loader's configuration names (following `include`)."""
    found: list[str] = []
    todo = [conf]
    while todo:
        try:
            lines = Path(todo.pop()).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if words[:1] == ["include"]:
                todo += sorted(p for pattern in words[1:] for p in glob.glob(pattern))
            elif words and words[0].startswith("/"):
                found.append(words[0])
    return found


def _python_folders(argv: list[str]) -> list[str]:
    folders = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    if os.path.isabs(argv[0]):
        folders.append(os.path.dirname(os.path.realpath(argv[0])))
    return folders


def _from_environment(env: Mapping[str, str]) -> list[str]:
    return [p for name in PATH_VARIABLES for p in env.get(name, "").split(os.pathsep) if os.path.isabs(p)]


def etc_files(user: str, uid: int, gid: int) -> dict[str, str]:
    return {
        "passwd": f"{user}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n",
        "group": f"{user}:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }


def view_for(argv: list[str], env: Mapping[str, str], cwd: Path, user: tuple[str, int, int], gpu: bool,
             extra: Iterable[str] = ()) -> View:
    """The allow-list of one job (see the module's docstring)."""
    job = os.path.realpath(cwd)
    project = str(PROJECT_ROOT)
    candidates = [*SYSTEM_FOLDERS, *(f"/etc/{name}" for name in ETC_KEPT), *loader_folders(),
                  *_python_folders(argv), *_from_environment(env), *extra, str(ENGINE)]
    if gpu:
        candidates.append("/sys")
    binds: set[str] = set()
    links: dict[str, str] = {}
    for path in candidates:
        if not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if _contains(real, job) or _contains(real, project):
            continue  # the data dir or the project folder: never bound whole
        if os.path.normpath(path) != real:
            links[os.path.normpath(path)] = real
        binds.add(real)
    outermost = sorted(p for p in binds if not any(q != p and _contains(q, p) for q in binds))
    # A link is made only where neither the bound tree nor another link already shows something.
    links = {p: t for p, t in links.items()
             if not any(_contains(b, p) for b in outermost) and not any(q != p and _contains(q, p) for q in links)}
    devices = [f"/dev/{name}" for name in DEVICES if os.path.exists(f"/dev/{name}")]
    if gpu:
        devices += sorted(glob.glob("/dev/nvidia*"))
    return View(tuple(outermost), links, tuple(devices), etc_files(*user))
