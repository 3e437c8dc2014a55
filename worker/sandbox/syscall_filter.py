"""The syscall filter of every sandboxed child (seccomp, classic BPF; standard library only).

Default allow, with the dangerous families refused: what a grader's child never needs and an
attacker reaches for. The parent builds the program here and hands it to the launcher
(launcher.py), which installs it in the job's process after the uid drop and no_new_privs, just
before exec; it holds for everything the job starts. Namespaced, a refused call is handed to the
job's init (SECCOMP_RET_USER_NOTIF), which answers EPERM and counts it, so the parent learns what
was refused (`SandboxExit.refused`); without namespaces (preexec.py) the pre-exec hook installs
the program with a plain EPERM answer, and nothing is counted.

Families (each a name a refusal is reported by):
- tracing: reading or changing another process (ptrace, process_vm_readv/writev, kcmp,
  pidfd_getfd, process_madvise, move_pages, migrate_pages);
- keyring: the kernel's key store (add_key, request_key, keyctl);
- bpf, perf_event, userfaultfd, io_uring: kernel attack surface no child of ours uses
  (measured: nvcc, the CUDA runtime, Python, CUPTI's kernel profile and compute-sanitizer run
  with them refused; tests/gpu);
- mount and namespaces: mount and the new mount API, pivot_root, chroot, unshare, setns, and
  clone with any CLONE_NEW* flag (a user namespace would hand the job every capability inside it);
- kernel: modules, kexec, reboot, swap, acct, file handles (open_by_handle_at), the clocks'
  setters, I/O ports, quotas, the kernel log, fanotify, vhangup;
- raw sockets: AF_PACKET, and SOCK_RAW of any family.
clone3 answers ENOSYS: its flags sit in a struct the filter cannot read, and ENOSYS makes the C
library fall back to clone, whose flags it can. A 32-bit or x32 system call (another syscall
table, where these numbers mean other calls) is refused whole, with EPERM and uncounted.
"""
from __future__ import annotations

import errno
import functools
import platform
import struct
from collections.abc import Mapping
from dataclasses import dataclass

FAMILIES: Mapping[str, tuple[str, ...]] = {
    "tracing": ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
                "move_pages", "migrate_pages"),
    "keyring": ("add_key", "request_key", "keyctl"),
    "bpf": ("bpf",),
    "perf_event": ("perf_event_open",),
    "userfaultfd": ("userfaultfd",),
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "mount": ("mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
              "fsmount", "fspick", "mount_setattr"),
    "namespaces": ("unshare", "setns"),
    "kernel": ("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
               "swapoff", "acct", "open_by_handle_at", "name_to_handle_at", "settimeofday", "clock_settime",
               "clock_adjtime", "iopl", "ioperm", "modify_ldt", "quotactl", "quotactl_fd", "syslog",
               "lookup_dcookie", "fanotify_init", "vhangup", "uselib", "_sysctl"),
}

# Each architecture's numbers (its own table; x86_64's from arch/x86/entry/syscalls/syscall_64.tbl,
# aarch64's the generic table): calls an architecture lacks are simply not listed.
_X86_64 = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "vhangup": 153, "modify_ldt": 154, "pivot_root": 155, "_sysctl": 156,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "migrate_pages": 256, "unshare": 272, "move_pages": 279, "perf_event_open": 298,
    "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
    "socket": 41, "clone": 56, "clone3": 435,
}
_AARCH64 = {
    "lookup_dcookie": 18, "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51, "vhangup": 58, "quotactl": 60,
    "acct": 89, "unshare": 97, "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112,
    "syslog": 116, "ptrace": 117, "reboot": 142, "settimeofday": 170, "add_key": 217, "request_key": 218,
    "keyctl": 219, "swapon": 224, "swapoff": 225, "migrate_pages": 238, "move_pages": 239, "perf_event_open": 241,
    "fanotify_init": 262, "name_to_handle_at": 264, "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268,
    "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280,
    "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
    "socket": 198, "clone": 220, "clone3": 435,
}


@dataclass(frozen=True)
class Arch:
    audit: int  # AUDIT_ARCH_* as seccomp_data.arch reports it
    numbers: Mapping[str, int]
    x32_bit: int = 0  # x86_64: syscall numbers with this bit set are the x32 ABI's


ARCHES = {"x86_64": Arch(0xC000003E, _X86_64, 0x40000000), "aarch64": Arch(0xC00000B7, _AARCH64)}

CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
AF_PACKET, SOCK_RAW, SOCK_TYPE_MASK = 17, 3, 0xF

