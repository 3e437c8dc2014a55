"""The hostile corpus: malicious or malformed hw4 uploads, made in code, each with the outcome
it must get from the real pipeline (unpack -> stage -> nvcc build) on a worker without a GPU.

Archive-level tricks come from tests/fixtures/hostile_zips.py. Submissions that need a GPU to
misbehave (kernels that hang or trap, host code that attacks the sandbox) are in
tests/gpu/test_hostile_gpu.py; the sandbox's host-side promises are checked on the CPU in
test_hostile_sandbox.py.
"""
from __future__ import annotations

import io
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures import hostile_zips as hz
from worker.rubric import load_rubric

RUBRIC = load_rubric("hw4")
TOP = "llmsys_hw4/"


@dataclass(frozen=True)
class Materials:
    """What the builders may use: the reference kit's files and the server's secrets (whose
    paths a hostile submission would guess or learn)."""

    kit: dict[str, bytes]  # path relative to the assignment root -> content
    secret_file: Path  # a root-only file holding the canary (like KG_DATA_DIR/secret_key)
    blob_file: Path  # another student's upload in the blob store, holding the canary
    absolute_target: Path  # where absolute-path entries aim; must never appear
    host_file: Path  # a world-readable (0644) file of the host outside the sandbox's view, holding the canary
    service_env: Path  # a world-readable `.env` in the service's folder, holding the canary

    def entries(self, edits: dict[str, bytes] | None = None, drop: tuple[str, ...] = (),
                top: str = TOP) -> list[hz.Entry]:
        files = {**self.kit, **(edits or {})}
        return [(top + rel, data) for rel, data in sorted(files.items()) if rel not in drop]

    def kit_zip(self, edits: dict[str, bytes] | None = None, drop: tuple[str, ...] = (), top: str = TOP,
                compression: int = zipfile.ZIP_DEFLATED) -> bytes:
        return hz.make_zip(self.entries(edits, drop, top), compression)

    def source(self, rel: str, prefix: str = "", suffix: str = "") -> bytes:
        return prefix.encode() + self.kit[rel] + suffix.encode()


def load_kit() -> dict[str, bytes]:
    root = RUBRIC.starter_dir
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".so"}


@dataclass(frozen=True)
class Expect:
    state: str  # built | failed
    error_class: str | None = None
    phrases: tuple[str, ...] = ()  # the message holds at least one of them

    def describe(self) -> str:
        return self.state + (f"/{self.error_class}" if self.error_class else "")


@dataclass(frozen=True)
class HostileCase:
    id: str
    threat: str  # the wording of what it tries
    build: Callable[[Materials], bytes]
    expect: Expect


def bad(*phrases: str) -> Expect:
    return Expect("failed", "bad_archive", phrases)


BUILT = Expect("built")
SLIP = bad("leaves its folder")
ABSOLUTE = bad("absolute path")
NOT_ZIP = bad("not a zip file")
NO_FOLDER = bad("could not find the assignment folder")
DAMAGED = bad("the zip is damaged or incomplete: upload it again")
LYING = bad("declared size", "damaged or incomplete")  # zipfile itself stops at the declared size


def _special(kind: int) -> Callable[[Materials], bytes]:
    return lambda m: hz.make_zip([*m.entries(), (hz.unix_entry(TOP + "src/includes/dev", kind), b"")])


def _with(*extra: hz.Entry) -> Callable[[Materials], bytes]:
    return lambda m: hz.make_zip([*m.entries(), *extra])


