"""CUDA's compute-sanitizer, generic: finding the tool, the argv that wraps a program in it, and
reading what it reported (issue 33: feedback that teaches).

A stage that saw a case fail may run that case once more under the tool (the assignment's
plug-in decides which case and how: rubrics/hw4/sanitize.py for hw4); nothing here knows an
assignment. The tool writes its report to a log file in the child's folder (`LOG_NAME`):
report lines start with `=========`, a finding is a line at the top level followed by
indented lines (`at KERNEL+0xOFFSET in FILE:LINE`, `by thread (x,y,z) in block (x,y,z)`, ...):

    ========= Invalid __global__ write of size 4 bytes
    =========     at write_past_end(float *, int)+0xc0 in oob.cu:4
    =========     by thread (0,0,0) in block (1,0,0)
    =========     and is 1 bytes after the nearest allocation at 0x7f26f4800000 of size 1024 bytes

racecheck's (analysis mode) names both accesses of a race:

    ========= Error: Race reported between Write access at shift_left(float *)+0xd0 in race.cu:5
    =========     and Read access at shift_left(float *)+0x100 in race.cu:6 [1024 hazards]

Findings never change points (worker.scoring shows them beside the reasons). Standard
library only: importable on a bare GPU machine.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from worker.job_files import JobFileError, is_job_file, read_job_file

TOOL = "compute-sanitizer"
# The order a session runs them in, each only while the ones before it found nothing.
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
LOG_NAME = ".kg-sanitizer.log"  # in the wrapped child's folder, relative to its cwd
LOG_READ_BYTES = 256 * 1024
PRINT_LIMIT = 10  # errors the tool prints per session; the feedback shows fewer (MAX_SHOWN)
MAX_SHOWN = 3  # findings a student's feedback shows per problem
MAX_KEPT = PRINT_LIMIT  # findings a measurement's telemetry keeps (for staff)
DEFAULT_CAP_S = 120.0
PREFIX = "========="
DEFAULT_TOOLKIT = Path("/usr/local/cuda")  # where NVIDIA's installers put the toolkit

# A top-level line that is the tool speaking of itself, not a finding in the program.
_NOT_FINDINGS = ("ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "COMPUTE-SANITIZER", "Error:", "Warning:",
                 "This can ", "Target application", "No attachable")
# The message of a tool that ran, whose program ended before any CUDA call: nothing to find.
NOT_INSTRUMENTED = "terminated before first instrumented API call"
_AT = re.compile(r"^at (?P<func>.+?)\+0x[0-9a-fA-F]+(?: in (?P<file>.+?):(?P<line>\d+))?$")
_AT_OLD = re.compile(r"^at 0x[0-9a-fA-F]+ in (?:(?P<file>[^:]+):(?P<line>\d+):)?(?P<func>.+)$")
_BY = re.compile(r"^by thread (?P<thread>\(\d+,\d+,\d+\)) in block (?P<block>\(\d+,\d+,\d+\))")
_RACE = re.compile(r"^(?P<level>Error|Warning): Race reported between (?P<first>\w+) access at (?P<at>.+)$")
_RACE_AND = re.compile(r"^and (?P<second>\w+) access at (?P<at>.+?)(?: \[(?P<count>\d+) hazards?\])?$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_LEADING_ADDRESS = re.compile(r"^Address 0x[0-9a-fA-F]+\s*")  # initcheck: "Address 0x7f32a2800000" alone
# A source file and line inside a detail: an absolute path, or a file name alone (as the
# H200's tool prints the other access of a race: "the write at softmax_kernel.cu:110").
_SOURCE_AT = re.compile(r"(/\S+|[\w.+-]+\.(?:cu|cuh|h|hpp|cpp|cc|c)):(\d+)")


@dataclass(frozen=True)
class SanitizerConfig:
    """What a stage needs to run the tool: the setting it came from ("auto" or a path), the
    executable found (None: missing, a run notes it) and the cap on a run's whole use of it."""

    setting: str
    executable: str | None
    cap_s: float = DEFAULT_CAP_S