# Classic BPF, as the kernel's filter.h spells it.
LD_W_ABS, ALU_AND_K = 0x20, 0x54
JA, JEQ, JGE, JSET = 0x05, 0x15, 0x35, 0x45
SEARCH_LEAF = 4  # numbers compared one by one at the end of the search
RET_K = 0x06
RET_ALLOW, RET_ERRNO, RET_USER_NOTIF = 0x7FFF0000, 0x00050000, 0x7FC00000
NR_AT, ARCH_AT, ARG0_AT, ARG1_AT = 0, 4, 16, 24  # offsets in struct seccomp_data (low words, little-endian)
DENY, FOREIGN, NO_SYSCALL, ALLOW = "deny", "foreign", "enosys", "allow"  # the program's labels


def refused_calls(arch: str | None = None) -> dict[int, str]:
    """Syscall number -> family, for every call refused outright on `arch` (this machine's)."""
    numbers = ARCHES[arch or platform.machine()].numbers
    return {numbers[name]: family for family, names in FAMILIES.items() for name in names if name in numbers}


class _Program:
    """A straight-line BPF program whose jumps name labels; jumps only go forward."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int | str]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int | str, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for at, (code, jt, jf, k) in enumerate(self.code):
            offsets = [self.labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= o <= 255 for o in offsets):
                raise ValueError(f"BPF jump out of range at {at}")
            out += struct.pack("=HBBI", code, offsets[0], offsets[1],
                               self.labels[k] - at - 1 if isinstance(k, str) else k)
        return bytes(out)


def _search(p: _Program, targets: list[tuple[int, str]], path: str = "n") -> None:
    """Jump to the label of the syscall number in the accumulator, by binary search over
    `targets` (sorted); to ALLOW when it is none of them. Every call pays a few comparisons,
    not one per refused number: the GPU stage's timed calls make many syscalls."""
    if len(targets) <= SEARCH_LEAF:
        for number, label in targets:
            p.op(JEQ, number, label, 0)
        p.op(JA, ALLOW)
        return
    middle = len(targets) // 2
    p.op(JGE, targets[middle][0], f"{path}r", 0)
    _search(p, targets[:middle], f"{path}l")
    p.label(f"{path}r")
    _search(p, targets[middle:], f"{path}r")


@functools.cache  # one program per process: every spawn hands it over
def filter_program(notify: bool, arch: str | None = None) -> bytes:
    """The filter as `struct sock_filter[]` bytes for `arch` (this machine's). With `notify`,
    refused calls go to a supervisor (install it with SECCOMP_FILTER_FLAG_NEW_LISTENER);
    without, they fail with EPERM at once."""
    target = ARCHES[arch or platform.machine()]
    numbers = target.numbers
    p = _Program()
    p.op(LD_W_ABS, ARCH_AT)
    p.op(JEQ, target.audit, 0, FOREIGN)
    p.op(LD_W_ABS, NR_AT)
    if target.x32_bit:
        p.op(JGE, target.x32_bit, FOREIGN, 0)
    special = {numbers["clone3"]: NO_SYSCALL, numbers["socket"]: "socket", numbers["clone"]: "clone"}
    _search(p, sorted({**{n: DENY for n in refused_calls(arch)}, **special}.items()))
    p.label("clone")
    p.op(LD_W_ABS, ARG0_AT)  # clone's flags
    p.op(JSET, CLONE_NEW_FLAGS, DENY, ALLOW)
    p.label("socket")
    p.op(LD_W_ABS, ARG0_AT)  # the address family
    p.op(JEQ, AF_PACKET, DENY, 0)
    p.op(LD_W_ABS, ARG1_AT)  # the type, with SOCK_NONBLOCK / SOCK_CLOEXEC or'ed in
    p.op(ALU_AND_K, SOCK_TYPE_MASK)
    p.op(JEQ, SOCK_RAW, DENY, ALLOW)
    p.label(ALLOW)
    p.op(RET_K, RET_ALLOW)
    p.label(NO_SYSCALL)
    p.op(RET_K, RET_ERRNO | errno.ENOSYS)
    p.label(DENY)
    p.op(RET_K, RET_USER_NOTIF if notify else RET_ERRNO | errno.EPERM)
    p.label(FOREIGN)
    p.op(RET_K, RET_ERRNO | errno.EPERM)
    return p.assemble()


def family_of(number: int, arch: str | None = None) -> str:
    """The family a refused syscall number belongs to (clone: namespaces; socket: raw sockets)."""
    numbers = ARCHES[arch or platform.machine()].numbers
    if number == numbers["clone"]:
        return "namespaces"
    if number == numbers["socket"]:
        return "raw sockets"
    return refused_calls(arch).get(number, f"syscall {number}")