CASES: list[HostileCase] = [
    # ---- bombs and sizes
    HostileCase("bomb-ratio", "zip bomb (ratio)", lambda m: hz.zeros_bomb(45 * hz.MiB, TOP + "src/bomb.cu"),
                bad("zip bomb")),
    HostileCase("bomb-absolute", "zip bomb (absolute size)",
                lambda m: hz.make_zip([(f"{TOP}data/{i}.bin", bytes(45 * hz.MiB)) for i in range(5)],
                                      zipfile.ZIP_STORED),
                bad("expands to more than")),
    HostileCase("bomb-many-small", "zip bomb (split under the per-entry floor)",
                lambda m: hz.many_small_bombs(250, hz.MiB), bad("zip bomb", "expands to more than")),
    HostileCase("bomb-lying-size-stored", "zip bomb (declared size lies)",
                lambda m: hz.lying_size_zip(hz.random_bytes(3 * hz.MiB), 1000), LYING),
    HostileCase("bomb-lying-size-deflated", "zip bomb (declared size lies)",
                lambda m: hz.lying_size_zip(bytes(80 * hz.MiB), 1000, zipfile.ZIP_DEFLATED), LYING),
    HostileCase("bomb-overlapping", "hard-link-like entries sharing one body (overlap bomb)",
                lambda m: hz.overlapping_entries_zip(400, hz.MiB), bad("zip bomb", "expands to more than")),
    HostileCase("file-over-limit", "oversized file", lambda m: hz.make_zip(
        [*m.entries(), (TOP + "data/weights.bin", hz.random_bytes(51 * hz.MiB))], zipfile.ZIP_STORED),
        bad("per-file limit")),
    HostileCase("100k-tiny-files", "100k tiny files",
                lambda m: hz.make_zip([(f"{TOP}t/{i}", b"") for i in range(100_000)], zipfile.ZIP_STORED),
                bad("entries; the limit is")),
    HostileCase("deep-nesting", "deep nesting", _with(("/".join([TOP.rstrip("/")] + ["d"] * 30) + "/x.cu", b"x")),
                bad("nests files deeper than")),
    # ---- nested archives
    HostileCase("nested-zip-only", "nested zip", lambda m: hz.nested_zip(m.kit_zip()), NO_FOLDER),
    HostileCase("nested-zip-beside-kit", "nested zip", _with((TOP + "src/inner.zip", hz.zeros_bomb(60 * hz.MiB))),
                BUILT),
    HostileCase("nested-zip-bomb-chain", "nested zip", lambda m: hz.nested_zip(hz.nested_zip(hz.zeros_bomb(50 * hz.MiB))),
                NO_FOLDER),
    # ---- path escapes
    HostileCase("slip-dotdot", "zip slip", _with(("../../escaped.txt", b"pwned")), SLIP),
    HostileCase("slip-inside-kit", "zip slip", _with((TOP + "src/../../../../escaped.cu", b"pwned")), SLIP),
    HostileCase("slip-backslash", "zip slip", _with(("..\\..\\escaped.txt", b"pwned")), SLIP),
    HostileCase("slip-mixed-separators", "zip slip", _with((TOP + "src\\..\\..\\..\\escaped", b"pwned")), SLIP),
    HostileCase("absolute-posix", "absolute paths", lambda m: hz.make_zip([*m.entries(), (str(m.absolute_target), b"pwned")]),
                ABSOLUTE),
    HostileCase("absolute-windows", "absolute paths", _with(("C:\\Windows\\evil.cu", b"pwned")), ABSOLUTE),
    HostileCase("absolute-unc", "absolute paths", _with(("\\\\server\\share\\evil", b"pwned")), ABSOLUTE),
    HostileCase("nul-in-name", "non-UTF-8 and overlong names", lambda m: hz.nul_name_zip(), bad("NUL")),
    # ---- links and special files
    HostileCase("symlink-kernel", "symlink entries",
                lambda m: hz.make_zip([*m.entries(drop=("src/combine.cu",)),
                                       (hz.unix_entry(TOP + "src/combine.cu", stat.S_IFLNK, 0o777), b"/etc/passwd")]),
                bad("symbolic link")),
    HostileCase("symlink-to-blob", "symlink entries",
                lambda m: hz.make_zip([*m.entries(), (hz.unix_entry(TOP + "src/includes/x.h", stat.S_IFLNK, 0o777),
                                                      str(m.blob_file).encode())]),
                bad("symbolic link")),
    HostileCase("hardlink-tar", "hardlink entries", lambda m: hz.tar_gz_with_hardlink(), NOT_ZIP),
    HostileCase("device-char", "device files", _special(stat.S_IFCHR), bad("special file")),
    HostileCase("device-block", "device files", _special(stat.S_IFBLK), bad("special file")),
    HostileCase("fifo", "device files", _special(stat.S_IFIFO), bad("special file")),
    HostileCase("socket-entry", "device files", _special(stat.S_IFSOCK), bad("special file")),
    # ---- names
    HostileCase("invalid-utf8-name", "non-UTF-8 and overlong names", lambda m: hz.invalid_utf8_name_zip(),
                bad("not valid UTF-8")),
    HostileCase("latin1-name", "non-UTF-8 and overlong names", lambda m: hz.with_raw_name(
        hz.make_zip([*m.entries(), (TOP + "notes/r#sum#.txt", b"latin-1")]), TOP + "notes/r#sum#.txt",
        (TOP + "notes/r\xe9sum\xe9.txt").encode("latin-1")), BUILT),
    HostileCase("overlong-part", "non-UTF-8 and overlong names", _with((TOP + "src/" + "k" * 300 + ".cu", b"x")),
                bad("name is too long")),
    HostileCase("overlong-path", "non-UTF-8 and overlong names",
                _with((TOP + "/".join(["p" * 250] * 5) + "/x.cu", b"x")), bad("name is too long")),
    HostileCase("shell-metachar-names", "non-UTF-8 and overlong names",
                _with((TOP + "src/$(touch pwned);`id`.cu", b"int x;\n"), (TOP + "src/line\nbreak.h", b"")), BUILT),
    HostileCase("duplicate-entry", "wrong layout", _with((TOP + "src/combine.cu", b"int evil;\n")), bad("twice")),
    HostileCase("file-and-folder", "wrong layout", _with((TOP + "src/combine.cu/x", b"x")), bad("also a file", "twice")),
    # ---- not a (readable) zip
    HostileCase("empty-zip", "empty zip", lambda m: hz.make_zip([]), bad("empty")),
    HostileCase("only-folders", "empty zip", lambda m: hz.make_zip([(TOP, b""), (TOP + "src/", b"")]), NO_FOLDER),
    HostileCase("encrypted", "encrypted zip", lambda m: hz.encrypted_zip(), bad("encrypted")),
    HostileCase("tar-gz-renamed", "tar.gz renamed .zip", lambda m: hz.tar_gz(), bad("is a gzip file (a .tar.gz, say), not a zip file")),
    HostileCase("random-bytes", "not an archive at all", lambda m: hz.random_bytes(), NOT_ZIP),
    HostileCase("pdf", "not an archive at all", lambda m: b"%PDF-1.7\n" + hz.random_bytes(2048), NOT_ZIP),
    HostileCase("truncated", "a zip cut short", lambda m: m.kit_zip()[:5000], DAMAGED),
    HostileCase("corrupt-stream", "not an archive at all",
                lambda m: _corrupt_first_entry(m.kit_zip()), bad("the zip is damaged or incomplete")),
    HostileCase("unsupported-method", "not an archive at all", lambda m: hz.unsupported_method_zip(),
                bad("could not be read")),
    # ---- layout
    HostileCase("flat-kernels", "wrong layout",
                lambda m: hz.make_zip([(Path(r).name, d) for r, d in m.kit.items() if r.startswith("src/")]),
                NO_FOLDER),
    HostileCase("two-assignment-folders", "wrong layout",
                lambda m: hz.make_zip(m.entries(top="old/") + m.entries(top="new/")), bad("more than one assignment")),
    # a missing kernel costs only the problems that need it (never built from our kit's file)
    HostileCase("missing-layernorm", "missing kernel files", lambda m: m.kit_zip(drop=("src/layernorm_kernel.cu",)),
                Expect("built", None, ("Problems 2.1, 2.2 and 3 not graded: src/layernorm_kernel.cu is missing",))),
    HostileCase("only-readme", "missing kernel files", lambda m: hz.make_zip([(TOP + "README.md", b"hi")]),
                bad("Missing: src/softmax_kernel.cu, src/layernorm_kernel.cu, src/combine.cu")),
    # ---- accepted, but nothing of it may run or count
    HostileCase("planted-tests-and-libs", "submitted tests, libraries and a forged result line",
                lambda m: m.kit_zip({"kernel_tests/test_softmax_fw.py": b"print('PASSED 100/100')\n",
                                     "minitorch/cuda_kernels/softmax_kernel.so": b"\x7fELF not ours",
                                     "conftest.py": b"import os; os.system('touch /tmp/pwned')\n"}), BUILT),
    HostileCase("macos-junk", "wrong layout", lambda m: hz.make_zip([*m.entries(), *hz.macos_junk(TOP)]), BUILT),
    HostileCase("no-top-folder-bzip2", "wrong layout", lambda m: m.kit_zip(top="", compression=zipfile.ZIP_BZIP2),
                BUILT),
    # ---- builds
    HostileCase("compile-error", "compile error",
                lambda m: m.kit_zip({"src/softmax_kernel.cu": m.source("src/softmax_kernel.cu", "this is not CUDA;\n")}),
                Expect("built", None, ("Problems 1.1, 1.2 and 3 not graded: src/softmax_kernel.cu did not compile",))),
    HostileCase("self-including-header", "compile error",
                lambda m: m.kit_zip({"src/includes/common.h": b'#include "common.h"\n'}),
                Expect("failed", "build_error", ("did not compile",))),
    HostileCase("include-server-secret", "reads blobs and secrets at build time",
                lambda m: m.kit_zip({"src/combine.cu": m.source("src/combine.cu", f'#include "{m.secret_file}"\n')}),
                Expect("failed", "build_error", ("combine did not compile",))),
    HostileCase("include-env-secrets", "reads environment secrets at build time",  # /proc files read as empty
                lambda m: m.kit_zip({"src/combine.cu": m.source(
                    "src/combine.cu", '#include "/proc/self/environ"\n',
                    '\nasm(".section .rodata\\n.incbin \\"/proc/self/environ\\"\\n.previous");\n')}), BUILT),
    HostileCase("include-host-file", "reads a world-readable host file at build time",
                lambda m: m.kit_zip({"src/combine.cu": m.source("src/combine.cu", f'#include "{m.host_file}"\n')}),
                Expect("failed", "build_error", ("combine did not compile",))),
    HostileCase("incbin-host-file", "builds a world-readable host file into the library",
                lambda m: m.kit_zip({"src/combine.cu": m.source(
                    "src/combine.cu", suffix=f'\nasm(".section .rodata\\n.incbin \\"{m.host_file}\\"\\n.previous");\n')}),
                Expect("failed", "build_error", ("combine did not compile",))),
    HostileCase("include-service-env", "reads the service's .env at build time",
                lambda m: m.kit_zip({"src/softmax_kernel.cu": m.source("src/softmax_kernel.cu",
                                                                       f'#include "{m.service_env}"\n')}),
                Expect("built", None, ("src/softmax_kernel.cu did not compile",))),
    HostileCase("include-etc-passwd", "reads the host's accounts at build time",
                lambda m: m.kit_zip({"src/layernorm_kernel.cu": m.source("src/layernorm_kernel.cu",
                                                                         '#include "/etc/passwd"\n')}),
                Expect("built", None, ("src/layernorm_kernel.cu did not compile",))),
    HostileCase("incbin-other-upload", "reads other submissions at build time",
                lambda m: m.kit_zip({"src/combine.cu": m.source(
                    "src/combine.cu", suffix=f'\nasm(".section .rodata\\n.incbin \\"{m.blob_file}\\"\\n.previous");\n')}),
                Expect("failed", "build_error", ("combine did not compile",))),
]


def _corrupt_first_entry(data: bytes) -> bytes:
    """Overwrite the first deflated entry's compressed stream with garbage."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = next(i for i in zf.infolist() if i.compress_type == zipfile.ZIP_DEFLATED and i.compress_size > 64)
    start = info.header_offset + 30 + len(info.orig_filename.encode()) + len(info.extra)
    out = bytearray(data)
    out[start:start + 32] = b"\xff" * 32
    return bytes(out)
