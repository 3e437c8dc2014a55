"""The syscall filter's program (worker/sandbox/syscall_filter.py), run here by a small
interpreter of the classic BPF it is made of, over every syscall number of both architectures:
each refused call is refused, clone3 answers ENOSYS, clone and socket are judged by their
arguments, a call of another ABI is refused, and every other number is allowed. (The kernel
running the same program is tested in test_sandbox_canary.py and tests/hostile.)"""
from __future__ import annotations

import errno
import struct

import pytest

from worker.sandbox.syscall_filter import (
    ARCHES,
    CLONE_NEW_FLAGS,
    FAMILIES,
    RET_ALLOW,
    RET_ERRNO,
    RET_USER_NOTIF,
    filter_program,
    refused_calls,
)

EPERM, ENOSYS = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
CLONE_NEWUSER, CLONE_VM, SIGCHLD = 0x10000000, 0x100, 17


def run(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """The value the program returns for one call (struct seccomp_data, little-endian)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    code = [struct.unpack_from("=HBBI", program, 8 * i) for i in range(len(program) // 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:  # and k
            acc &= k
        elif op == 0x05:  # ja
            pc += k
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = acc == k if op == 0x15 else acc >= k if op == 0x35 else bool(acc & k)
            pc += jt if taken else jf
        elif op == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unknown instruction {op:#x}")


@pytest.mark.parametrize("machine", sorted(ARCHES))
@pytest.mark.parametrize("notify", [True, False])
def test_every_number_is_judged_as_its_family_says(machine: str, notify: bool) -> None:
    arch = ARCHES[machine]
    program = filter_program(notify, machine)
    refused = refused_calls(machine)
    deny = RET_USER_NOTIF if notify else EPERM
    for nr in range(0, 1024):
        got = run(program, nr, arch.audit)
        if nr in refused:
            assert got == deny, (machine, nr, refused[nr])
        elif nr == arch.numbers["clone3"]:
            assert got == ENOSYS
        else:  # clone and socket with harmless arguments included
            assert got == RET_ALLOW, (machine, nr)


@pytest.mark.parametrize("machine", sorted(ARCHES))
def test_clone_and_socket_are_judged_by_their_arguments(machine: str) -> None:
    arch = ARCHES[machine]
    program = filter_program(False, machine)
    clone, socket = arch.numbers["clone"], arch.numbers["socket"]
    assert run(program, clone, arch.audit, (CLONE_VM | SIGCHLD,)) == RET_ALLOW  # a thread or a fork
    for flag in range(32):
        if (1 << flag) & CLONE_NEW_FLAGS:
            assert run(program, clone, arch.audit, (CLONE_VM | (1 << flag),)) == EPERM, hex(1 << flag)
    assert run(program, clone, arch.audit, (CLONE_NEWUSER,)) == EPERM
    assert run(program, socket, arch.audit, (2, 1)) == RET_ALLOW  # AF_INET, SOCK_STREAM
    assert run(program, socket, arch.audit, (1, 1 | 0x80000)) == RET_ALLOW  # AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC
    assert run(program, socket, arch.audit, (17, 3)) == EPERM  # AF_PACKET
    assert run(program, socket, arch.audit, (2, 3 | 0x800)) == EPERM  # AF_INET, SOCK_RAW|SOCK_NONBLOCK


def test_calls_of_another_abi_are_refused_whole() -> None:
    x86 = ARCHES["x86_64"]
    program = filter_program(True, "x86_64")
    assert run(program, 0, 0x40000003) == EPERM  # i386's read, through int 0x80
    assert run(program, 0x40000000 | 0, x86.audit) == EPERM  # x32's read
    assert run(program, 0, x86.audit) == RET_ALLOW


def test_every_family_names_calls_each_architecture_knows() -> None:
    for machine, arch in ARCHES.items():
        for family, names in FAMILIES.items():
            known = [n for n in names if n in arch.numbers]
            assert known, (machine, family)