@dataclass(frozen=True)
class Finding:
    """One error the tool reported in the program."""

    tool: str  # memcheck | racecheck | synccheck | initcheck
    kind: str  # "Invalid __global__ write of size 4 bytes", "race between write and read", ...
    kernel: str = ""  # the kernel's name, without its parameter list
    file: str = ""
    line: int | None = None
    thread: str = ""  # "(0,0,0)"
    block: str = ""
    detail: str = ""  # what else the tool said (the allocation it missed, the race's other access)

    def where(self) -> str:
        text = f" in {self.kernel}" if self.kernel else ""
        if self.file:
            text += f" at {self.file}" + (f":{self.line}" if self.line is not None else "")
        return text

    @property
    def device_assert(self) -> bool:
        """A kernel's own assert() ("Warp assert ... in __assertfail", as the starter's TODO
        stubs fail): the program's output names it with its file and line, and the failed case
        quotes that; the tool names only the runtime's assert function, so it adds nothing."""
        return "assert" in self.kind.lower() and self.kernel in ("", "__assertfail")

    def text(self) -> str:
        """`compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes in ker at
        src/k.cu:42, thread (0,0,0) block (1,0,0)`, for students."""
        words = f"{TOOL} {self.tool}: {self.kind}{self.where()}"
        if self.thread:
            words += f", thread {self.thread} block {self.block}"
        return words + (f" ({self.detail})" if self.detail else "")

    def in_tree(self, root: Path) -> Finding:
        """The finding with its source paths as the student knows them (`relative_source`)."""
        detail = _SOURCE_AT.sub(lambda m: f"{relative_source(m[1], root)}:{m[2]}", self.detail)
        return replace(self, file=relative_source(self.file, root) if self.file else "", detail=detail)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        line = data.get("line")
        return cls(tool=str(data.get("tool", "")), kind=str(data.get("kind", "")), kernel=str(data.get("kernel", "")),
                   file=str(data.get("file", "")), line=int(line) if isinstance(line, int) else None,
                   thread=str(data.get("thread", "")), block=str(data.get("block", "")),
                   detail=str(data.get("detail", "")))


def find_sanitizer(setting: str, nvcc: str = "nvcc") -> Path | None:
    """The tool's executable for a setting: "off" none; "auto" `compute-sanitizer` on PATH,
    else beside nvcc, else in $CUDA_HOME/bin, else in /usr/local/cuda/bin; anything else is
    its path (None if it is not an executable file)."""
    if setting == "off":
        return None
    if setting != "auto":
        path = Path(setting)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which(TOOL)
    if found:
        return Path(found)
    candidates = []
    compiler = shutil.which(nvcc)
    if compiler:
        candidates.append(Path(os.path.realpath(compiler)).parent / TOOL)
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "bin" / TOOL)
    candidates.append(DEFAULT_TOOLKIT / "bin" / TOOL)
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def sanitizer_config(setting: str, cap_s: float, nvcc: str = "nvcc") -> SanitizerConfig | None:
    """The stage's configuration for a setting (KG_SANITIZER): None when it is "off"."""
    if setting == "off":
        return None
    found = find_sanitizer(setting, nvcc)
    return SanitizerConfig(setting, None if found is None else str(found), cap_s)


def tool_folders(executable: str) -> tuple[str, ...]:
    """What the tool needs to read inside a sandbox: the folder of its real executable and the
    one above it (a toolkit keeps the tool's libraries beside it, under the toolkit's root)."""
    real = Path(os.path.realpath(executable))
    return (str(real.parent), str(real.parent.parent))


def wrapper_argv(executable: str, tool: str) -> list[str]:
    """The argv prefix that runs a program under `tool`: the report to LOG_NAME (relative to
    the program's cwd), the program's own exit status kept (no --error-exitcode), only the
    program itself instrumented (it starts no other), at most PRINT_LIMIT errors."""
    if tool not in TOOLS:
        raise ValueError(f"unknown {TOOL} tool {tool!r}")
    return [os.path.realpath(executable), "--tool", tool, "--log-file", LOG_NAME,
            "--print-limit", str(PRINT_LIMIT), "--show-backtrace", "no",
            "--target-processes", "application-only"]


def _body(line: str) -> tuple[bool, str] | None:
    """(indented, text) of a report line, or None for a line that is not the tool's."""
    if not line.startswith(PREFIX):
        return None
    rest = line[len(PREFIX):]
    return rest.startswith("  "), rest.strip()


def kernel_name(function: str) -> str:
    """`ker(float *, int)` -> `ker`: the function without its parameter list, its return type
    or an anonymous namespace; template arguments stay."""
    text = function.strip()
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i]
                break
    text = text.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    return text[len("void "):] if text.startswith("void ") else text


def _location(text: str) -> tuple[str, str, int | None] | None:
    """(kernel, file, line) of an `at ...` location, or None."""
    found = _AT.match(text) or _AT_OLD.match(text)
    if found is None:
        return None
    line = found.group("line")
    return kernel_name(found.group("func")), found.group("file") or "", int(line) if line else None


def _access_finding(tool: str, head: str, lines: list[str]) -> Finding:
    """A finding of memcheck, initcheck or synccheck: its head, where, by which thread."""
    finding = Finding(tool, head.rstrip("."))  # synccheck: "Barrier error detected. Divergent thread(s) in warp."
    details = []
    for text in lines:
        where = _location(text) if text.startswith("at ") else None
        by = _BY.match(text)
        if where is not None and not finding.kernel:
            finding = replace(finding, kernel=where[0], file=where[1], line=where[2])
        elif by is not None:
            finding = replace(finding, thread=by.group("thread"), block=by.group("block"))
        elif text.startswith(("and ", "Address ")):
            # an address means nothing to a student: what is said of it may ("is out of bounds")
            said = _LEADING_ADDRESS.sub("", text.removeprefix("and ")).removeprefix("is ")
            if said := _ADDRESS.sub("", said).strip():
                details.append(said)
    return replace(finding, detail="; ".join(details))


