"""Builders for hostile (and ordinary) zip uploads, made in code at test time.

Python's zipfile refuses to write some of these directly (it resets flag bits and strips
NULs from names), so a few builders write a normal zip and then patch header bytes in
both the local file header and the central directory, as a hostile client would.
"""
from __future__ import annotations

import io
import os
import random
import struct
import tarfile
import warnings
import zipfile
from collections.abc import Callable, Iterable

MiB = 1024 * 1024

# Byte offsets of fields inside the zip records (APPNOTE 4.3.7 / 4.3.12 / 4.3.16).
_LOCAL_SIG = b"PK\x03\x04"
_CENTRAL_SIG = b"PK\x01\x02"
_EOCD_SIG = b"PK\x05\x06"
_LOCAL_FLAGS, _LOCAL_METHOD, _LOCAL_USIZE = 6, 8, 22
_CENTRAL_FLAGS, _CENTRAL_METHOD, _CENTRAL_USIZE, _CENTRAL_OFFSET = 8, 10, 24, 42
_CENTRAL_NAME_LEN, _CENTRAL_FIXED = 28, 46
_EOCD_COUNT_DISK, _EOCD_COUNT, _EOCD_CD_SIZE, _EOCD_CD_OFFSET = 8, 10, 12, 16
_UTF8_FLAG = 0x800

Entry = tuple[str | zipfile.ZipInfo, bytes]


def make_zip(entries: Iterable[Entry], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip holding `entries` (name or ZipInfo, data) in order; duplicates are allowed."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name" is the point of some tests
        with zipfile.ZipFile(buf, "w", compression) as zf:
            for name, data in entries:
                if isinstance(name, zipfile.ZipInfo):
                    zf.writestr(name, data, compress_type=compression)
                else:
                    zf.writestr(name, data)
    return buf.getvalue()


def unix_entry(name: str, kind: int, perm: int = 0o644) -> zipfile.ZipInfo:
    """A ZipInfo that says it was made on Unix with file-type bits `kind` (S_IFLNK, S_IFCHR...)."""
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (kind | perm) << 16
    return info


def _headers(data: bytes) -> list[tuple[int, int]]:
    """(local header offset, central directory record offset) of every entry."""
    eocd = data.rfind(_EOCD_SIG)
    if eocd < 0:
        raise ValueError("no end of central directory record")
    count = struct.unpack_from("<H", data, eocd + 10)[0]
    pos = struct.unpack_from("<I", data, eocd + 16)[0]
    found = []
    for _ in range(count):
        if data[pos:pos + 4] != _CENTRAL_SIG:
            raise ValueError("central directory record not where expected")
        local = struct.unpack_from("<I", data, pos + _CENTRAL_OFFSET)[0]
        if data[local:local + 4] != _LOCAL_SIG:
            raise ValueError("local header not where expected")
        found.append((local, pos))
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + _CENTRAL_NAME_LEN)
        pos += _CENTRAL_FIXED + name_len + extra_len + comment_len
    return found


def _patch_headers(data: bytes, edit: Callable[[bytearray, int, int], None]) -> bytes:
    out = bytearray(data)
    for local, central in _headers(data):
        edit(out, local, central)
    return bytes(out)


def _set_flag_bits(data: bytes, bits: int) -> bytes:
    """`data` with general-purpose flag `bits` set on every entry, in both headers."""
    def edit(buf: bytearray, local: int, central: int) -> None:
        for at in (local + _LOCAL_FLAGS, central + _CENTRAL_FLAGS):
            struct.pack_into("<H", buf, at, struct.unpack_from("<H", buf, at)[0] | bits)

    return _patch_headers(data, edit)


def encrypted_zip() -> bytes:
    """A zip whose entry claims to be encrypted (general-purpose flag bit 0 set)."""
    return _set_flag_bits(make_zip([("hw4/src/combine.cu", b"int x;\n")]), 0x1)


def with_raw_name(data: bytes, placeholder: str, raw: bytes) -> bytes:
    """`data` with the entry name `placeholder` replaced by the bytes `raw` (same length) in
    both headers: names zipfile would not write (NUL, Latin-1 without the UTF-8 flag...)."""
    assert len(raw) == len(placeholder.encode()) and data.count(placeholder.encode()) == 2
    return data.replace(placeholder.encode(), raw)


def invalid_utf8_name_zip() -> bytes:
    """An entry whose name bytes are not UTF-8 while its UTF-8 flag says they are."""
    data = with_raw_name(make_zip([("hw4/src/k#rnel.cu", b"int x;\n")]), "hw4/src/k#rnel.cu", b"hw4/src/k\xffrnel.cu")
    return _set_flag_bits(data, _UTF8_FLAG)


def unsupported_method_zip(method: int = 93) -> bytes:
    """An entry compressed with a method zipfile cannot decode (93: Zstandard, before 3.14)."""
    data = make_zip([("hw4/src/combine.cu", b"int x;\n" * 50)])

    def set_method(buf: bytearray, local: int, central: int) -> None:
        struct.pack_into("<H", buf, local + _LOCAL_METHOD, method)
        struct.pack_into("<H", buf, central + _CENTRAL_METHOD, method)

    return _patch_headers(data, set_method)


def overlapping_entries_zip(copies: int, each: int) -> bytes:
    """`copies` central directory records, with distinct names, that all point at ONE local
    entry of `each` zero bytes: the zip form of hard links (and of overlap bombs)."""
    first = "part00000"
    data = make_zip([(first, bytes(each))])
    ((_, central),) = _headers(data)
    eocd = data.rfind(_EOCD_SIG)
    record = data[central:eocd]
    records = b"".join(record.replace(first.encode(), f"part{i:05d}".encode(), 1) for i in range(copies))
    end = bytearray(data[eocd:])
    struct.pack_into("<HHI", end, _EOCD_COUNT_DISK, copies, copies, len(records))
    return data[:central] + records + bytes(end)


def lying_size_zip(actual: bytes, declared: int, compression: int = zipfile.ZIP_STORED) -> bytes:
    """One entry whose headers declare `declared` uncompressed bytes while it holds `actual`."""
    data = make_zip([("big.bin", actual)], compression)

    def set_size(buf: bytearray, local: int, central: int) -> None:
        struct.pack_into("<I", buf, local + _LOCAL_USIZE, declared)
        struct.pack_into("<I", buf, central + _CENTRAL_USIZE, declared)

    return _patch_headers(data, set_size)


def nul_name_zip() -> bytes:
    """An entry named 'src/combine.cu<NUL>.txt' (same bytes in both headers)."""
    return with_raw_name(make_zip([("src/combine.cu#.txt", b"int x;\n")]), "src/combine.cu#.txt",
                         b"src/combine.cu\x00.txt")


def zeros_bomb(size: int, name: str = "bomb.bin") -> bytes:
    """One deflated entry of `size` zero bytes (compresses about 1000:1)."""
    return make_zip([(name, bytes(size))])


def many_small_bombs(count: int, each: int) -> bytes:
    """`count` entries of `each` zero bytes: each under the per-entry ratio check's floor."""
    return make_zip([(f"part{i:03d}.bin", bytes(each)) for i in range(count)])


def random_bytes(size: int = 4096, seed: int = 1868) -> bytes:
    return random.Random(seed).randbytes(size)


def tar_gz(mode: str = "w:gz") -> bytes:
    """A real .tar.gz (what a student might rename to .zip); `mode="w"`: a plain .tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        payload = b"__global__ void k() {}\n"
        info = tarfile.TarInfo("hw4/src/combine.cu")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def tar_gz_with_hardlink() -> bytes:
    """A .tar.gz whose second member is a hard link to /etc/passwd (renamed .zip by a student)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        link = tarfile.TarInfo("hw4/src/combine.cu")
        link.type, link.linkname = tarfile.LNKTYPE, "/etc/passwd"
        tf.addfile(link)
    return buf.getvalue()


def nested_zip(inner: bytes, name: str = "llmsys_hw4.zip") -> bytes:
    """A zip whose only content is another zip."""
    return make_zip([(name, inner)], zipfile.ZIP_STORED)


REQUIRED = ("src/softmax_kernel.cu", "src/layernorm_kernel.cu", "src/combine.cu")


def assignment_entries(prefix: str = "") -> list[Entry]:
    """A plausible hw4 submission, optionally under a top folder `prefix` (ending in '/')."""
    files = {
        "src/softmax_kernel.cu": b'#include "includes/common.h"\n__global__ void softmax() {}\n',
        "src/layernorm_kernel.cu": b"__global__ void layernorm() {}\n",
        "src/combine.cu": b'extern "C" void MatrixMultiply() {}\n',
        "src/includes/common.h": b"#pragma once\n",
        "minitorch/cuda_kernel_ops.py": b"# bindings\n",
        "README.md": b"hw4 submission\n",
    }
    entries: list[Entry] = []
    if prefix:
        entries.append((prefix, b""))  # an explicit directory entry, as `zip -r` writes
    entries += [(prefix + name, data) for name, data in files.items()]
    return entries


def macos_junk(prefix: str = "") -> list[Entry]:
    """What Finder's 'Compress' adds: AppleDouble files under __MACOSX/ and .DS_Store."""
    return [
        ("__MACOSX/" + prefix + "src/._softmax_kernel.cu", b"\x00\x05\x16\x07junk"),
        ("__MACOSX/._" + (prefix.rstrip("/") or "src"), b"\x00\x05\x16\x07junk"),
        (prefix + ".DS_Store", b"Bud1junk"),
        (prefix + "src/.DS_Store", b"Bud1junk"),
    ]


def unique_absolute_target(tmp_root: str) -> str:
    """An absolute path that does not exist yet, for absolute-path entries to aim at."""
    return os.path.join(tmp_root, f"kernelgrade-evil-{os.getpid()}-{random.getrandbits(40):x}")


__all__ = [
    "MiB", "REQUIRED", "assignment_entries", "encrypted_zip", "invalid_utf8_name_zip", "lying_size_zip",
    "macos_junk", "make_zip", "many_small_bombs", "nested_zip", "nul_name_zip", "overlapping_entries_zip",
    "random_bytes", "tar_gz", "tar_gz_with_hardlink", "unix_entry", "unique_absolute_target",
    "unsupported_method_zip", "with_raw_name", "zeros_bomb",
]