def _race_finding(tool: str, head: str, lines: list[str]) -> Finding | None:
    race = _RACE.match(head)
    if race is None:
        return None
    first = _location("at " + race.group("at"))
    second = next((m for m in map(_RACE_AND.match, lines) if m is not None), None)
    if first is None:
        return None
    kind = f"race between {race.group('first').lower()}"
    detail = ""
    if second is not None:
        kind += f" and {second.group('second').lower()}"
        other = _location("at " + second.group("at"))
        if other is not None and other[2] is not None:
            detail = f"the {second.group('second').lower()} at {other[1]}:{other[2]}"
        if second.group("count"):
            detail += (", " if detail else "") + f"{second.group('count')} hazards"
    if race.group("level") == "Warning":
        kind += " (warning)"
    return Finding(tool, kind, first[0], first[1], first[2], detail=detail)


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """Every top-level report line with the indented lines under it."""
    blocks: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        body = _body(raw.rstrip())
        if body is None or not body[1]:
            continue
        indented, words = body
        if indented and blocks:
            blocks[-1][1].append(words)
        elif not indented:
            blocks.append((words, []))
    return blocks


def parse_report(tool: str, text: str) -> list[Finding]:
    """The findings of a report, in its order, those that name a kernel first (a CUDA API
    error that follows an invalid access comes after it); a kernel's own assert() among them,
    marked `device_assert`. Pure."""
    findings: list[Finding] = []
    for head, lines in _blocks(text):
        if "Race reported between" in head:
            race = _race_finding(tool, head, lines)
            if race is not None:
                findings.append(race)
        elif head.startswith("Program hit "):
            findings.append(Finding(tool, head.rstrip(".")))
        elif not head.startswith(_NOT_FINDINGS) and any(ln.startswith("at ") for ln in lines):
            findings.append(_access_finding(tool, head, lines))
    return sorted(findings, key=lambda f: not f.kernel)


def shown(record: Any) -> list[Finding]:
    """The findings a student is shown from a problem's telemetry `sanitizer` record: each bad
    access once, at most MAX_SHOWN (the reasons' lines and the run page's links)."""
    if not isinstance(record, dict):
        return []
    return distinct([Finding.from_dict(f) for f in record.get("findings") or [] if isinstance(f, dict)])[:MAX_SHOWN]


def distinct(findings: list[Finding]) -> list[Finding]:
    """The first finding of each kind of error at each place (many threads of one kernel make
    the same bad access: the feedback names it once)."""
    seen: set[tuple[str, str, str, str, int | None]] = set()
    kept = []
    for f in findings:
        key = (f.tool, f.kind, f.kernel, f.file, f.line)
        if key not in seen:
            seen.add(key)
            kept.append(f)
    return kept


def tool_messages(text: str) -> list[str]:
    """What the tool said of itself (`Error: ...` at the top level that is no race): why it
    could not run a program, or that the program made no CUDA call."""
    return [head for head, _ in _blocks(text)
            if head.startswith(("Error:", "Warning:")) and "Race reported" not in head]


def not_instrumented(text: str) -> bool:
    """The program ended before any CUDA call (the tool then exits 255): no findings, no fault."""
    return any(NOT_INSTRUMENTED in message for message in tool_messages(text))


def relative_source(path: str, root: Path) -> str:
    """A reported source path as the student knows it: the longest tail of it that names a
    file under `root` (the submission's tree: the build ran elsewhere), else its file name."""
    parts = Path(path).parts
    for start in range(len(parts)):
        tail = Path(*parts[start:])
        if tail.is_absolute():
            continue
        if is_job_file(root, tail.as_posix()):
            return tail.as_posix()
    return _only_file_named(Path(path).name, root) or Path(path).name


def _only_file_named(name: str, root: Path, most_entries: int = 5000) -> str | None:
    """The one file called `name` under `root` (relative), or None when there are none or
    several. The tool prints a file name alone; links are not followed and the walk stops
    after `most_entries` (the tree is the submission's)."""
    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        seen += len(dirs) + len(files)
        if name in files:
            found.append((Path(folder) / name).relative_to(root).as_posix())
        if len(found) > 1 or seen > most_entries:
            return None
    return found[0] if found else None


def read_log(folder: Path, limit: int = LOG_READ_BYTES) -> str:
    """The report the tool wrote into the child's `folder` (its head, up to `limit` bytes), read
    through worker/job_files.py: the folder is the submission's, so a link, a FIFO or a hard
    link there gives "", never what it points at."""
    try:
        return read_job_file(folder, LOG_NAME, limit, cut=True).decode(errors="replace")
    except JobFileError:
        return ""
